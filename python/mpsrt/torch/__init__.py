"""mpsrt as a PyTorch device: ``import mpsrt.torch`` registers the device ``"mpsrt"``.

After the import, ``torch.empty(..., device="mpsrt")``, ``t.to("mpsrt")``, ``t.mpsrt()``,
``t.is_mpsrt``, storages (``t.untyped_storage().is_mpsrt``, ``storage.mpsrt()``),
``torch.save``/``torch.load`` of mpsrt tensors and the device module ``torch.mpsrt`` work, and
``torch.accelerator`` is mpsrt. Tensors are allocated by mpsrt's caching allocator, so
``mpsrt.memory_allocated()``, ``torch.mpsrt.memory_allocated()`` and
``torch.accelerator.memory_allocated()`` agree.

The glue torch calls (``mpsrt/torch/csrc``, prebuilt or compiled at the first import: see
``_glue``) reaches the runtime that ``mpsrt._C`` holds through mpsrt's C API table only: why and
how, docs/torch-device.md, "One runtime per process".
"""

from __future__ import annotations

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised by the no-torch test in a subprocess
    raise ImportError(
        "[torch] mpsrt.torch needs PyTorch, which is not installed: "
        "`pip install torch` (the CPU build is enough); mpsrt itself works without it"
    ) from e

import re
from typing import Any

import mpsrt
from mpsrt import _torch_autoload

from . import _glue

# torch's autoload never compiles: where the glue would need a build it stops here, before
# anything is registered (the modules below register the process group backend), so that an
# explicit `import mpsrt.torch` later imports this package afresh and builds.
if _torch_autoload.autoloading() and _glue.find() is None:
    raise _torch_autoload.NoGlueWithoutBuild(
        "[torch] no prebuilt glue for this torch and no finished build: `import mpsrt.torch` "
        "builds it"
    )

from . import _decomp, _distributed, _module  # noqa: F401 (_distributed: the dist backend "mpsrt")
from ._reference import cpu_reference_rng

_BACKEND = "mpsrt"

# torch.save tags each storage with a location and torch.load restores it through the
# deserializer registered for that location (torch.serialization.register_package). torch's
# own MPS deserializer (priority 21) claims every location that starts with "mps", "mpsrt:0"
# included, so ours is registered ahead of it.
_SERIALIZATION_PRIORITY = 19
_LOCATION = re.compile(r"mpsrt(:[0-9]+)?")


def _location_tag(storage: Any) -> str | None:
    if storage.device.type != _BACKEND:
        return None
    index = storage.device.index
    return f"{_BACKEND}:{mpsrt.current_device() if index is None else index}"


def _restore_location(storage: Any, location: str) -> Any:
    if not _LOCATION.fullmatch(location):
        return None
    index = torch.device(location).index
    if index is None:
        index = mpsrt.current_device()
    n = mpsrt.device_count()
    if index >= n:  # torch's error and text (torch.serialization._validate_device)
        raise RuntimeError(
            f"Attempting to deserialize object on {_BACKEND.upper()} device {index} but "
            f"torch.{_BACKEND}.device_count() is {n}. Please use torch.load with "
            "map_location to map your storages to an existing device."
        )
    return storage.to(device=torch.device(_BACKEND, index))


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
    _decomp.register()  # after the glue: its own kernels are kept
    torch._register_device_module(_BACKEND, _module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    torch.serialization.register_package(_SERIALIZATION_PRIORITY, _location_tag, _restore_location)


_register()

__all__ = ["cpu_reference_rng"]
