"""The device module ``torch.mpsrt``: what torch requires of a PrivateUse1 module, and the
torch.cuda-style functions, answered by mpsrt's one runtime."""

from __future__ import annotations

import atexit
import os
import time
from pathlib import Path
from typing import Any

import torch

import mpsrt

_initialized = True  # the runtime starts with mpsrt; nothing to do lazily


def _autograd_device_threads_running() -> bool:
    """Whether torch's autograd engine has started its per-device worker threads (named
    pt_autograd_N; Linux names them in /proc). True where that cannot be read."""
    try:
        tasks = Path("/proc/self/task")
        names = [(tasks / t / "comm").read_text() for t in os.listdir(tasks)]
    except OSError:
        return True
    return any(n.startswith("pt_autograd") for n in names)


def _let_autograd_threads_drop_their_tasks() -> None:
    """At interpreter exit, before finalization: a moment with the GIL released.

    torch (2.13) keeps a Python object (the caller's contextvars context) in every backward's
    GraphTask; the device's autograd worker thread may drop the last reference to a finished
    GraphTask just after backward() returned. If that happens once the interpreter finalizes,
    the thread's GIL acquisition ends it with a forced unwind through a noexcept destructor:
    "terminate called without an active exception" and exit code 134, in about half the runs
    of a script that ends right after a backward on the device. Letting those threads run for a
    few milliseconds first closes the window."""
    if _autograd_device_threads_running():
        time.sleep(0.005)


atexit.register(_let_autograd_threads_drop_their_tasks)


def _index(device: Any = None) -> int:
    """The mpsrt device index of None (current), an int, 'mpsrt[:N]' or a torch.device."""
    if device is None:
        return mpsrt.current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "mpsrt":
            raise ValueError(f"[torch] expected an mpsrt device, got {device}")
        if device.index is None:
            return mpsrt.current_device()
        device = device.index
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(
            f"[torch] expected a device index, 'mpsrt:N' or a torch.device; got {device!r}"
        )
    n = mpsrt.device_count()
    if device < 0 or device >= n:
        # A RuntimeError, as torch.cuda's "invalid device ordinal".
        raise RuntimeError(
            f"The device index is out of range. It must be in [0, {n}), but got {device}."
        )
    return device


class device:
    """Context manager that makes ``device`` the current mpsrt device (torch.cuda.device's
    semantics; None: no change). torch's storage ``.to("mpsrt:N")`` uses it."""

    def __init__(self, device: Any) -> None:
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        self.prev_idx = mpsrt.current_device()
        if self.idx >= 0 and self.idx != self.prev_idx:
            mpsrt.set_device(self.idx)

    def __exit__(self, *exc: object) -> bool:
        if self.idx >= 0 and self.idx != self.prev_idx:
            mpsrt.set_device(self.prev_idx)
        return False


def is_available() -> bool:
    return mpsrt.is_available()


def device_count() -> int:
    return mpsrt.device_count()


def current_device() -> int:
    return mpsrt.current_device()


def set_device(device: Any) -> None:
    mpsrt.set_device(_index(device))


def synchronize(device: Any = None) -> None:
    mpsrt.synchronize(_index(device))


def is_initialized() -> bool:
    return _initialized


def init() -> None:
    """Nothing to do: the runtime started with ``import mpsrt``."""


def _lazy_init() -> None:
    """Torch calls this before using the device; the runtime is already up."""


def _lazy_call(callable: Any, **kwargs: Any) -> None:
    """torch.cuda's deferred call (run once the device is initialised): the runtime is always
    up, so it runs now."""
    callable()


_forked = False
_bad_fork: bool | None = None


def _after_fork_in_child() -> None:
    global _forked, _bad_fork
    _forked, _bad_fork = True, None


os.register_at_fork(after_in_child=_after_fork_in_child)


def _is_in_bad_fork() -> bool:
    """True in a child forked after mpsrt started whose backend cannot cross a fork (vulkan,
    metal: mpsrt raises there, saying to use 'spawn'); torch then skips the device when it
    seeds (torch.manual_seed in DataLoader workers). On cpu the child gets a fresh runtime."""
    global _bad_fork
    if not _forked:
        return False
    if _bad_fork is None:
        try:
            mpsrt.device_count()
            _bad_fork = False
        except RuntimeError as e:
            if "forked" not in str(e):
                raise
            _bad_fork = True
    return _bad_fork


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


# -- random numbers: mpsrt's Philox generators (the 44-byte state as uint8 tensors)
def manual_seed(seed: int) -> None:
    mpsrt.random.default_generator(mpsrt.current_device()).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    mpsrt.manual_seed_all(int(seed))


def seed() -> None:
    mpsrt.seed()


def seed_all() -> None:
    mpsrt.seed_all()


def initial_seed() -> int:
    return mpsrt.initial_seed()


def get_rng_state(device: Any = "mpsrt") -> torch.Tensor:
    return torch.from_numpy(mpsrt.get_rng_state(_index(device)).copy())


def set_rng_state(new_state: torch.Tensor, device: Any = "mpsrt") -> None:
    mpsrt.set_rng_state(new_state.contiguous().cpu(), _index(device))


def _get_rng_state_offset(device: Any = "mpsrt") -> int:
    """torch.cuda._get_rng_state_offset: the device's default generator's Philox offset."""
    return mpsrt.random.default_generator(_index(device)).get_offset()


def _set_rng_state_offset(offset: int, device: Any = "mpsrt") -> None:
    """torch.cuda._set_rng_state_offset: sets the device's default generator's Philox offset."""
    mpsrt.random.default_generator(_index(device)).set_offset(offset)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: Any) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


# -- memory: mpsrt's caching allocator, which torch's mpsrt tensors come from
def memory_allocated(device: Any = None) -> int:
    return mpsrt.memory_allocated(_index(device))


def max_memory_allocated(device: Any = None) -> int:
    return mpsrt.max_memory_allocated(_index(device))


def memory_reserved(device: Any = None) -> int:
    return mpsrt.memory_reserved(_index(device))


def max_memory_reserved(device: Any = None) -> int:
    return mpsrt.max_memory_reserved(_index(device))


def memory_stats(device: Any = None) -> dict[str, Any]:
    return mpsrt.memory_stats(_index(device))


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    return mpsrt.memory_summary(_index(device), abbreviated=abbreviated)


def reset_peak_memory_stats(device: Any = None) -> None:
    mpsrt.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    mpsrt.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    mpsrt.empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    return mpsrt.mem_get_info(_index(device))


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    mpsrt.set_per_process_memory_fraction(fraction, _index(device))


# -- streams: torch.Stream objects whose ids are mpsrt streams (the DeviceGuardImpl maps them)
Stream = torch.Stream
Event = torch.Event


def current_stream(device: Any = None) -> torch.Stream:
    return torch.accelerator.current_stream(_index(device))


def default_stream(device: Any = None) -> torch.Stream:
    d = _index(device)
    current = torch.accelerator.current_stream(d)  # a torch.Stream of this device type
    sid = torch.ops.mpsrt_torch._default_stream(d)
    return torch.Stream(stream_id=sid, device_index=d, device_type=current.device_type)


def set_stream(stream: torch.Stream) -> None:
    torch.accelerator.set_stream(stream)


class StreamContext:
    """torch.cuda.StreamContext for mpsrt: makes `stream` its device's current stream inside the
    block and restores the previous one after it; None does nothing."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self._previous: torch.Stream | None = None

    def __enter__(self) -> torch.Stream | None:
        if self.stream is not None:
            self._previous = torch.accelerator.current_stream(self.stream.device_index)
            torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            torch.accelerator.set_stream(self._previous)
            self._previous = None


def stream(stream: torch.Stream | None) -> StreamContext:
    """torch.cuda.stream for mpsrt: `with torch.mpsrt.stream(s): ...`."""
    return StreamContext(stream)


def fallback_counts() -> dict[str, int]:
    """The aten ops the device ran as CPU kernels (ops without an mpsrt kernel), by name
    (``"aten::add.Tensor"``), with their calls since the last :func:`reset_fallback_counts`. On
    discrete memory each such call copies its tensors to the host and back."""
    return dict(torch.ops.mpsrt_torch._fallback_op_counts())


def reset_fallback_counts() -> None:
    """Starts :func:`fallback_counts` afresh."""
    torch.ops.mpsrt_torch._reset_fallback_counts()


def _set_kernels(mode: str) -> str:
    """Where the device's ops run from now on, for every device: ``"auto"`` (mpsrt's kernels on
    a GPU, CPU kernels on the cpu backend and CPU-type devices), ``"device"`` (mpsrt's kernels
    wherever the device has them) or ``"cpu"``; as ``MPSRT_TORCH_KERNELS``, which sets it at
    start. Returns the previous mode (for tests and context managers)."""
    if not isinstance(mode, str):
        raise TypeError(f"mode must be a str, got {type(mode).__name__}")
    return torch.ops.mpsrt_torch._set_kernels(mode)


def _kernels_enabled(device: Any = None) -> bool:
    """True when the device's ops run on mpsrt's kernels (the device has them and the mode asks
    for them there)."""
    return bool(torch.ops.mpsrt_torch._kernels_enabled(_index(device)))


def _kernel_ops() -> list[str]:
    """The aten ops that have a kernel of mpsrt's (``"aten::add.Tensor"``, sorted): where the
    device runs its kernels they run there unless a call declines (then the fallback runs it)."""
    return list(torch.ops.mpsrt_torch._kernel_ops())


def kernel_ops(device: Any = None) -> list[str]:
    """The aten ops that run on mpsrt's kernels on ``device`` (default: the current device) in
    the current mode, by name (``"aten::add.Tensor"``), sorted: every op with a kernel of
    mpsrt's where the device runs its kernels (a GPU; any device under
    ``MPSRT_TORCH_KERNELS=device``), and none where it runs CPU kernels (the cpu backend, a
    CPU-type device such as lavapipe in the default mode ``auto``). A call of a listed op still
    runs as a CPU kernel where its kernel declines it (a dtype or size it does not take); every
    op that ran so is in :func:`fallback_counts`. docs/ops.md is the table of these ops by
    kernel family (``python -m mpsrt.torch.op_table``)."""
    return _kernel_ops() if _kernels_enabled(device) else []


def __getattr__(name: str) -> Any:
    # torch.compile's inductor asks the device's module for its code generators ("Scheduling"
    # first); the device registers itself with inductor then, on first use, so that importing
    # the device does not import inductor.
    if name == "Scheduling":
        from mpsrt.torch import _inductor

        return _inductor.register()
    raise AttributeError(f"module 'torch.mpsrt' has no attribute '{name}'")
