"""The one timing helper of `python -m bench`, the result row and the table printer."""

from __future__ import annotations

import math
import shutil
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

# Units where a larger value is better; every other unit is a time (smaller is better).
BANDWIDTH_UNITS = ("GB/s",)


@dataclass
class Stats:
    """Per-call seconds over the samples of one measurement."""

    median: float
    min: float
    max: float
    p99: float
    count: int
    samples: list[float] = field(default_factory=list, repr=False)

    @classmethod
    def from_samples(cls, samples: Sequence[float]) -> Stats:
        """Stats of per-call seconds (also used for samples timed natively, e.g. in C++)."""
        if not samples:
            raise ValueError("no samples")
        ordered = sorted(samples)
        p99 = ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
        median = statistics.median(ordered)
        return cls(median, ordered[0], ordered[-1], p99, len(ordered), list(samples))


def measure(
    fn: Callable[[], object],
    *,
    warmup: int = 2,
    repeats: int = 10,
    min_time: float = 0.0,
    number: int = 1,
    max_time: float = 10.0,
    sync: Callable[[], object] | None = None,
) -> Stats:
    """Times `fn()` and returns stats of per-call seconds.

    Runs `warmup` untimed samples, then at least `repeats` timed samples, and keeps sampling
    until `min_time` seconds have been spent timing (but stops adding samples after
    `max_time`). Each sample times `number` back-to-back calls in a plain loop (timeit-style,
    so the loop's own cost is included) and divides by `number`. With `sync` (a device's
    synchronize), each sample ends with one `sync()` inside the timed region, so that device
    work queued by the calls is waited for; the warm-up ends with one too.
    """
    clock = time.perf_counter
    loop = range(number)
    for _ in range(warmup):
        for _ in loop:
            fn()
    if sync is not None:
        sync()
    samples: list[float] = []
    spent = 0.0
    while len(samples) < repeats or (spent < min_time and spent < max_time):
        t0 = clock()
        for _ in loop:
            fn()
        if sync is not None:
            sync()
        dt = clock() - t0
        spent += dt
        samples.append(dt / number)
    return Stats.from_samples(samples)


def measure_interleaved(
    fns: Mapping[str, Callable[[], object]],
    *,
    rounds: int = 3,
    syncs: Mapping[str, Callable[[], object]] | None = None,
    **kwargs: Any,
) -> dict[str, Stats]:
    """`measure` of several functions in `rounds` alternating turns, samples pooled per name.

    Competitors then see the same machine (other load, clock changes), which keeps their
    ratios steadier than timing one after the other. `kwargs` go to `measure` for each turn;
    `syncs` gives each name its own `sync` (mpsrt.synchronize, torch.cuda.synchronize, ...).
    """
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            sync = syncs.get(name) if syncs else None
            samples[name] += measure(fn, sync=sync, **kwargs).samples
    return {name: Stats.from_samples(s) for name, s in samples.items()}


def gbps(nbytes: int, seconds: float) -> float:
    """Decimal GB/s (1 GB = 1e9 bytes)."""
    return nbytes / seconds / 1e9


@dataclass
class Row:
    """One line of a result table: an mpsrt number, optionally beside one peer's number.

    `ratio` is oriented so that > 1 is better for mpsrt: value/peer for bandwidths,
    peer/value for times. `goal_met` is None where the row has no goal.
    """

    area: str
    name: str
    value: float | None
    unit: str
    peer_name: str = ""
    peer_value: float | None = None
    ratio: float | None = None
    goal: str = ""
    goal_met: bool | None = None
    note: str = ""
    backend: str = ""  # set by the runner

    def __post_init__(self) -> None:
        if self.ratio is None and self.value and self.peer_value:
            if self.higher_is_better:
                self.ratio = self.value / self.peer_value
            else:
                self.ratio = self.peer_value / self.value

    @property
    def higher_is_better(self) -> bool:
        return self.unit in BANDWIDTH_UNITS


def _fmt(x: float | None, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if x == 0 or abs(x) >= 100:
        text = f"{x:.0f}"
    elif abs(x) >= 10:
        text = f"{x:.1f}"
    else:
        text = f"{x:.2f}"
    return f"{text} {unit}".rstrip()


def _status(row: Row) -> str:
    if row.goal_met is None:
        return "-"
    return "ok" if row.goal_met else "MISS"


TABLE_HEADER = ("case", "mpsrt", "peer", "peer value", "ratio", "goal", "status")


def row_cells(r: Row) -> tuple[str, ...]:
    """A row's cells as the tables show them, in TABLE_HEADER's order."""
    return (
        r.name,
        _fmt(r.value, r.unit),
        r.peer_name or "-",
        _fmt(r.peer_value, r.unit),
        "-" if r.ratio is None else f"{r.ratio:.2f}x",
        r.goal or "-",
        _status(r),
    )


def format_table(area: str, rows: list[Row]) -> str:
    """One table for one area, with a line saying how ratios are oriented, then notes."""
    header = TABLE_HEADER
    cells = [row_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in [header, *cells]) for i in range(len(header))]
    right = {1, 3, 4}  # numbers are right-aligned

    def line(c: Sequence[str]) -> str:
        parts = [
            s.rjust(w) if i in right else s.ljust(w) for i, (s, w) in enumerate(zip(c, widths))
        ]
        return "  ".join(parts).rstrip()

    out = [f"== {area} ==", line(header), line(["-" * w for w in widths])]
    out += [line(c) for c in cells]
    out.append("ratio > 1 is better for mpsrt: mpsrt/peer for GB/s, peer/mpsrt for times.")
    # A note shared by several rows (e.g. why a device row has no peer) is printed once.
    by_note: dict[str, list[str]] = {}
    for r in rows:
        if r.note:
            by_note.setdefault(r.note, []).append(r.name)
    for note, names in by_note.items():
        more = len(dict.fromkeys(names)) - 1
        where = names[0] + (
            f" (and {more} other rows)" if more > 1 else " (and 1 other row)" if more else ""
        )
        out.append(f"note: {where}: {note}")
    missed = sum(r.goal_met is False for r in rows)
    goals = sum(r.goal_met is not None for r in rows)
    if goals:
        out.append(f"goals: {goals - missed} of {goals} met")
    return "\n".join(out)


_progress_width = 0


def progress(text: str) -> None:
    """Shows `text` on one stderr line, overwritten by the next call (only on a terminal)."""
    global _progress_width
    if not sys.stderr.isatty():
        return
    cols = shutil.get_terminal_size((80, 20)).columns - 1
    text = text[:cols]
    sys.stderr.write("\r" + text.ljust(_progress_width))
    sys.stderr.flush()
    _progress_width = len(text)


def progress_clear() -> None:
    global _progress_width
    if _progress_width and sys.stderr.isatty():
        sys.stderr.write("\r" + " " * _progress_width + "\r")
        sys.stderr.flush()
    _progress_width = 0
