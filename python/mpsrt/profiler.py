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
    """Starts a profiling session (the previous session's records are cleared).

    mode: "interval" (CPU encode and device execution intervals), "event" (completion
    instants) or "interval,event". wait_until_completed: every profiled command buffer
    commits and waits, so each command runs alone on the device timeline (slower).
    """
    bits = _mode_bits(mode, "start()")
    _P.start(bits, _check_wait(wait_until_completed, "start()"))


def stop() -> None:
    """Ends the session: waits for the profiled work to complete (its device intervals are
    recorded), then prints the statistics MPSRT_LOG_PROFILE_INFO asks for to stderr."""
    _P.stop()


@contextlib.contextmanager
def profile(mode: str = "interval", wait_until_completed: bool = False) -> Iterator[None]:
    """``with profile(): ...`` runs the block in a session (see start() and stop())."""
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
    """An instant on the calling thread's track (nothing is recorded outside a session)."""
    _P.mark(_message(msg, "mark()"))


def range_push(msg: str) -> int:
    """Opens a nested range on the calling thread; returns its 0-based depth."""
    return _P.range_push(_message(msg, "range_push()"))


def range_pop() -> int:
    """Closes the calling thread's innermost range; returns the depth it had. RuntimeError when
    the thread has no open range."""
    return _P.range_pop()


def range_start(msg: str) -> int:
    """Opens a range that any thread may end (torch.cuda.nvtx.range_start); returns its id, a
    positive int. Such ranges may overlap without nesting; a trace shows each on its own row."""
    return _P.range_start(_message(msg, "range_start()"))


def range_end(range_id: int) -> None:
    """Ends the range with this id (from range_start()), on any thread. ValueError when no
    range with that id is open."""
    if isinstance(range_id, bool) or not isinstance(range_id, int):
        raise TypeError(
            "[profiler] range_end(): range_id must be an int returned by range_start(), got "
            f"{type(range_id).__name__}"
        )
    if not -(2**63) <= range_id < 2**63:
        raise OverflowError(f"[profiler] range_end(): range_id {range_id} does not fit in 64 bits")
    _P.range_end(range_id)


class range:
    """``with range("step {}", i): ...``: a range around the block; msg is formatted with args
    and kwargs, as torch.cuda.nvtx.range. The range is pushed on entry and popped on exit."""

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
    """Writes the current (or last) session as Chrome/Perfetto trace JSON to `path`.

    Warns (RuntimeWarning) when records were dropped because a thread's buffer was full
    (MPSRT_PROFILE_RECORDS per thread).
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
    """True when a Metal GPU capture can be taken: the metal backend, with MTL_CAPTURE_ENABLED=1
    in the environment. Always False on the other backends."""
    return _C.backend() == "metal" and _P.capture_available()


def is_capturing_metal() -> bool:
    """True while a metal_capture() block runs. Always False on the other backends."""
    return _C.backend() == "metal" and _P.is_capturing()


@contextlib.contextmanager
def metal_capture(fname: str) -> Iterator[None]:
    """A Metal GPU capture of the block, written to `fname`.gputrace (metal backend only)."""
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
