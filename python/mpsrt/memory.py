"""Device memory: the caching allocator's Python API (torch.mps and torch.cuda names)."""

from __future__ import annotations

import os
import pickle
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
    """Releases every cached, unused heap of the current device back to the driver."""
    _C.empty_cache(_C.current_device())


def set_per_process_memory_fraction(fraction: float) -> None:
    """Hard limit = fraction x recommended_max_memory() for the current device; 0: no limit."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    # The range (0~2, NaN refused) is checked by the core, with torch.mps's message.
    _C.set_per_process_memory_fraction(fraction, _C.current_device())


def set_cache_limit(nbytes: int) -> int:
    """Caps cached-but-unused bytes of the current device; returns the previous cap."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(
            f"set_cache_limit() expected an int number of bytes, got {type(nbytes).__name__}"
        )
    if nbytes < 0:
        raise ValueError(f"set_cache_limit(): the limit must be >= 0 bytes, got {nbytes}")
    prev = _C.set_cache_limit(min(nbytes, 2**64 - 1), _C.current_device())
    return prev


def current_allocated_memory() -> int:
    """Bytes held by live buffers of the current device."""
    return _C.current_allocated_memory(_C.current_device())


def driver_allocated_memory() -> int:
    """Bytes the backend holds from the driver / OS for the current device."""
    return _C.driver_allocated_memory(_C.current_device())


def recommended_max_memory() -> int:
    """The current device's recommended working-set size in bytes."""
    return _C.recommended_max_memory(_C.current_device())


def memory_stats(device: DeviceLike = None) -> dict[str, int]:
    """torch.cuda-style statistics, sorted by key."""
    return dict(sorted(_C.memory_stats(_dev(device, "memory_stats")).items()))


def memory_allocated(device: DeviceLike = None) -> int:
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: DeviceLike = None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: DeviceLike = None) -> int:
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: DeviceLike = None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    _C.reset_peak_memory_stats(_dev(device, "reset_peak_memory_stats"))


def reset_max_memory_allocated(device: DeviceLike = None) -> None:
    reset_peak_memory_stats(device)


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def memory_summary(device: DeviceLike = None, abbreviated: bool = False) -> str:
    """A readable table of memory_stats()."""
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

_HISTORY_ENABLED = (None, "state", "all")
_STATE_ONLY = False
_STACKS = ("python", "all")


def _record_memory_history(
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = 0,
    device: DeviceLike = None,
) -> None:
    """Records allocation events for snapshot() (torch.cuda.memory._record_memory_history).

    enabled: None stops recording; "state" keeps no event trace; "all" records events.
    context / stacks: with "all" or "alloc" context, Python frames are kept for each event.
    max_entries: the newest events kept (0: unlimited).
    """
    if enabled not in _HISTORY_ENABLED:
        raise ValueError(f"enabled must be one of {_HISTORY_ENABLED}, got {enabled!r}")
    if context not in (None, "state", "alloc", "all"):
        raise ValueError(f"context must be None, 'state', 'alloc' or 'all', got {context!r}")
    if stacks not in _STACKS:
        raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
    if isinstance(max_entries, bool) or not isinstance(max_entries, int):
        raise TypeError(f"max_entries must be an int, got {type(max_entries).__name__}")
    if max_entries < 0:
        raise ValueError(f"max_entries must be >= 0, got {max_entries}")
    idx = _dev(device, "_record_memory_history")
    global _STATE_ONLY
    _STATE_ONLY = enabled == "state"
    _C._record_memory_history(
        enabled is not None,
        max_entries if enabled == "all" else 1,
        context in ("alloc", "all"),
        idx,
    )


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
                "frames": [],
                "blocks": blocks,
            }
        )
    events = []
    for t in trace:
        events.append(t)
        if t["action"] == "free_requested":  # frees are stream-ordered; done when requested
            events.append(dict(t, action="free_completed"))
    traces = [[] for _ in range(_C.device_count())]
    traces[idx] = [] if _STATE_ONLY else events
    return {
        "segments": out_segments,
        "device_traces": traces,
        "allocator_settings": {"backend": _C.backend()},
    }


def _snapshot(device: DeviceLike = None) -> dict[str, Any]:
    return snapshot(device)


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Writes snapshot() as a pickle that PyTorch's memory visualizer opens."""
    if not isinstance(filename, (str, os.PathLike)):
        kind = type(filename).__name__
        raise TypeError(f"_dump_snapshot(): filename must be a str or os.PathLike, got {kind}")
    with open(filename, "wb") as f:
        pickle.dump(snapshot(), f)
