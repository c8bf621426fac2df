"""Device memory: the caching allocator's Python API (torch.mps and torch.cuda names)."""

from __future__ import annotations

import inspect
import os
import pickle
import sys
from collections.abc import Sequence
from typing import Any

from . import _C
from ._utils import DeviceLike, device_index

Buffer = _C.Buffer

# empty(size, dtype=None, device=None, stream=None): argument checks happen in the native
# function itself, so the cache-hit path is a single call.
empty = _C.empty


def _dev(device: DeviceLike, caller: str) -> int:
    return device_index(device, caller=caller)


def empty_cache() -> None:
    """Releases every cached, unused heap of every device back to the driver.

    As torch.cuda.empty_cache(): blocks whose free waits on queued work are released once that
    work is done. Live Buffers keep their heaps.

    Example:
        >>> import mpsrt
        >>> mpsrt.empty(1 << 20).free()  # its heap stays cached
        >>> reserved = mpsrt.memory_reserved()
        >>> mpsrt.empty_cache()
        >>> mpsrt.memory_reserved() <= reserved
        True
    """
    for index in range(_C.device_count()):
        _C.empty_cache(index)


def set_per_process_memory_fraction(fraction: float, device: DeviceLike = None) -> None:
    """Sets the device's hard memory limit to ``fraction`` x recommended_max_memory().

    An allocation past the limit raises :class:`mpsrt.OutOfMemoryError`. The device is checked
    first, as torch.cuda does.

    Args:
        fraction: A float in [0, 2]; 0 means no limit.
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Raises:
        TypeError: ``fraction`` is not a float (``Invalid type for fraction argument, must be
            `float```), or ``device`` has a wrong type.
        ValueError: ``fraction`` is outside 0~2 (``Invalid fraction value: {fraction}. Allowed
            range: 0~2``), or ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> previous = mpsrt.get_per_process_memory_fraction()
        >>> mpsrt.set_per_process_memory_fraction(0.5)
        >>> mpsrt.get_per_process_memory_fraction()
        0.5
        >>> mpsrt.set_per_process_memory_fraction(previous)
        >>> mpsrt.set_per_process_memory_fraction(3.0)
        Traceback (most recent call last):
            ...
        ValueError: Invalid fraction value: 3.0. Allowed range: 0~2
    """
    idx = _dev(device, "set_per_process_memory_fraction")
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    # The range (0~2, NaN refused) is checked by the core, with torch.mps's message.
    _C.set_per_process_memory_fraction(fraction, idx)


def get_per_process_memory_fraction(device: DeviceLike = None) -> float:
    """The memory fraction in force on a device.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Returns:
        float: The fraction of recommended_max_memory() the device may allocate:
        ``MPSRT_HIGH_WATERMARK_RATIO`` (1.7 by default) until set_per_process_memory_fraction()
        sets it; 0 means no limit.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> 0.0 <= mpsrt.get_per_process_memory_fraction() <= 2.0
        True
    """
    return _C.get_per_process_memory_fraction(_dev(device, "get_per_process_memory_fraction"))


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """The device's free and total memory, as torch.cuda.mem_get_info.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Returns:
        tuple[int, int]: ``(free, total)`` in bytes: total is the device's total_memory, free
        what of it this process's heaps do not hold.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> free, total = mpsrt.mem_get_info()
        >>> 0 <= free <= total == mpsrt.get_device_properties().total_memory
        True
    """
    return tuple(_C.mem_get_info(_dev(device, "mem_get_info")))  # type: ignore[return-value]


def set_cache_limit(nbytes: int) -> int:
    """Caps the cached-but-unused bytes of the current device.

    Args:
        nbytes: The cap in bytes, >= 0 (values past 2**64 - 1 mean no cap).

    Returns:
        int: The previous cap, to restore it with.

    Raises:
        TypeError: ``nbytes`` is not an int.
        ValueError: ``nbytes`` is negative.

    Example:
        >>> import mpsrt
        >>> previous = mpsrt.set_cache_limit(64 << 20)
        >>> mpsrt.set_cache_limit(previous)
        67108864
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(
            f"set_cache_limit() expected an int number of bytes, got {type(nbytes).__name__}"
        )
    if nbytes < 0:
        raise ValueError(f"set_cache_limit(): the limit must be >= 0 bytes, got {nbytes}")
    prev = _C.set_cache_limit(min(nbytes, 2**64 - 1), _C.current_device())
    return prev


def current_allocated_memory() -> int:
    """The bytes held by live Buffers of the current device, as torch.mps.

    Returns:
        int: Allocated bytes (each Buffer's size rounded up to the allocator's granularity).

    Example:
        >>> import mpsrt
        >>> before = mpsrt.current_allocated_memory()
        >>> buf = mpsrt.empty(1 << 20)
        >>> mpsrt.current_allocated_memory() - before
        1048576
    """
    return _C.current_allocated_memory(_C.current_device())


def driver_allocated_memory() -> int:
    """The bytes the backend holds from the driver or the OS for the current device, as
    torch.mps.

    Returns:
        int: The bytes of the device's heaps, cached ones included.

    Example:
        >>> import mpsrt
        >>> buf = mpsrt.empty(1 << 20)
        >>> mpsrt.driver_allocated_memory() >= buf.nbytes
        True
    """
    return _C.driver_allocated_memory(_C.current_device())


def recommended_max_memory() -> int:
    """The current device's recommended working-set size, as torch.mps.

    Returns:
        int: Bytes; memory limits (set_per_process_memory_fraction()) are fractions of it.

    Example:
        >>> import mpsrt
        >>> mpsrt.recommended_max_memory() == mpsrt.get_device_properties().recommended_max_memory
        True
    """
    return _C.recommended_max_memory(_C.current_device())


def memory_stats(device: DeviceLike = None) -> dict[str, int]:
    """The caching allocator's statistics, with torch.cuda.memory_stats's keys.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Returns:
        dict[str, int]: Counters sorted by key: ``"<stat>.<pool>.<figure>"`` for the stats
        ``allocated_bytes``, ``reserved_bytes``, ``active_bytes``, ``requested_bytes``,
        ``inactive_split_bytes``, ``allocation``, ``segment``, ``active`` and
        ``inactive_split``, the pools ``all``, ``small_pool`` and ``large_pool`` and the
        figures ``current``, ``peak``, ``allocated`` and ``freed``; and ``num_alloc_retries``,
        ``num_ooms``, ``num_device_alloc``, ``num_device_free``, ``staging_bytes.current``, ...

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> before = mpsrt.memory_stats()["allocated_bytes.all.current"]
        >>> buf = mpsrt.empty(1 << 20)
        >>> mpsrt.memory_stats()["allocated_bytes.all.current"] - before
        1048576
    """
    return dict(sorted(_C.memory_stats(_dev(device, "memory_stats")).items()))


def memory_allocated(device: DeviceLike = None) -> int:
    """The bytes held by live Buffers of a device, as torch.cuda.memory_allocated.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Returns:
        int: ``memory_stats(device)["allocated_bytes.all.current"]``.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> before = mpsrt.memory_allocated()
        >>> buf = mpsrt.empty(1 << 20)
        >>> mpsrt.memory_allocated() - before
        1048576
        >>> del buf
        >>> mpsrt.memory_allocated() == before
        True
    """
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: DeviceLike = None) -> int:
    """The peak of memory_allocated() since the start or reset_peak_memory_stats(), as
    torch.cuda.max_memory_allocated.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Returns:
        int: ``memory_stats(device)["allocated_bytes.all.peak"]``.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> mpsrt.reset_peak_memory_stats()
        >>> mpsrt.empty(1 << 20).free()
        >>> mpsrt.max_memory_allocated() - mpsrt.memory_allocated()
        1048576
    """
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: DeviceLike = None) -> int:
    """The bytes of a device's heaps (live Buffers and the cache), as
    torch.cuda.memory_reserved.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Returns:
        int: ``memory_stats(device)["reserved_bytes.all.current"]``.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> buf = mpsrt.empty(1 << 20)
        >>> mpsrt.memory_reserved() >= mpsrt.memory_allocated() >= buf.nbytes
        True
    """
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: DeviceLike = None) -> int:
    """The peak of memory_reserved() since the start or reset_peak_memory_stats(), as
    torch.cuda.max_memory_reserved.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Returns:
        int: ``memory_stats(device)["reserved_bytes.all.peak"]``.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> mpsrt.max_memory_reserved() >= mpsrt.memory_reserved()
        True
    """
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    """Sets every peak of memory_stats() to its current value, as
    torch.cuda.reset_peak_memory_stats.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> mpsrt.reset_peak_memory_stats()
        >>> mpsrt.max_memory_allocated() == mpsrt.memory_allocated()
        True
    """
    _C.reset_peak_memory_stats(_dev(device, "reset_peak_memory_stats"))


def reset_max_memory_allocated(device: DeviceLike = None) -> None:
    """The same as reset_peak_memory_stats() (torch.cuda's older name).

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> mpsrt.reset_max_memory_allocated()
        >>> mpsrt.max_memory_allocated() == mpsrt.memory_allocated()
        True
    """
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: DeviceLike = None) -> None:
    """Zeroes the accumulated figures of memory_stats(), as torch.cuda.

    Every stat's ``.allocated`` and ``.freed`` totals and the ``num_*`` counters; current and
    peak values stay.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> mpsrt.reset_accumulated_memory_stats()
        >>> buf = mpsrt.empty(16)
        >>> stats = mpsrt.memory_stats()
        >>> stats["allocation.all.allocated"], stats["allocation.all.freed"], stats["num_ooms"]
        (1, 0, 0)
    """
    _C.reset_accumulated_memory_stats(_dev(device, "reset_accumulated_memory_stats"))


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def memory_summary(device: DeviceLike = None, abbreviated: bool = False) -> str:
    """A readable table of memory_stats(), as torch.cuda.memory_summary.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.
        abbreviated: Only the totals of all pools (not the small and large pools' rows).

    Returns:
        str: The table: current, peak, allocated and freed amounts of the allocated, requested,
        reserved and non-releasable memory, allocations and heaps, and the counters of
        retries, out-of-memory errors, heaps and staging.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> print(mpsrt.memory_summary(abbreviated=True).splitlines()[3])
        Metric                       Cur Usage   Peak Usage    Tot Alloc    Tot Freed
    """
    idx = _dev(device, "memory_summary")
    s = _C.memory_stats(idx)
    rows = [
        ("Allocated memory", "allocated_bytes", True),
        ("Requested memory", "requested_bytes", True),
        ("Reserved memory", "reserved_bytes", True),
        ("Non-releasable memory", "inactive_split_bytes", True),
        ("Allocations", "allocation", False),
        ("Heaps (segments)", "segment", False),
    ]
    pools = (
        [("all", "")]
        if abbreviated
        else [("all", ""), ("small_pool", "  from small pool"), ("large_pool", "  from large pool")]
    )
    width = 78
    lines = [
        "=" * width,
        f" mpsrt memory summary, device {idx} ({_C.backend()})".ljust(width),
        "-" * width,
        f"{'Metric':<26}{'Cur Usage':>13}{'Peak Usage':>13}{'Tot Alloc':>13}{'Tot Freed':>13}",
        "-" * width,
    ]
    for title, key, is_bytes in rows:
        for pool, label in pools:
            p = f"{key}.{pool}."
            cur, alloc, freed = s[p + "current"], s[p + "allocated"], s[p + "freed"]
            peak = s.get(p + "peak", cur)
            fmt = _fmt if is_bytes else str
            name = title if not label else label
            lines.append(f"{name:<26}{fmt(cur):>13}{fmt(peak):>13}{fmt(alloc):>13}{fmt(freed):>13}")
        lines.append("-" * width)
    lines.append(f"{'Allocation retries':<26}{s['num_alloc_retries']:>13}")
    lines.append(f"{'Out-of-memory errors':<26}{s['num_ooms']:>13}")
    lines.append(f"{'Heaps from the driver':<26}{s['num_device_alloc']:>13}")
    lines.append(f"{'Heaps returned':<26}{s['num_device_free']:>13}")
    # Host memory for host copies on discrete memory (0 on unified memory).
    staging = f"{_fmt(s['staging_bytes.current']):>13}{_fmt(s['staging_bytes.peak']):>13}"
    lines.append(f"{'Staging memory (host)':<26}{staging}")
    lines.append(f"{'Staged host copies':<26}{s['num_staged_copies']:>13}")
    lines.append("=" * width)
    return "\n".join(lines) + "\n"


def add_reclaim_callback(fn: Any) -> int:
    """Registers fn(bytes_needed) -> bool, called when an allocation would fail; it may free
    memory and return True to ask for a retry. Returns an id for remove_reclaim_callback."""
    if not callable(fn):
        raise TypeError(f"add_reclaim_callback() expected a callable, got {type(fn).__name__}")
    return _C.add_reclaim_callback(fn, _C.current_device())


def remove_reclaim_callback(handle: int) -> None:
    _C.remove_reclaim_callback(handle, _C.current_device())


# ---------------------------------------------------------------- history and snapshots


class _HistoryArgumentError(ValueError, RuntimeError):
    """A bad value for _record_memory_history: a ValueError (mpsrt's rule) that is also the
    RuntimeError torch.cuda raises for it."""


_ENABLED = (None, "state", "all")
_CONTEXTS = {None: 0, "state": 1, "alloc": 2, "all": 3}
_STACKS = ("python", "all")


def _check_str_or_none(name: str, value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(
            f"_record_memory_history(): {name} must be a str or None, got {type(value).__name__}"
        )


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(
            f"_record_memory_history(): {name} must be a bool, got {type(value).__name__}"
        )


def _record_memory_history(enabled: Any = "all", *args: Any, **kwargs: Any) -> None:
    """Records allocator events for snapshot(), with torch.cuda.memory's signature.

    enabled: None stops recording; "state" keeps the stacks of live blocks and a trace of one
    entry (the newest); "all" keeps a trace of up to max_entries entries.
    context: None no stacks; "state" stacks of live blocks (and segments) only; "alloc" also in
    the trace (frees carry their allocation's); "all" frees (and empty_cache's segment_free)
    carry their own. Python stacks hold every frame, mpsrt's own wrappers included (as torch's
    hold torch/cuda/memory.py).
    stacks: "python" Python frames; "all" also the native (C++) frames of the runtime, taken as
    return addresses and named when a snapshot is taken (filename: the library, line: the
    offset in it, name: the demangled function, as torch's dladdr symbolizer gives them).
    clear_history: drop the entries recorded so far.
    compile_context, global_record_annotations: accepted for torch.cuda's signature (no
    torch.compile or annotations here).
    skip_actions: trace actions not recorded (alloc, free_requested, free_completed,
    segment_alloc, segment_free, oom, snapshot).
    record_pinned_host_memory, record_cuda (torch 2.14's): what is recorded, pinned host memory
    and device memory. mpsrt records its device memory (record_cuda=False records nothing: the
    same as enabled=None); its host staging memory is not the allocator's, so
    record_pinned_host_memory=True raises ValueError.
    A bool `enabled` takes torch.cuda's legacy form (_record_memory_history_legacy).
    """
    if isinstance(enabled, bool):
        return _record_memory_history_legacy(enabled, *args, **kwargs)
    return _record_memory_history_impl(enabled, *args, **kwargs)


def _record_memory_history_impl(
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: DeviceLike = None,
    clear_history: bool = False,
    compile_context: bool = False,
    global_record_annotations: bool = False,
    skip_actions: Sequence[str] | None = None,
    record_pinned_host_memory: bool = False,
    record_cuda: bool = True,
) -> None:
    _check_str_or_none("enabled", enabled)
    _check_str_or_none("context", context)
    if not isinstance(stacks, str):
        raise TypeError(
            f"_record_memory_history(): stacks must be a str, got {type(stacks).__name__}"
        )
    if enabled not in _ENABLED:
        raise _HistoryArgumentError(
            f"enabled must be one of {_ENABLED}, got {enabled!r} "
            "(expected state to be 'state', 'all', or None)"
        )
    if context not in _CONTEXTS:
        raise _HistoryArgumentError(
            f"context must be None, 'state', 'alloc' or 'all', got {context!r} "
            "(expected context to be 'state', 'alloc', 'all', or None)"
        )
    if stacks not in _STACKS:
        raise _HistoryArgumentError(
            f"stacks must be 'python' or 'all', got {stacks!r} "
            "(expected stacks to be 'python', or 'all')"
        )
    if isinstance(max_entries, bool) or not isinstance(max_entries, int):
        raise TypeError(f"max_entries must be an int, got {type(max_entries).__name__}")
    if max_entries < 0:
        raise _HistoryArgumentError(f"max_entries must be >= 0, got {max_entries}")
    _check_bool("clear_history", clear_history)
    _check_bool("compile_context", compile_context)
    _check_bool("global_record_annotations", global_record_annotations)
    _check_bool("record_pinned_host_memory", record_pinned_host_memory)
    _check_bool("record_cuda", record_cuda)
    if record_pinned_host_memory:
        raise _HistoryArgumentError(
            "record_pinned_host_memory=True: mpsrt's allocator holds device memory only (its "
            "host staging memory is not recorded); pass record_pinned_host_memory=False"
        )
    if not record_cuda:
        enabled = None  # nothing of the device recorded: recording stops
    skip = _skip_actions(skip_actions)
    idx = _dev(device, "_record_memory_history")
    # torch.cuda: the trace keeps max(1, max_entries) entries with "all", one with "state".
    entries = max(1, min(max_entries, 2**64 - 1)) if enabled == "all" else 1
    # torch.cuda gathers native frames when recording with stacks="all" and some context.
    native = enabled is not None and context is not None and stacks == "all"
    _record(enabled is not None, entries, _CONTEXTS[context], skip, clear_history, native, idx)


def _skip_actions(skip_actions: object) -> list[str]:
    if skip_actions is None:
        return []
    if isinstance(skip_actions, (str, bytes)) or not isinstance(skip_actions, Sequence):
        raise TypeError(
            "_record_memory_history(): skip_actions must be None or a list of action names, "
            f"got {type(skip_actions).__name__}"
        )
    for a in skip_actions:
        if not isinstance(a, str):
            raise TypeError(
                "_record_memory_history(): skip_actions must hold str action names, "
                f"got {type(a).__name__}"
            )
    return list(skip_actions)


def _record(
    enabled: bool,
    entries: int,
    context: int,
    skip: list[str],
    clear: bool,
    native: bool,
    idx: int,
) -> None:
    try:
        _C._record_memory_history(enabled, entries, context, skip, clear, native, idx)
    except ValueError as e:  # an unknown skip action: the core's words
        raise _HistoryArgumentError(str(e)) from None


def _record_memory_history_legacy(
    enabled: bool,
    record_context: bool = True,
    trace_alloc_max_entries: int = 1,
    trace_alloc_record_context: bool = False,
    device: DeviceLike = None,
    record_context_cpp: bool = False,
    clear_history: bool = False,
    compile_context: bool = False,
    global_record_annotations: bool = False,
) -> None:
    """torch.cuda's legacy form: stacks of live blocks when record_context, in the trace too
    when trace_alloc_record_context; a trace of trace_alloc_max_entries entries; native frames
    too when record_context_cpp (and stacks are recorded)."""
    for name, v in (
        ("record_context", record_context),
        ("trace_alloc_record_context", trace_alloc_record_context),
        ("record_context_cpp", record_context_cpp),
        ("clear_history", clear_history),
        ("compile_context", compile_context),
        ("global_record_annotations", global_record_annotations),
    ):
        _check_bool(name, v)
    n = trace_alloc_max_entries
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"trace_alloc_max_entries must be an int, got {type(n).__name__}")
    if n < 0:
        raise _HistoryArgumentError(f"trace_alloc_max_entries must be >= 0, got {n}")
    context = (2 if trace_alloc_record_context else 1) if record_context else 0
    idx = _dev(device, "_record_memory_history")
    native = enabled and record_context_cpp and context != 0
    _record(enabled, max(1, min(n, 2**64 - 1)), context, [], clear_history, native, idx)


def snapshot(device: DeviceLike = None) -> dict[str, Any]:
    """Heaps, blocks and recorded events in the format of PyTorch's memory visualizer."""
    idx = _dev(device, "snapshot")
    segments, trace = _C._memory_snapshot(idx)
    out_segments = []
    for seg in segments:
        blocks = [
            {
                "address": b["address"],
                "size": b["size"],
                "requested_size": b["requested_size"],
                "state": "active_allocated" if b["allocated"] else "inactive",
                "frames": b["frames"],
            }
            for b in seg["blocks"]
        ]
        out_segments.append(
            {
                "device": idx,
                "address": seg["address"],
                "total_size": seg["total_size"],
                "allocated_size": seg["allocated_size"],
                "active_size": seg["allocated_size"],
                "requested_size": seg["requested_size"],
                "stream": 0,
                "segment_type": "small" if seg["pool"] == "small" else "large",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": seg["frames"],
                "blocks": blocks,
            }
        )
    traces: list[list[dict[str, Any]]] = [[] for _ in range(_C.device_count())]
    traces[idx] = list(trace)
    return {
        "segments": out_segments,
        "device_traces": traces,
        "allocator_settings": {"backend": _C.backend()},
    }


_record_memory_history.__signature__ = inspect.signature(_record_memory_history_impl)  # type: ignore[attr-defined]


def _snapshot(device: DeviceLike = None) -> dict[str, Any]:
    return snapshot(device)


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Writes snapshot() as a pickle that PyTorch's memory visualizer opens."""
    if not isinstance(filename, (str, os.PathLike)):
        kind = type(filename).__name__
        raise TypeError(f"_dump_snapshot(): filename must be a str or os.PathLike, got {kind}")
    with open(filename, "wb") as f:
        pickle.dump(snapshot(), f)


def _memory_viz(caller: str) -> Any:
    """torch.cuda._memory_viz, which renders snapshots (flame graphs); torch is optional."""
    try:
        from torch.cuda import _memory_viz
    except ImportError as e:
        raise ImportError(
            f"mpsrt.memory.{caller}() renders the snapshot with PyTorch's memory visualizer "
            "(torch.cuda._memory_viz), and torch is not installed: pip install torch "
            f"(import failed: {e})"
        ) from e
    return _memory_viz


def _save_segment_usage(filename: str = "output.svg", snapshot: Any = None) -> None:
    """Writes a flame graph (SVG) of the segments' blocks by stream and segment, as
    torch.cuda.memory._save_segment_usage: snapshot() by default. Needs torch (its
    torch.cuda._memory_viz renders it, with Brendan Gregg's flamegraph.pl)."""
    viz = _memory_viz("_save_segment_usage")
    if snapshot is None:
        snapshot = _snapshot()
    with open(filename, "w") as f:
        f.write(viz.segments(snapshot))


def _save_memory_usage(filename: str = "output.svg", snapshot: Any = None) -> None:
    """Writes a flame graph (SVG) of the blocks by stream, as
    torch.cuda.memory._save_memory_usage: snapshot() by default. Needs torch (as
    _save_segment_usage)."""
    viz = _memory_viz("_save_memory_usage")
    if snapshot is None:
        snapshot = _snapshot()
    with open(filename, "w") as f:
        f.write(viz.memory(snapshot))
