"""mpsrt as a PyTorch device: ``import mpsrt.torch`` registers the device ``"mpsrt"``.

After the import, ``torch.empty(..., device="mpsrt")``, ``t.to("mpsrt")``, ``t.mpsrt()``,
``t.is_mpsrt`` and the device module ``torch.mpsrt`` work, and ``torch.accelerator`` is
mpsrt. Tensors are allocated by mpsrt's caching allocator, so ``mpsrt.memory_allocated()``,
``torch.mpsrt.memory_allocated()`` and ``torch.accelerator.memory_allocated()`` agree.

How the process keeps ONE runtime: the glue torch calls (csrc/torch/mpsrt_torch.cpp, shipped
in this package as ``mpsrt/torch/csrc``) is compiled against the installed torch at the first
import (``torch.utils.cpp_extension.load``: cached, rebuilt when its source, mpsrt's version or
torch's version changes) and reaches the runtime that ``mpsrt._C`` holds only through mpsrt's
versioned C API table, the capsule ``mpsrt._C._c_api`` (header ``mpsrt/include/mpsrt/c_api.h``).
It never links a copy of the core. See the README's "PyTorch device" section.
"""

from __future__ import annotations

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised by the no-torch test in a subprocess
    raise ImportError(
        "[torch] mpsrt.torch needs PyTorch, which is not installed: "
        "`pip install torch` (the CPU build is enough); mpsrt itself works without it"
    ) from e

from . import _glue, _module

_BACKEND = "mpsrt"


def _register() -> None:
    name = torch._C._get_privateuse1_backend_name()
    if name == _BACKEND and hasattr(torch, _BACKEND):
        return  # already registered in this process
    if name != "privateuseone":
        raise RuntimeError(
            f"[torch] torch's PrivateUse1 backend is already named {name!r}; "
            "mpsrt needs it as 'mpsrt' (one out-of-tree backend per process)"
        )
    torch.utils.rename_privateuse1_backend(_BACKEND)
    _glue.load()
    torch._register_device_module(_BACKEND, _module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=False
    )


_register()

__all__: list[str] = []
