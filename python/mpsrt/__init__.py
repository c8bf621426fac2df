"""mpsrt: a standalone GPU runtime with the torch.mps Python API.

Backends: ``cpu`` (host memory and worker threads), ``vulkan`` and ``metal``. The backend is
chosen once per process, from ``MPSRT_BACKEND`` or the best one built and available.
"""

from __future__ import annotations

from typing import Any

from . import _C, comm, memory, profiler, random
from ._C import Buffer, DeviceProperties, Event, OutOfMemoryError, Stream
from ._utils import DeviceLike, device_index
from .memory import (
    current_allocated_memory,
    driver_allocated_memory,
    empty,
    empty_cache,
    get_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    recommended_max_memory,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
    set_cache_limit,
    set_per_process_memory_fraction,
)
from .random import (
    Generator,
    bernoulli,
    default_generator,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    rand,
    randint,
    randn,
    random_bits,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .random import _get_rng_state_offset as _get_rng_state_offset  # torch.cuda's private pair
from .random import _set_rng_state_offset as _set_rng_state_offset
from .streams import StreamContext, current_stream, default_stream, set_stream, stream

__version__: str = _C.__version__

# Calls that take no argument need no checks: they are the native functions themselves, so
# they cost one nanobind call.
is_available = _C.is_available
backend = _C.backend
available_backends = _C.available_backends
device_count = _C.device_count
current_device = _C.current_device


def backend_info() -> dict[str, Any]:
    """The active backend and why it was chosen.

    Unset ``MPSRT_BACKEND`` picks metal, then vulkan on a hardware GPU, then cpu, and only
    then a backend whose devices are all software ones (Vulkan's lavapipe).

    Returns:
        dict[str, Any]: ``{"backend": "cpu", "reason": "...", "available": [...], "built":
        [...]}``: the active backend; ``reason`` names what was passed over and how to choose
        it; ``available`` the backends that work here, best first; ``built`` those built into
        this package.

    Raises:
        ValueError: ``MPSRT_BACKEND`` is not a backend name, or names one that is not built.

    Example:
        >>> import mpsrt
        >>> info = mpsrt.backend_info()
        >>> info["backend"] == mpsrt.backend(), info["backend"] in info["available"]
        (True, True)
        >>> set(info["available"]) <= set(info["built"])
        True
    """
    return {
        "backend": _C.backend(),
        "reason": _C.backend_reason(),
        "available": _C.available_backends(),
        "built": _C.built_backends(),
    }


def set_device(device: DeviceLike) -> None:
    """Sets the calling thread's current device, as torch.cuda.set_device.

    Args:
        device: A device index, a device string (``"mps:0"``, ``"<backend>:0"``) or a
            torch.device.

    Raises:
        TypeError: ``device`` is None or has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> previous = mpsrt.current_device()
        >>> mpsrt.set_device("mps:0")
        >>> mpsrt.current_device()
        0
        >>> mpsrt.set_device(previous)
    """
    _C.set_device(device_index(device, optional=False, caller="set_device"))


class device:
    """Context manager that makes a device current and restores the previous one on exit.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None, which
            changes nothing.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> with mpsrt.device(0):
        ...     buf = mpsrt.empty(16)
        ...     mpsrt.current_device()
        0
        >>> buf.device
        0
    """

    def __init__(self, device: DeviceLike) -> None:
        self.idx = -1 if device is None else device_index(device, caller="device")
        self.prev_idx = -1

    def __enter__(self) -> device:
        if self.idx != -1:
            self.prev_idx = _C.set_device(self.idx)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.idx != -1:
            _C.set_device(self.prev_idx)


def get_device_properties(device: DeviceLike = None) -> DeviceProperties:
    """What a device is and offers: name, backend, memory sizes, memory model.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Returns:
        mpsrt.DeviceProperties: The device's properties.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> props = mpsrt.get_device_properties()
        >>> props.backend == mpsrt.backend(), props.total_memory > 0
        (True, True)
    """
    return _C.get_device_properties(device_index(device, caller="get_device_properties"))


def get_device_name(device: DeviceLike = None) -> str:
    """The device's name, as its driver reports it.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Returns:
        str: ``get_device_properties(device).name``.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> mpsrt.get_device_name(0) == mpsrt.get_device_properties(0).name
        True
    """
    return get_device_properties(device).name


def synchronize(device: DeviceLike = None) -> None:
    """Waits on the host for all work on every stream of a device.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.
        RuntimeError: A command on the device failed.

    Example:
        >>> import mpsrt
        >>> buf = mpsrt.empty(1 << 20).fill_(1)
        >>> mpsrt.synchronize()
        >>> mpsrt.current_stream().query()
        True
    """
    _C.synchronize(device_index(device, caller="synchronize"))


def options() -> list[dict[str, str]]:
    """Every ``MPSRT_*`` environment variable the runtime reads, with the value in force.

    Returns:
        list[dict[str, str]]: One dict per variable, with the keys ``"name"``, ``"alias"``
        (its ``PYTORCH_MPS_*`` name or ``""``), ``"value"`` (as set, ``""`` when unset),
        ``"default"`` and ``"help"``.

    Example:
        >>> import mpsrt
        >>> names = [o["name"] for o in mpsrt.options()]
        >>> "MPSRT_BACKEND" in names
        True
        >>> sorted(mpsrt.options()[0])
        ['alias', 'default', 'help', 'name', 'value']
    """
    return _C.options()


__all__ = [
    "Buffer",
    "DeviceProperties",
    "Event",
    "Generator",
    "OutOfMemoryError",
    "Stream",
    "StreamContext",
    "__version__",
    "available_backends",
    "backend",
    "backend_info",
    "bernoulli",
    "comm",
    "current_allocated_memory",
    "current_device",
    "current_stream",
    "default_generator",
    "default_stream",
    "device",
    "device_count",
    "driver_allocated_memory",
    "empty",
    "empty_cache",
    "get_device_name",
    "get_device_properties",
    "get_per_process_memory_fraction",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "is_available",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "options",
    "profiler",
    "rand",
    "randint",
    "randn",
    "random",
    "random_bits",
    "recommended_max_memory",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_cache_limit",
    "set_device",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]
