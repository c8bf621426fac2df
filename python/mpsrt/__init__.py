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

    ``{"backend": "cpu", "reason": "...", "available": [...], "built": [...]}``: unset
    ``MPSRT_BACKEND`` picks metal, then vulkan on a hardware GPU, then cpu, and only then a
    backend whose devices are all software ones (Vulkan's lavapipe); ``reason`` names what
    was passed over and how to choose it. ``available`` is best first.
    """
    return {
        "backend": _C.backend(),
        "reason": _C.backend_reason(),
        "available": _C.available_backends(),
        "built": _C.built_backends(),
    }


def set_device(device: DeviceLike) -> None:
    """Sets the calling thread's current device (an index or a device string)."""
    _C.set_device(device_index(device, optional=False, caller="set_device"))


class device:
    """Context manager that makes `device` current and restores the previous one on exit.

    ``device(None)`` changes nothing.
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
    """Name, backend, total_memory, recommended_max_memory, unified_memory, max_buffer_size."""
    return _C.get_device_properties(device_index(device, caller="get_device_properties"))


def get_device_name(device: DeviceLike = None) -> str:
    return get_device_properties(device).name


def synchronize(device: DeviceLike = None) -> None:
    """Waits for all work on every stream of the device (default: the current device)."""
    _C.synchronize(device_index(device, caller="synchronize"))


def options() -> list[dict[str, str]]:
    """Every MPSRT_* environment variable: name, alias, value in force, default, help."""
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
