"""The signpost profiler: torch.mps.profiler's start/stop/profile, torch.cuda.nvtx's ranges and
marks, and a Chrome/Perfetto trace export.

While a session runs, every command encoded on a stream records its CPU encode interval on the
calling thread's track and its device interval on the stream's track (joined by a flow arrow);
allocations and heap changes record instants and the "allocated" / "reserved" counters.
``export_trace(path)`` writes it all as trace JSON that Perfetto (ui.perfetto.dev) and
chrome://tracing open.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any

from . import _C

_P = _C._profiler

__all__ = [
    "export_trace",
    "is_capturing_metal",
    "is_metal_capture_enabled",
    "mark",
    "metal_capture",
    "profile",
    "range",
    "range_end",
    "range_pop",
    "range_push",
    "range_start",
    "start",
    "stop",
]

_MODE_BITS = {"interval": 1, "event": 2}


def _mode_bits(mode: object, caller: str) -> int:
    if not isinstance(mode, str):
        raise TypeError(f"{caller}: mode must be a str, got {type(mode).__name__}")
    bits = 0
    for token in mode.split(","):
        bit = _MODE_BITS.get(token.strip())
        if bit is None:
            raise ValueError(
                f"{caller}: invalid signpost trace mode {mode!r}; "
                "expected 'interval', 'event' or 'interval,event'"
            )
        bits |= bit
    return bits


def _check_wait(wait_until_completed: object, caller: str) -> bool:
    if not isinstance(wait_until_completed, bool):
        raise TypeError(
            f"{caller}: wait_until_completed must be a bool, "
            f"got {type(wait_until_completed).__name__}"
        )
    return wait_until_completed


def start(mode: str = "interval", wait_until_completed: bool = False) -> None:
    """Starts a profiling session, as torch.mps.profiler.start (the previous session's records
    are cleared).

    Args:
        mode: ``"interval"`` (CPU encode and device execution intervals), ``"event"``
            (completion instants) or ``"interval,event"``.
        wait_until_completed: Every profiled command buffer commits and waits, so each
            command runs alone on the device timeline (slower).

    Raises:
        TypeError: ``mode`` is not a str or ``wait_until_completed`` not a bool.
        ValueError: ``mode`` is not one of the modes.

    Example:
        >>> import mpsrt
        >>> mpsrt.profiler.start(mode="interval,event")
        >>> buf = mpsrt.empty(1 << 20).fill_(0)
        >>> mpsrt.profiler.stop()
        >>> mpsrt.profiler.start(mode="cycles")
        Traceback (most recent call last):
            ...
        ValueError: start(): invalid signpost trace mode 'cycles'; expected 'interval', ...
    """
    bits = _mode_bits(mode, "start()")
    _P.start(bits, _check_wait(wait_until_completed, "start()"))


def stop() -> None:
    """Ends the profiling session, as torch.mps.profiler.stop.

    Waits for the profiled work to complete (its device intervals are recorded), then prints
    the statistics ``MPSRT_LOG_PROFILE_INFO`` asks for to stderr. The records stay for
    export_trace() until the next start(). Without a session, it does nothing.

    Example:
        >>> import mpsrt
        >>> mpsrt.profiler.start()
        >>> mpsrt.profiler.mark("step")
        >>> mpsrt.profiler.stop()
    """
    _P.stop()


@contextlib.contextmanager
def profile(mode: str = "interval", wait_until_completed: bool = False) -> Iterator[None]:
    """Context manager that runs its block in a profiling session, as
    torch.mps.profiler.profile: start() on entry, stop() on exit.

    Args:
        mode: ``"interval"``, ``"event"`` or ``"interval,event"``, as for start().
        wait_until_completed: As for start().

    Returns:
        A context manager whose block runs in a profiling session.

    Raises:
        TypeError: ``mode`` is not a str or ``wait_until_completed`` not a bool.
        ValueError: ``mode`` is not one of the modes.

    Example:
        >>> import json, os, tempfile
        >>> import mpsrt
        >>> with mpsrt.profiler.profile(), mpsrt.profiler.range("fill"):
        ...     buf = mpsrt.empty(1 << 20).fill_(1)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     mpsrt.profiler.export_trace(os.path.join(d, "trace.json"))
        ...     with open(os.path.join(d, "trace.json")) as f:
        ...         names = {e.get("name") for e in json.load(f)["traceEvents"]}
        >>> "fill" in names
        True
    """
    start(mode, wait_until_completed)
    try:
        yield
    finally:
        stop()


def _message(msg: object, caller: str) -> str:
    if not isinstance(msg, str):
        raise TypeError(f"{caller}: msg must be a str, got {type(msg).__name__}")
    return msg


def mark(msg: str) -> None:
    """Records an instant on the calling thread's track, as torch.cuda.nvtx.mark (nothing is
    recorded outside a session).

    Args:
        msg: The instant's name.

    Raises:
        TypeError: ``msg`` is not a str.

    Example:
        >>> import mpsrt
        >>> with mpsrt.profiler.profile():
        ...     mpsrt.profiler.mark("checkpoint")
    """
    _P.mark(_message(msg, "mark()"))


def range_push(msg: str) -> int:
    """Opens a nested range on the calling thread, as torch.cuda.nvtx.range_push.

    Args:
        msg: The range's name.

    Returns:
        int: The range's depth, from 0.

    Raises:
        TypeError: ``msg`` is not a str.

    Example:
        >>> import mpsrt
        >>> mpsrt.profiler.range_push("outer"), mpsrt.profiler.range_push("inner")
        (0, 1)
        >>> mpsrt.profiler.range_pop(), mpsrt.profiler.range_pop()
        (1, 0)
    """
    return _P.range_push(_message(msg, "range_push()"))


def range_pop() -> int:
    """Closes the calling thread's innermost range, as torch.cuda.nvtx.range_pop.

    Returns:
        int: The depth the range had.

    Raises:
        RuntimeError: The thread has no open range.

    Example:
        >>> import mpsrt
        >>> mpsrt.profiler.range_push("step")
        0
        >>> mpsrt.profiler.range_pop()
        0
        >>> mpsrt.profiler.range_pop()
        Traceback (most recent call last):
            ...
        RuntimeError: [profiler] range_pop: no range is open on this thread; ...
    """
    return _P.range_pop()


def range_start(msg: str) -> int:
    """Opens a range that any thread may end, as torch.cuda.nvtx.range_start.

    Such ranges may overlap without nesting; a trace shows each on its own row.

    Args:
        msg: The range's name.

    Returns:
        int: The range's id (positive), for range_end().

    Raises:
        TypeError: ``msg`` is not a str.

    Example:
        >>> import mpsrt
        >>> load = mpsrt.profiler.range_start("load")
        >>> train = mpsrt.profiler.range_start("train")
        >>> mpsrt.profiler.range_end(load)  # ranges need not nest
        >>> mpsrt.profiler.range_end(train)
    """
    return _P.range_start(_message(msg, "range_start()"))


def range_end(range_id: int) -> None:
    """Ends a range opened by range_start(), on any thread, as torch.cuda.nvtx.range_end.

    Args:
        range_id: The id range_start() returned.

    Raises:
        TypeError: ``range_id`` is not an int.
        OverflowError: ``range_id`` does not fit in 64 bits.
        ValueError: No range with that id is open.

    Example:
        >>> import mpsrt
        >>> rid = mpsrt.profiler.range_start("epoch")
        >>> mpsrt.profiler.range_end(rid)
        >>> mpsrt.profiler.range_end(rid)
        Traceback (most recent call last):
            ...
        ValueError: [profiler] range_end: no range with id ... is open; ...
    """
    if isinstance(range_id, bool) or not isinstance(range_id, int):
        raise TypeError(
            "[profiler] range_end(): range_id must be an int returned by range_start(), got "
            f"{type(range_id).__name__}"
        )
    if not -(2**63) <= range_id < 2**63:
        raise OverflowError(f"[profiler] range_end(): range_id {range_id} does not fit in 64 bits")
    _P.range_end(range_id)


class range:
    """Context manager that puts a range around its block, as torch.cuda.nvtx.range.

    The range is pushed (range_push()) on entry and popped on exit.

    Args:
        msg: The range's name, formatted with ``args`` and ``kwargs`` (``str.format``) when
            any are given.
        *args: Positional arguments for ``msg.format``.
        **kwargs: Keyword arguments for ``msg.format``.

    Raises:
        TypeError: ``msg`` is not a str.

    Example:
        >>> import mpsrt
        >>> with mpsrt.profiler.profile():
        ...     for i in range(2):
        ...         with mpsrt.profiler.range("step {}", i):
        ...             buf = mpsrt.empty(256).fill_(i)
    """

    __slots__ = ("_msg",)

    def __init__(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._msg = _message(msg, "range()")
        if args or kwargs:
            self._msg = self._msg.format(*args, **kwargs)

    def __enter__(self) -> None:
        _P.range_push(self._msg)

    def __exit__(self, *exc: object) -> None:
        _P.range_pop()


def export_trace(path: str | os.PathLike[str]) -> None:
    """Writes the current (or last) session as Chrome/Perfetto trace JSON.

    The trace holds the signposts (ranges, marks, the commands' CPU encode intervals), the
    device intervals of each stream and the allocator's counters; Perfetto (ui.perfetto.dev)
    and chrome://tracing open it.

    Args:
        path: The file to write (a str or os.PathLike).

    Raises:
        TypeError: ``path`` is not a str or os.PathLike.
        RuntimeError: The file cannot be written.

    Warns:
        RuntimeWarning: Records were dropped because a thread's buffer was full (raise
            ``MPSRT_PROFILE_RECORDS``, the records per thread).

    Example:
        >>> import json, os, tempfile
        >>> import mpsrt
        >>> with mpsrt.profiler.profile():
        ...     buf = mpsrt.empty(1 << 20).fill_(1)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = os.path.join(d, "trace.json")
        ...     mpsrt.profiler.export_trace(path)
        ...     with open(path) as f:
        ...         sorted(json.load(f))
        ['displayTimeUnit', 'otherData', 'traceEvents']
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"export_trace(): path must be a str or os.PathLike, got {type(path).__name__}"
        )
    _events, _records, dropped = _P.export_trace(os.fsdecode(path))
    if dropped:
        warnings.warn(
            f"export_trace(): {dropped} profiler records were dropped because a thread's buffer "
            "was full; raise MPSRT_PROFILE_RECORDS for a complete trace",
            RuntimeWarning,
            stacklevel=2,
        )


def is_metal_capture_enabled() -> bool:
    """Whether a Metal GPU capture can be taken, as torch.mps.profiler.is_metal_capture_enabled.

    Returns:
        bool: True on the metal backend with ``MTL_CAPTURE_ENABLED=1`` in the environment;
        always False on the other backends.

    Example:
        >>> import mpsrt
        >>> mpsrt.profiler.is_metal_capture_enabled() in (True, False)
        True
        >>> mpsrt.backend() == "metal" or not mpsrt.profiler.is_metal_capture_enabled()
        True
    """
    return _C.backend() == "metal" and _P.capture_available()


def is_capturing_metal() -> bool:
    """Whether a metal_capture() block runs, as torch.mps.profiler.is_capturing_metal.

    Returns:
        bool: True inside a metal_capture() block; always False on the other backends.

    Example:
        >>> import mpsrt
        >>> mpsrt.profiler.is_capturing_metal()
        False
    """
    return _C.backend() == "metal" and _P.is_capturing()


@contextlib.contextmanager
def metal_capture(fname: str) -> Iterator[None]:
    """Context manager that takes a Metal GPU capture of its block, as
    torch.mps.profiler.metal_capture (metal backend only).

    Args:
        fname: The capture's path without its suffix: it is written to
            ``fname + ".gputrace"``.

    Returns:
        A context manager whose block is captured.

    Raises:
        TypeError: ``fname`` is not a str.
        RuntimeError: The backend is not metal, or capture is not enabled
            (``MTL_CAPTURE_ENABLED=1`` must be set before the process starts); raised on entry.

    Example:
        >>> import os, tempfile
        >>> import mpsrt
        >>> with tempfile.TemporaryDirectory() as d:
        ...     try:
        ...         with mpsrt.profiler.metal_capture(os.path.join(d, "fill")):
        ...             buf = mpsrt.empty(256).fill_(1)
        ...         captured = True
        ...     except RuntimeError:  # not metal, or MTL_CAPTURE_ENABLED unset
        ...         captured = False
        >>> captured == mpsrt.profiler.is_metal_capture_enabled()
        True
    """
    _message(fname, "metal_capture()")
    active = _C.backend()
    if active != "metal":
        raise RuntimeError(
            "metal_capture(): Metal GPU capture needs the metal backend; "
            f"the active backend is {active!r}"
        )
    if not _P.capture_available():
        raise RuntimeError(
            "metal_capture(): Metal GPU capture is not enabled; set MTL_CAPTURE_ENABLED=1 in the "
            "environment before the process starts"
        )
    _P.begin_capture(fname + ".gputrace")
    try:
        yield
    finally:
        _P.end_capture()
