"""torch.compile's inductor on the mpsrt device, where its memory is host-visible.

Inductor asks a PrivateUse1 device's module (``torch.mpsrt``) for its code generators
(torch.utils.backend_registration's custom-module functions, "Scheduling" first); on that first
request the device registers itself with inductor (``register``), so that ``import mpsrt.torch``
does not import inductor.

On host-visible memory (the cpu backend, lavapipe, integrated GPUs) an mpsrt tensor's data
pointer is a host address, so inductor's C++/OpenMP CPU code (its ``CppScheduling``) computes on
mpsrt tensors as on CPU ones; its buffers are allocated on the device (mpsrt's caching
allocator) and the aten ops it calls dispatch to the device as in eager mode. Stream order: the
device's own kernels (fills, copies, random numbers, mpsrt's GPU kernels) run asynchronously on
its streams, so the wrapper waits for the device before each generated C++ kernel, as the CPU
kernels the fallback runs do (a wait on an idle device costs well under a microsecond). Where
the memory is not host-visible (a discrete GPU, MPSRT_VULKAN_MEMORY=discrete), compiling fails
with an error that names ``backend="aot_eager"``, which works everywhere.

Inductor tells CPU code from GPU code by the device's type being "cpu" in many places. Where
that decides how its C++ code generator is driven, the device answers as the CPU
(_generate_as_cpu); elsewhere inductor makes a GPU's choices for it (Welford variances, dividing
by a constant as multiplying by its reciprocal), which its C++ code computes correctly: inference
and training graphs are checked equal to eager (tests/python/test_torch_compile.py, the zoo).
"""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any

import torch
from torch._inductor.codegen.common import (
    register_backend_for_device,
    register_device_op_overrides,
)
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen
from torch._inductor.custom_graph_pass import CustomGraphModulePass
from torch._inductor.virtualized import V

import mpsrt

_DEVICE = "mpsrt"


def _require_host_memory(device: torch.device | int) -> None:
    index = device if isinstance(device, int) else device.index
    index = index if index is not None else mpsrt.current_device()
    if not mpsrt.get_device_properties(index).unified_memory:
        raise RuntimeError(
            f"[torch] torch.compile's inductor backend generates CPU code, which needs device "
            f"memory the host can address; mpsrt:{index} has discrete memory: use "
            f'torch.compile(model, backend="aot_eager") there'
        )


class _DeviceWaits:
    """Before the generated C++ kernels: a wait for the device's queued work (the first one of a
    wrapper also checks, when the code runs, that the memory is host-visible: inductor's caches
    can hand code compiled for host-visible memory to a runtime with discrete memory)."""

    _memory_checked = False

    def _generate_kernel_call_helper(
        self,
        kernel_name: str,
        call_args: Any,
        *,
        device: Any = None,
        triton: bool = True,
        **kw: Any,
    ) -> None:
        device = device or V.graph.get_current_device_or_throw()
        if triton or device.type != _DEVICE:
            super()._generate_kernel_call_helper(  # type: ignore[misc]
                kernel_name, call_args, device=device, triton=triton, **kw
            )
            return
        _require_host_memory(device)
        if self._memory_checked:
            self.writeline("mpsrt_wait_for_device()")  # type: ignore[attr-defined]
        else:
            self.writeline(f"mpsrt_wait_for_host_kernels({device.index or 0})")  # type: ignore[attr-defined]
            self._memory_checked = True
        self.writeline(self.wrap_kernel_call(kernel_name, call_args))  # type: ignore[attr-defined]


class SubgraphWrapperCodegen(_DeviceWaits, SubgraphPythonWrapperCodegen):
    """A subgraph's wrapper (torch.cond, while_loop bodies): in its parent's module, whose
    header imports the waits."""


class WrapperCodegen(_DeviceWaits, PythonWrapperCodegen):
    """Inductor's Python wrapper, waiting for the device before the generated C++ kernels."""

    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: str | None,
        parent_wrapper: PythonWrapperCodegen | None,
        partition_signatures: Any = None,
    ) -> PythonWrapperCodegen:
        if is_subgraph:
            assert subgraph_name is not None and parent_wrapper is not None
            return SubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return WrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        self.header.splice(
            "from mpsrt import synchronize as mpsrt_wait_for_device\n"
            "from mpsrt.torch._inductor import wait_for_host_kernels as mpsrt_wait_for_host_kernels"
        )


def wait_for_host_kernels(index: int) -> None:
    """Before the generated C++ kernels of a graph run on device `index`: its memory must be
    host-visible, and its queued work done."""
    _require_host_memory(index)
    mpsrt.synchronize(index)


class CppWrapperCodegen(CppWrapperCpu):
    """inductor's cpp_wrapper mode has no wait for the device's streams: refused, clearly."""

    @staticmethod
    def create(*args: Any, **kwargs: Any) -> CppWrapperCpu:
        raise RuntimeError(
            "[torch] torch._inductor.config.cpp_wrapper is not supported on the mpsrt device "
            "(its generated C++ wrapper does not wait for the device's streams); leave it False"
        )


class FxWrapperCodegen(WrapperFxCodegen):
    """Inductor's FX wrapper (its own device handling)."""


def _device_interface() -> type:
    from torch._dynamo.device_interface import CpuInterface

    class MpsrtInterface(CpuInterface):
        """Dynamo's view of the device: the CPU's (the code is CPU code), synchronizing mpsrt."""

        @staticmethod
        def synchronize(device: torch.types.Device = None) -> None:
            torch.mpsrt.synchronize(device)

        @staticmethod
        def current_device() -> int:
            return mpsrt.current_device()

        @staticmethod
        def is_available() -> bool:
            return True

    return MpsrtInterface


_registered = False


def _replace(module: Any, name: str, make: Any) -> None:
    """Replaces inductor's function `name` of `module` by make(torch's function), in `module`
    and in every module of inductor that imported it by name (each holds its own reference)."""
    import sys

    torch_fn = getattr(module, name)
    ours = make(torch_fn)
    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("torch._inductor") and getattr(mod, name, None) is torch_fn:
            setattr(mod, name, ours)


# utils.use_scatter_fallback's parameters, in order.
_SCATTER_FALLBACK_ARGS = (
    "op_overload",
    "reduction_type",
    "self_dtype",
    "src_dtype",
    "src_device_type",
    "src_is_tensor",
)


def _generate_as_cpu() -> None:
    """Inductor tells CPU code from GPU code by the device's type being "cpu". Where that
    decides how its C++ code generator is driven, the device answers as the CPU: the scheduler's
    node.is_cpu() (keeps loop reorderings and fusions its C++ code cannot take away from CPU
    kernels), ir.is_cpu() (the CPU's thresholds for realizing buffers), get_current_backend()
    ("cpp" for the CPU, the GPU's "triton" for any other device: how a kernel's ops are typed and
    emitted) and use_scatter_fallback() (scatter-adds run as torch's kernel on the CPU, not as
    generated atomic adds, which its C++ code mis-indexed in tiled loops: wrong pooling
    gradients)."""
    from torch._inductor import ir, scheduler, utils
    from torch._inductor.virtualized import V

    if getattr(scheduler.BaseSchedulerNode.is_cpu, "_mpsrt", False):
        return

    def node_is_cpu(torch_fn: Any) -> Any:
        def is_cpu(self: scheduler.BaseSchedulerNode) -> bool:
            device = self.get_device()
            return torch_fn(self) or (device is not None and device.type == _DEVICE)

        is_cpu._mpsrt = True  # type: ignore[attr-defined]
        return is_cpu

    def ir_is_cpu(torch_fn: Any) -> Any:
        return lambda x: torch_fn(x) or ir.get_device_type(x) == _DEVICE

    def backend(torch_fn: Any) -> Any:
        def get_current_backend(device_type: str | None = None) -> str:
            if (device_type or V.graph.get_current_device_or_throw().type) == _DEVICE:
                return torch._inductor.config.cpu_backend
            return torch_fn(device_type)

        return get_current_backend

    def scatter_fallback(torch_fn: Any) -> Any:
        def use_scatter_fallback(*args: Any, **kwargs: Any) -> bool:
            bound = dict(zip(_SCATTER_FALLBACK_ARGS, args), **kwargs)
            if bound.get("src_device_type") == _DEVICE:
                bound["src_device_type"] = "cpu"
            return torch_fn(**bound)

        return use_scatter_fallback

    scheduler.BaseSchedulerNode.is_cpu = node_is_cpu(scheduler.BaseSchedulerNode.is_cpu)
    _replace(ir, "is_cpu", ir_is_cpu)
    _replace(utils, "get_current_backend", backend)
    _replace(utils, "use_scatter_fallback", scatter_fallback)


class _CodeIdentity(CustomGraphModulePass):
    """The device's post-grad pass: changes nothing in the graph; its uuid (this module's code
    and mpsrt's version) is part of inductor's cache keys, so code cached by another version of
    the device's code generators is not reused."""

    def __call__(self, gm: torch.fx.GraphModule) -> None:
        return None

    def uuid(self) -> str:
        source = pathlib.Path(__file__).read_bytes()
        return hashlib.sha256(source + mpsrt.__version__.encode()).hexdigest()


def register() -> type:
    """Registers the device with inductor (its code generators, its post-grad pass, its op
    overrides, dynamo's device interface) on the first call; returns the Scheduling. Inductor
    calls it by asking torch.mpsrt for "Scheduling" (its registration of out-of-tree devices);
    the device registers itself then, with its pass, so that torch's registration, which has
    none, is left out (torch.mpsrt offers no "CppWrapperCodegen" for it to find)."""
    global _registered
    if not _registered:
        from torch._dynamo.device_interface import register_interface_for_device

        register_backend_for_device(
            _DEVICE,
            CppScheduling,
            WrapperCodegen,
            CppWrapperCodegen,
            FxWrapperCodegen,
            device_custom_pass=_CodeIdentity(),
        )
        register_device_op_overrides(_DEVICE, CpuDeviceOpOverrides())
        _generate_as_cpu()
        register_interface_for_device(_DEVICE, _device_interface())
        _registered = True
    return CppScheduling
