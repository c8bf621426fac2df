"""The torch.distributed backend ``"mpsrt"``: collectives on mpsrt tensors, run by gloo.

gloo takes CPU (and CUDA) tensors only. On unified memory (mpsrt's memory model where the host
addresses the device memory) each collective hands gloo CPU tensors that *alias* the mpsrt
tensors' memory: no copy in or out, gloo reads and writes the device memory in place. On
discrete memory, which the host cannot address, gloo gets host copies of the mpsrt tensors
(through mpsrt's staging path), and what it writes (the collective's first argument: its
outputs, or the tensors it reduces in place) is copied back into the mpsrt tensors when the
work completes. First the current stream of each mpsrt device involved is synchronized, so that
work queued on it (fills, copies) has landed. The work returned completes when gloo's does; its
future's value holds the caller's mpsrt tensors (what DDP's reducer reads back), and they are
kept alive until then. CPU tensors
go to gloo as they are, so one group serves both (object collectives, e.g.
``all_gather_object``, use CPU tensors); one collective mixing the two raises ValueError.

``import mpsrt.torch`` registers the backend "mpsrt" as the default backend of device type
"mpsrt", so ``dist.init_process_group()`` (torch picks the accelerator's default backend) and
``dist.init_process_group("mpsrt")`` make such a group. ``"gloo"`` alone cannot: torch hands
the device types of gloo's capability list (cpu, cuda) to one gloo backend, which refuses other
devices. Beyond gloo: ``ReduceOp.AVG`` on floating-point and complex tensors (a SUM, then a
division by the group size), and the coalesced all-gather and reduce-scatter that C++ callers
(the functional collectives: DTensor, FSDP2's full_tensor()) ask a group for.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

import mpsrt

BACKEND = "mpsrt"
_DEVICE = "mpsrt"
_AVAILABLE = dist.is_available() and dist.is_gloo_available()
# torch builds without torch.distributed have no ProcessGroup or Work to derive from.
_ProcessGroup: Any = dist.ProcessGroup if _AVAILABLE else object
_Work: Any = dist.Work if _AVAILABLE else object

# A ProcessGroup method (what dist.* and C++ callers such as DDP's reducer call) -> the gloo
# method that runs it.
_GLOO_NAMES = {
    "allreduce": "allreduce",
    "allreduce_coalesced": "allreduce_coalesced",
    "broadcast": "broadcast",
    "allgather": "allgather",
    "allgather_coalesced": "allgather_coalesced",
    "all_gather_single": "_allgather_base",
    "_allgather_base": "_allgather_base",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_single": "_reduce_scatter_base",
    "_reduce_scatter_base": "_reduce_scatter_base",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "alltoall": "alltoall",
    "all_to_all_single": "alltoall_base",
    "alltoall_base": "alltoall_base",
    "send": "send",
    "recv": "recv",
    "recv_anysource": "recv_anysource",
}
# The reductions; their first argument holds the tensors they write.
_REDUCTIONS = {
    "allreduce",
    "allreduce_coalesced",
    "reduce_scatter",
    "reduce_scatter_single",
    "_reduce_scatter_base",
    "reduce",
}


def _host_alias(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the same bytes as the mpsrt tensor ``t`` (dtype, sizes and strides
    kept), with no copy: a ctypes array header over the memory, viewed by torch.frombuffer.
    The alias keeps ``t`` alive in an attribute, and torch keeps a tensor's Python attributes
    while C++ (gloo's work) still holds the tensor, so the memory outlives gloo's use of it."""
    if t.numel() == 0:
        alias = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype)
    else:
        span = 1 + sum((n - 1) * s for n, s in zip(t.size(), t.stride()))  # elements touched
        raw = (ctypes.c_char * (span * t.element_size())).from_address(t.data_ptr())
        flat = torch.frombuffer(raw, dtype=t.dtype, count=span)
        alias = flat.as_strided(t.size(), t.stride())
    alias._mpsrt_tensor = t
    return alias


def _host_copy(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy of the mpsrt tensor ``t`` (discrete memory, which the host cannot alias), with
    ``t`` in an attribute: what gloo writes into the copy goes back into ``t`` when the
    collective completes (and ``t`` is kept alive until then)."""
    copy = t.cpu()
    copy._mpsrt_tensor = t
    return copy


def _original(t: torch.Tensor) -> torch.Tensor:
    """The mpsrt tensor that ``t`` aliases, or ``t``."""
    return getattr(t, "_mpsrt_tensor", t)


def _map(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``value`` with ``fn`` applied to each tensor in it (nested lists and tuples)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_map(v, fn) for v in value)
    return value


def _tensors(value: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    _map(value, lambda t: out.append(t) or t)
    return out


def _sum_options(opts: Any) -> Any:
    """A copy of reduction options ``opts`` with ReduceOp.SUM."""
    copy = type(opts)()
    for name in dir(opts):
        if not name.startswith("_") and name != "reduceOp":
            try:
                setattr(copy, name, getattr(opts, name))
            except (AttributeError, TypeError):
                pass  # read-only
    copy.reduceOp = dist.ReduceOp.SUM
    return copy


class _WaitWork(_Work):
    """For gloo's works that have no future (point-to-point, reduce_scatter): waiting waits on
    gloo's work, then finishes the collective (AVG's division)."""

    def __init__(self, work: Any, finish: Callable[[Any], Any]) -> None:
        super().__init__()
        self._work = work
        self._finish: Callable[[Any], Any] | None = finish

    def wait(self, timeout: timedelta | None = None) -> bool:
        done = self._work.wait() if timeout is None else self._work.wait(timeout)
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish(None)
        return done

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def is_success(self) -> bool:
        return self._work.is_success()

    def exception(self) -> Any:
        return self._work.exception()

    def source_rank(self) -> int:
        return self._work.source_rank()

    def _source_rank(self) -> int:
        return self._work._source_rank()


class ProcessGroupMpsrt(_ProcessGroup):
    """A process group that runs collectives on mpsrt and CPU tensors with gloo (see the
    module's docstring). ``dist.init_process_group`` and ``dist.new_group`` make it for the
    backend "mpsrt"; ``gloo`` is the gloo process group underneath."""

    def __init__(self, gloo: Any) -> None:
        super().__init__(gloo.rank(), gloo.size())
        self.gloo = gloo
        self._name = ""
        self._desc = ""

    def getBackendName(self) -> str:
        return BACKEND

    # torch names each group it makes (functional collectives find a group by its name); a
    # group without C++ backends has to keep the name itself.
    def setGroupName(self, name: str) -> None:
        self._name = name

    def getGroupName(self) -> str:
        return self._name

    def setGroupDesc(self, desc: str) -> None:
        self._desc = desc

    def getGroupDesc(self) -> str:
        return self._desc

    def __repr__(self) -> str:
        return f"ProcessGroupMpsrt(rank={self.rank()}, size={self.size()})"

    # What torch's helpers ask a group about its devices (object collectives then pick "cpu";
    # _set_pg_timeout reaches gloo): this group serves both device types, with gloo.
    @property
    def _device_types(self) -> list[torch.device]:
        return [torch.device("cpu"), torch.device(_DEVICE)]

    def _get_backend(self, device: Any) -> Any:
        kind = torch.device(device).type
        if kind not in ("cpu", _DEVICE):
            raise RuntimeError(
                f"[distributed] the {BACKEND} process group serves cpu and {_DEVICE} tensors, "
                f"not {kind}"
            )
        return self.gloo

    def _run(self, op: str, *args: Any) -> Any:
        """Runs gloo's ``op`` on ``args`` (tensors, lists of them, then options or ranks)."""
        tensors = _tensors(args)
        kinds = {t.device.type for t in tensors}
        avg = op in _REDUCTIONS and getattr(args[-1], "reduceOp", None) == dist.ReduceOp.AVG
        gloo_op = getattr(self.gloo, _GLOO_NAMES[op])
        if not avg and _DEVICE not in kinds:
            return gloo_op(*args)  # no mpsrt tensor: gloo as is, with its own checks
        if len(kinds) > 1 or not kinds <= {"cpu", _DEVICE}:
            raise ValueError(
                f"[distributed] {op}: the tensors of one collective must be all on mpsrt or "
                f"all on cpu; got {', '.join(sorted(kinds))}. Move them with .to('mpsrt') or "
                ".cpu()"
            )
        if avg:
            bad = {str(t.dtype) for t in tensors if not (t.is_floating_point() or t.is_complex())}
            if bad:
                raise ValueError(
                    f"[distributed] {op}: ReduceOp.AVG needs floating-point or complex tensors, "
                    f"got {', '.join(sorted(bad))}; use ReduceOp.SUM and divide"
                )
            args = (*args[:-1], _sum_options(args[-1]))
        indices = sorted({t.device.index for t in tensors if t.device.type == _DEVICE})
        for index in indices:
            mpsrt.current_stream(index).synchronize()  # queued writes land before gloo reads
        unified = all(mpsrt.get_device_properties(i).unified_memory for i in indices)
        to_host = _host_alias if unified else _host_copy
        gloo_args = _map(args, lambda t: to_host(t) if t.device.type == _DEVICE else t)
        work = gloo_op(*gloo_args)
        divide: list[torch.Tensor] = []
        if avg and (op != "reduce" or self.rank() == args[-1].rootRank):
            divide = _tensors(gloo_args[0])
        # Host copies of what the collective writes, to copy back (discrete memory).
        written = [] if unified or op == "send" else _tensors(gloo_args[0])
        size = self.size()

        def finish(value: Any) -> Any:
            for t in divide:
                t.div_(size)
            divide.clear()
            for t in written:
                if t.device.type == "cpu" and _original(t) is not t:
                    _original(t).copy_(t)
            written.clear()
            return _map(value, _original)  # the caller's mpsrt tensors, for DDP's reducer

        try:
            future = work.get_future()
        except RuntimeError:  # "Work::getFuture not implemented"
            return _WaitWork(work, finish)
        return torch._C._distributed_c10d._create_work_from_future(
            future.then(lambda f: finish(f.value()))  # value(): gloo's error, if any
        )

    # The collectives, by the names torch calls them on a process group.
    def allreduce(self, tensors, opts=None):
        return self._run("allreduce", tensors, opts or dist.AllreduceOptions())

    def allreduce_coalesced(self, tensors, opts=None):
        return self._run("allreduce_coalesced", tensors, opts or dist.AllreduceCoalescedOptions())

    def broadcast(self, tensors, opts=None):
        return self._run("broadcast", tensors, opts or dist.BroadcastOptions())

    def allgather(self, output_lists, inputs, opts=None):
        return self._run("allgather", output_lists, inputs, opts or dist.AllgatherOptions())

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        return self._run(
            "allgather_coalesced", output_lists, inputs, opts or dist.AllgatherOptions()
        )

    def all_gather_single(self, output, input, opts=None):
        return self._run("all_gather_single", output, input, opts or dist.AllgatherOptions())

    def _allgather_base(self, output, input, opts=None):
        return self._run("_allgather_base", output, input, opts or dist.AllgatherOptions())

    def reduce_scatter(self, outputs, input_lists, opts=None):
        return self._run(
            "reduce_scatter", outputs, input_lists, opts or dist.ReduceScatterOptions()
        )

    def reduce_scatter_single(self, output, input, opts=None):
        return self._run(
            "reduce_scatter_single", output, input, opts or dist.ReduceScatterOptions()
        )

    def _reduce_scatter_base(self, output, input, opts=None):
        return self._run("_reduce_scatter_base", output, input, opts or dist.ReduceScatterOptions())

    # The coalesced forms, which C++ callers reach through torch's trampoline (the functional
    # collectives: DTensor's full_tensor() and redistribute, reduce_scatter_tensor): one
    # collective per pair in turn, each complete before the next starts; the last one's work.
    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._coalesced(
            "all_gather_single", outputs, inputs, opts or dist.AllgatherOptions()
        )

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        return self._coalesced("reduce_scatter_single", outputs, inputs, opts)

    def _coalesced(self, op: str, outputs: list, inputs: list, opts: Any) -> Any:
        if len(outputs) != len(inputs) or not outputs:
            raise ValueError(
                f"[distributed] {op} (coalesced): {len(outputs)} outputs for {len(inputs)} "
                "inputs; expected one output per input, at least one"
            )
        work = None
        for out, inp in zip(outputs, inputs):
            if work is not None:
                work.wait()
            work = self._run(op, out, inp, opts)
        return work

    def reduce(self, tensors, opts=None):
        return self._run("reduce", tensors, opts or dist.ReduceOptions())

    def gather(self, output_lists, inputs, opts=None):
        return self._run("gather", output_lists, inputs, opts or dist.GatherOptions())

    def scatter(self, outputs, input_lists, opts=None):
        return self._run("scatter", outputs, input_lists, opts or dist.ScatterOptions())

    def alltoall(self, outputs, inputs, opts=None):
        return self._run("alltoall", outputs, inputs, opts or dist.AllToAllOptions())

    def all_to_all_single(self, output, input, output_splits, input_splits, opts=None):
        return self._run(
            "all_to_all_single",
            output,
            input,
            output_splits,
            input_splits,
            opts or dist.AllToAllOptions(),
        )

    def alltoall_base(self, output, input, output_splits, input_splits, opts=None):
        return self._run(
            "alltoall_base",
            output,
            input,
            output_splits,
            input_splits,
            opts or dist.AllToAllOptions(),
        )

    def send(self, tensors, dst, tag=0):
        return self._run("send", tensors, dst, tag)

    def recv(self, tensors, src, tag=0):
        return self._run("recv", tensors, src, tag)

    def recv_anysource(self, tensors, tag=0):
        return self._run("recv_anysource", tensors, tag)

    def barrier(self, opts=None):
        return self.gloo.barrier(opts or dist.BarrierOptions())


def _create(opts: Any, backend_options: Any) -> ProcessGroupMpsrt:
    """What torch calls to make a group of the backend (register_backend, extended_api)."""
    timeout = opts.timeout if isinstance(opts.timeout, timedelta) else timedelta(minutes=30)
    gloo = dist.ProcessGroupGloo(opts.store, opts.group_rank, opts.group_size, timeout)
    gloo.options.global_ranks_in_group = list(opts.global_ranks_in_group)
    gloo.options.group_name = opts.group_id
    gloo._set_sequence_number_for_group()  # as torch does for its own gloo groups
    return ProcessGroupMpsrt(gloo)


def register() -> None:
    """Registers the backend "mpsrt", the default backend of device type "mpsrt" (once)."""
    if _AVAILABLE and BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", _DEVICE])


register()
