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
    """Context manager that makes a device the current mpsrt device for its block, as
    torch.cuda.device; torch's storage ``.to("mpsrt:N")`` uses it.

    Args:
        device: A device index, ``"mpsrt:N"`` or a torch.device of type mpsrt; None changes
            nothing.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> with torch.mpsrt.device(0):
        ...     torch.mpsrt.current_device()
        0
    """

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
    """Whether the device "mpsrt" has a device, as torch.cuda.is_available.

    Returns:
        bool: :func:`mpsrt.is_available`.

    Example:
        >>> import torch, mpsrt.torch
        >>> torch.mpsrt.is_available()
        True
    """
    return mpsrt.is_available()


def device_count() -> int:
    """The number of mpsrt devices, as torch.cuda.device_count.

    Returns:
        int: :func:`mpsrt.device_count`, at least 1.

    Example:
        >>> import torch, mpsrt.torch
        >>> torch.mpsrt.device_count() == torch.accelerator.device_count() >= 1
        True
    """
    return mpsrt.device_count()


def current_device() -> int:
    """The calling thread's current mpsrt device, as torch.cuda.current_device.

    Returns:
        int: The device's index (:func:`mpsrt.current_device`).

    Example:
        >>> import torch, mpsrt.torch
        >>> torch.mpsrt.current_device() == torch.empty(1, device="mpsrt").device.index
        True
    """
    return mpsrt.current_device()


def set_device(device: Any) -> None:
    """Sets the calling thread's current mpsrt device, as torch.cuda.set_device.

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> previous = torch.mpsrt.current_device()
        >>> torch.mpsrt.set_device("mpsrt:0")
        >>> torch.mpsrt.current_device()
        0
        >>> torch.mpsrt.set_device(previous)
    """
    mpsrt.set_device(_index(device))


def synchronize(device: Any = None) -> None:
    """Waits on the host for all work on every stream of an mpsrt device, as
    torch.cuda.synchronize.

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> x = torch.ones(1024, device="mpsrt") * 2
        >>> torch.mpsrt.synchronize()
    """
    mpsrt.synchronize(_index(device))


def is_initialized() -> bool:
    """Whether the device is initialised, as torch.cuda.is_initialized: always True, since the
    runtime starts with ``import mpsrt``.

    Returns:
        bool: True.

    Example:
        >>> import torch, mpsrt.torch
        >>> torch.mpsrt.is_initialized()
        True
    """
    return _initialized


def init() -> None:
    """Initialises the device, as torch.cuda.init: nothing to do, the runtime started with
    ``import mpsrt``.

    Example:
        >>> import torch, mpsrt.torch
        >>> torch.mpsrt.init()
        >>> torch.mpsrt.is_initialized()
        True
    """


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
    """The dtypes torch.autocast may use on the device (what torch asks of a device module).

    Returns:
        list[torch.dtype]: ``[torch.float16, torch.bfloat16]``.

    Example:
        >>> import torch, mpsrt.torch
        >>> torch.mpsrt.get_amp_supported_dtype()
        [torch.float16, torch.bfloat16]
    """
    return [torch.float16, torch.bfloat16]


# -- random numbers: mpsrt's Philox generators (the 44-byte state as uint8 tensors)
def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator (mpsrt's Philox) and resets its offset to
    0, as torch.cuda.manual_seed.

    The device's random ops (torch.rand, torch.randn, ...) give the same numbers on every
    backend, and the same as :func:`mpsrt.rand` for the same seed and offset.

    Args:
        seed: An int (or anything ``int()`` takes), -2**63 <= seed < 2**64.

    Raises:
        TypeError: ``int(seed)`` fails with a TypeError.
        ValueError: ``int(seed)`` fails with a ValueError, or the seed is out of range.

    Example:
        >>> import torch, mpsrt.torch
        >>> state = torch.mpsrt.get_rng_state()  # to restore it afterwards
        >>> torch.mpsrt.manual_seed(0)
        >>> torch.rand(3, device="mpsrt")
        tensor([0.3990, 0.8805, 0.7357], device='mpsrt:0')
        >>> torch.mpsrt.set_rng_state(state)
    """
    mpsrt.random.default_generator(mpsrt.current_device()).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seeds every mpsrt device's default generator, as torch.cuda.manual_seed_all.

    Args:
        seed: An int (or anything ``int()`` takes), -2**63 <= seed < 2**64.

    Raises:
        TypeError: ``int(seed)`` fails with a TypeError.
        ValueError: ``int(seed)`` fails with a ValueError, or the seed is out of range.

    Example:
        >>> import torch, mpsrt.torch
        >>> states = torch.mpsrt.get_rng_state_all()
        >>> torch.mpsrt.manual_seed_all(1)
        >>> torch.mpsrt.initial_seed()
        1
        >>> torch.mpsrt.set_rng_state_all(states)
    """
    mpsrt.manual_seed_all(int(seed))


def seed() -> None:
    """Seeds the current device's default generator nondeterministically, as
    torch.cuda.seed.

    Example:
        >>> import torch, mpsrt.torch
        >>> state = torch.mpsrt.get_rng_state()
        >>> torch.mpsrt.seed()
        >>> 0 <= torch.mpsrt.initial_seed() < 2**64
        True
        >>> torch.mpsrt.set_rng_state(state)
    """
    mpsrt.seed()


def seed_all() -> None:
    """Seeds every mpsrt device's default generator nondeterministically, as
    torch.cuda.seed_all.

    Example:
        >>> import torch, mpsrt.torch
        >>> states = torch.mpsrt.get_rng_state_all()
        >>> torch.mpsrt.seed_all()
        >>> torch.mpsrt.set_rng_state_all(states)
    """
    mpsrt.seed_all()


def initial_seed() -> int:
    """The seed of the current device's default generator, as torch.cuda.initial_seed.

    Returns:
        int: The seed last set, 0 <= seed < 2**64.

    Example:
        >>> import torch, mpsrt.torch
        >>> torch.mpsrt.initial_seed() == mpsrt.initial_seed()
        True
    """
    return mpsrt.initial_seed()


def get_rng_state(device: Any = "mpsrt") -> torch.Tensor:
    """A device's default generator's state, as torch.cuda.get_rng_state.

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            ``"mpsrt"`` and None: the current device.

    Returns:
        torch.Tensor: The 44-byte state (a CPU uint8 tensor), torch.mps's layout.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> state = torch.mpsrt.get_rng_state()
        >>> state.dtype, state.shape, state.device
        (torch.uint8, torch.Size([44]), device(type='cpu'))
    """
    return torch.from_numpy(mpsrt.get_rng_state(_index(device)).copy())


def set_rng_state(new_state: torch.Tensor, device: Any = "mpsrt") -> None:
    """Restores a device's default generator's state from get_rng_state(), as
    torch.cuda.set_rng_state.

    Args:
        new_state: A uint8 tensor of 44 bytes (on any device).
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            ``"mpsrt"`` and None: the current device.

    Raises:
        AttributeError: ``new_state`` is not a tensor.
        TypeError: ``new_state`` is not uint8, or ``device`` has a wrong type.
        ValueError: ``new_state`` is not 44 bytes long, or ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> state = torch.mpsrt.get_rng_state()
        >>> a = torch.rand(4, device="mpsrt")
        >>> torch.mpsrt.set_rng_state(state)
        >>> torch.equal(torch.rand(4, device="mpsrt"), a)
        True
        >>> torch.mpsrt.set_rng_state(state)
    """
    mpsrt.set_rng_state(new_state.contiguous().cpu(), _index(device))


def _get_rng_state_offset(device: Any = "mpsrt") -> int:
    """torch.cuda._get_rng_state_offset: the device's default generator's Philox offset."""
    return mpsrt._get_rng_state_offset(_index(device))


def _set_rng_state_offset(offset: int, device: Any = "mpsrt") -> None:
    """torch.cuda._set_rng_state_offset: sets the device's default generator's Philox offset."""
    mpsrt._set_rng_state_offset(offset, _index(device))


def get_rng_state_all() -> list[torch.Tensor]:
    """Every mpsrt device's default generator's state, as torch.cuda.get_rng_state_all.

    Returns:
        list[torch.Tensor]: One 44-byte uint8 state per device.

    Example:
        >>> import torch, mpsrt.torch
        >>> len(torch.mpsrt.get_rng_state_all()) == torch.mpsrt.device_count()
        True
    """
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: Any) -> None:
    """Restores the default generators' states from get_rng_state_all(), as
    torch.cuda.set_rng_state_all: state i goes to device i.

    Args:
        new_states: An iterable of 44-byte uint8 tensors.

    Raises:
        AttributeError: A state is not a tensor.
        TypeError: A state is not uint8.
        ValueError: A state is not 44 bytes long.
        RuntimeError: There are more states than devices.

    Example:
        >>> import torch, mpsrt.torch
        >>> states = torch.mpsrt.get_rng_state_all()
        >>> torch.mpsrt.set_rng_state_all(states)
    """
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


# -- memory: mpsrt's caching allocator, which torch's mpsrt tensors come from
def memory_allocated(device: Any = None) -> int:
    """The bytes held by live tensors and Buffers of a device, as torch.cuda.memory_allocated.

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.

    Returns:
        int: :func:`mpsrt.memory_allocated` (torch's tensors come from mpsrt's allocator).

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> before = torch.mpsrt.memory_allocated()
        >>> x = torch.empty(1 << 20, dtype=torch.uint8, device="mpsrt")
        >>> torch.mpsrt.memory_allocated() - before
        1048576
    """
    return mpsrt.memory_allocated(_index(device))


def max_memory_allocated(device: Any = None) -> int:
    """The peak of memory_allocated() since the start or the last reset, as
    torch.cuda.max_memory_allocated.

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.

    Returns:
        int: :func:`mpsrt.max_memory_allocated`.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> torch.mpsrt.reset_peak_memory_stats()
        >>> x = torch.empty(1 << 20, dtype=torch.uint8, device="mpsrt")
        >>> del x
        >>> torch.mpsrt.max_memory_allocated() - torch.mpsrt.memory_allocated()
        1048576
    """
    return mpsrt.max_memory_allocated(_index(device))


def memory_reserved(device: Any = None) -> int:
    """The bytes of a device's heaps (in use and cached), as torch.cuda.memory_reserved.

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.

    Returns:
        int: :func:`mpsrt.memory_reserved`.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> x = torch.empty(1 << 20, dtype=torch.uint8, device="mpsrt")
        >>> torch.mpsrt.memory_reserved() >= torch.mpsrt.memory_allocated() >= x.nbytes
        True
    """
    return mpsrt.memory_reserved(_index(device))


def max_memory_reserved(device: Any = None) -> int:
    """The peak of memory_reserved() since the start or the last reset, as
    torch.cuda.max_memory_reserved.

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.

    Returns:
        int: :func:`mpsrt.max_memory_reserved`.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> torch.mpsrt.max_memory_reserved() >= torch.mpsrt.memory_reserved()
        True
    """
    return mpsrt.max_memory_reserved(_index(device))


def memory_stats(device: Any = None) -> dict[str, Any]:
    """The caching allocator's statistics for a device, as torch.cuda.memory_stats.

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.

    Returns:
        dict[str, Any]: :func:`mpsrt.memory_stats`: torch.cuda's keys
        (``"allocated_bytes.all.current"``, ...), sorted.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> stats = torch.mpsrt.memory_stats()
        >>> stats["allocated_bytes.all.current"] == torch.mpsrt.memory_allocated()
        True
    """
    return mpsrt.memory_stats(_index(device))


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A readable table of memory_stats(), as torch.cuda.memory_summary.

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.
        abbreviated: Only the totals of all pools.

    Returns:
        str: :func:`mpsrt.memory_summary`.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> "Allocated memory" in torch.mpsrt.memory_summary(abbreviated=True)
        True
    """
    return mpsrt.memory_summary(_index(device), abbreviated=abbreviated)


def reset_peak_memory_stats(device: Any = None) -> None:
    """Sets every peak of memory_stats() to its current value, as
    torch.cuda.reset_peak_memory_stats.

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> torch.mpsrt.reset_peak_memory_stats()
        >>> torch.mpsrt.max_memory_allocated() == torch.mpsrt.memory_allocated()
        True
    """
    mpsrt.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    """Zeroes the accumulated figures of memory_stats() (``.allocated``, ``.freed``, ``num_*``),
    as torch.cuda.reset_accumulated_memory_stats.

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> torch.mpsrt.reset_accumulated_memory_stats()
        >>> torch.mpsrt.memory_stats()["num_ooms"]
        0
    """
    mpsrt.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Releases every cached, unused heap of every device to the driver, as
    torch.cuda.empty_cache (:func:`mpsrt.empty_cache`).

    Example:
        >>> import torch, mpsrt.torch
        >>> x = torch.empty(1 << 20, dtype=torch.uint8, device="mpsrt")
        >>> del x  # its heap stays cached
        >>> reserved = torch.mpsrt.memory_reserved()
        >>> torch.mpsrt.empty_cache()
        >>> torch.mpsrt.memory_reserved() <= reserved
        True
    """
    mpsrt.empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """A device's free and total memory, as torch.cuda.mem_get_info.

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.

    Returns:
        tuple[int, int]: ``(free, total)`` in bytes (:func:`mpsrt.mem_get_info`).

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> free, total = torch.mpsrt.mem_get_info()
        >>> 0 <= free <= total
        True
    """
    return mpsrt.mem_get_info(_index(device))


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Sets a device's hard memory limit to ``fraction`` x its recommended_max_memory, as
    torch.cuda.set_per_process_memory_fraction (:func:`mpsrt.set_per_process_memory_fraction`).

    Args:
        fraction: A float in [0, 2]; 0 means no limit.
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.

    Raises:
        TypeError: ``fraction`` is not a float (``Invalid type for fraction argument, must be
            `float```), or ``device`` has a wrong type.
        ValueError: ``fraction`` is outside 0~2 (``Invalid fraction value: {fraction}. Allowed
            range: 0~2``), or ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> import mpsrt
        >>> previous = mpsrt.get_per_process_memory_fraction()
        >>> torch.mpsrt.set_per_process_memory_fraction(1.0)
        >>> mpsrt.get_per_process_memory_fraction()
        1.0
        >>> torch.mpsrt.set_per_process_memory_fraction(previous)
    """
    mpsrt.set_per_process_memory_fraction(fraction, _index(device))


# -- streams: torch.Stream objects whose ids are mpsrt streams (the DeviceGuardImpl maps them)
Stream = torch.Stream
Event = torch.Event


def current_stream(device: Any = None) -> torch.Stream:
    """The calling thread's current stream on a device, as torch.cuda.current_stream.

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.

    Returns:
        torch.Stream: The stream (an mpsrt stream; the default stream until set).

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> s = torch.mpsrt.current_stream()
        >>> s.device.type, s == torch.accelerator.current_stream()
        ('mpsrt', True)
    """
    return torch.accelerator.current_stream(_index(device))


def default_stream(device: Any = None) -> torch.Stream:
    """A device's default stream, as torch.cuda.default_stream.

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.

    Returns:
        torch.Stream: The default stream (mpsrt's stream 0 of the device).

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> torch.mpsrt.default_stream() == torch.mpsrt.current_stream()
        True
    """
    d = _index(device)
    current = torch.accelerator.current_stream(d)  # a torch.Stream of this device type
    sid = torch.ops.mpsrt_torch._default_stream(d)
    return torch.Stream(stream_id=sid, device_index=d, device_type=current.device_type)


def set_stream(stream: torch.Stream) -> None:
    """Makes a stream its device's current stream for the calling thread, as
    torch.cuda.set_stream.

    Args:
        stream: A torch.Stream of the mpsrt device.

    Raises:
        TypeError: ``stream`` is not a torch.Stream.

    Example:
        >>> import torch, mpsrt.torch
        >>> previous = torch.mpsrt.current_stream()
        >>> s = torch.Stream("mpsrt")
        >>> torch.mpsrt.set_stream(s)
        >>> torch.mpsrt.current_stream() == s
        True
        >>> torch.mpsrt.set_stream(previous)
    """
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager that makes a stream its device's current stream inside its block and
    restores the previous one after it, as torch.cuda.StreamContext.

    Args:
        stream: A torch.Stream of the mpsrt device, or None, which changes nothing.

    Example:
        >>> import torch, mpsrt.torch
        >>> s = torch.Stream("mpsrt")
        >>> with torch.mpsrt.StreamContext(s) as entered:
        ...     entered is s, torch.mpsrt.current_stream() == s
        (True, True)
        >>> torch.mpsrt.current_stream() == torch.mpsrt.default_stream()
        True
    """

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
    """Context manager that makes a stream current inside its block, as torch.cuda.stream.

    Args:
        stream: A torch.Stream of the mpsrt device, or None, which changes nothing.

    Returns:
        StreamContext: The context manager.

    Example:
        >>> import torch, mpsrt.torch
        >>> s = torch.Stream("mpsrt")
        >>> with torch.mpsrt.stream(s):
        ...     y = torch.ones(4, device="mpsrt") * 3  # queued on s
        >>> s.synchronize()
        >>> y.cpu()
        tensor([3., 3., 3., 3.])
    """
    return StreamContext(stream)


def fallback_counts() -> dict[str, int]:
    """The aten ops the device ran as CPU kernels, with their calls.

    An op runs as a CPU kernel where mpsrt has no kernel for it, where its kernel declines the
    call, or where the device runs CPU kernels (the cpu backend, CPU-type devices in the mode
    ``auto``; see :func:`kernel_ops`). On discrete memory each such call copies its tensors to
    the host and back.

    Returns:
        dict[str, int]: Calls by op name (``"aten::add.Tensor"``) since the last
        :func:`reset_fallback_counts`.

    Example:
        >>> import torch, mpsrt.torch
        >>> torch.mpsrt.reset_fallback_counts()
        >>> y = torch.ones(8, device="mpsrt").cumsum(0)
        >>> counts = torch.mpsrt.fallback_counts()
        >>> all(op.startswith("aten::") and n > 0 for op, n in counts.items())
        True
    """
    return dict(torch.ops.mpsrt_torch._fallback_op_counts())


def reset_fallback_counts() -> None:
    """Starts :func:`fallback_counts` afresh (every count to 0).

    Example:
        >>> import torch, mpsrt.torch
        >>> torch.mpsrt.reset_fallback_counts()
        >>> torch.mpsrt.fallback_counts()
        {}
    """
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
    """The aten ops that run on mpsrt's kernels on a device in the current mode.

    Every op with a kernel of mpsrt's where the device runs its kernels (a GPU; any device
    under ``MPSRT_TORCH_KERNELS=device``), and none where it runs CPU kernels (the cpu backend,
    a CPU-type device such as lavapipe in the default mode ``auto``). A call of a listed op
    still runs as a CPU kernel where its kernel declines it (a dtype or size it does not take);
    every op that ran so is in :func:`fallback_counts`. docs/ops.md is the table of these ops
    by kernel family (``python -m mpsrt.torch.op_table``).

    Args:
        device: A device index, ``"mpsrt"``, ``"mpsrt:N"`` or a torch.device of type mpsrt;
            None: the current device.

    Returns:
        list[str]: The op names, sorted (empty where the device runs CPU kernels).

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` is not an mpsrt device.
        RuntimeError: The index is out of range, or torch cannot parse the device string.

    Example:
        >>> import torch, mpsrt.torch
        >>> ops = torch.mpsrt.kernel_ops()
        >>> ops == sorted(ops) and all(op.startswith("aten::") for op in ops)
        True
    """
    return _kernel_ops() if _kernels_enabled(device) else []


def __getattr__(name: str) -> Any:
    # torch.compile's inductor asks the device's module for its code generators ("Scheduling"
    # first); the device registers itself with inductor then, on first use, so that importing
    # the device does not import inductor.
    if name == "Scheduling":
        from mpsrt.torch import _inductor

        return _inductor.register()
    raise AttributeError(f"module 'torch.mpsrt' has no attribute '{name}'")
