"""The profiler: what a signpost costs with the profiler off and on, what profiling adds to
encoding a command, Python ranges beside torch.profiler.record_function, and exporting a
trace of one million records.

C++ figures come from mpsrt._bench (loops timed in C++); Python figures time a plain loop
of 10,000 `with ...: pass` blocks, interleaved with the peer's.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import mpsrt
from mpsrt import _bench, profiler

from .timing import Row, Stats, measure_interleaved, progress

AREA = "profiler"
OFF_GOAL_NS = 5.0
ON_GOAL_NS = 200.0
EXPORT_RECORDS = 1_000_000
EXPORT_GOAL_S = 2.0


def _median(fn, rounds: int) -> float:  # type: ignore[no-untyped-def]
    return Stats.from_samples([fn() for _ in range(rounds)]).median


@contextmanager
def _quiet_output() -> Iterator[None]:
    """Sends what native code writes to stdout and stderr to /dev/null meanwhile."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def _torch_rows(quick: bool) -> list[Row]:
    rounds = 3 if quick else 10
    try:
        import torch
        from torch.autograd.profiler import record_function
    except ImportError:
        return [Row(AREA, "range() enter+exit (Python)", None, "ns", note="torch not installed")]
    rows = []
    for on in (False, True):
        label = "on" if on else "off"
        progress(f"[{AREA}] Python ranges, profiler {label}")

        def ours() -> None:
            with profiler.range("step"):
                pass

        def theirs() -> None:
            with record_function("step"):
                pass

        if on:
            # torch's profiler prints lines of its own at start and stop.
            with (
                _quiet_output(),
                torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]),
            ):
                with profiler.profile():
                    stats = measure_interleaved(
                        {"mpsrt": ours, "torch": theirs}, rounds=rounds, repeats=3, number=10_000
                    )
        else:
            stats = measure_interleaved(
                {"mpsrt": ours, "torch": theirs}, rounds=rounds, repeats=3, number=10_000
            )
        rows.append(
            Row(
                AREA,
                f"range() enter+exit, profiler {label} (Python)",
                stats["mpsrt"].median * 1e9,
                "ns",
                "torch record_function",
                stats["torch"].median * 1e9,
            )
        )
    return rows


def run(quick: bool, backend: str = "cpu") -> list[Row]:
    rounds = 5 if quick else 21
    # A device slower than the host bounds an encode loop by back-pressure: fewer commands.
    encodes = 100_000 if backend == "cpu" else 1_000
    rows: list[Row] = []

    progress(f"[{AREA}] signposts from C++")
    off = _median(lambda: _bench.signpost_ns(1_000_000, False), rounds)
    on = _median(lambda: _bench.signpost_ns(100_000, True), rounds)
    rows.append(
        Row(
            AREA,
            "signpost (mark), profiler off (C++)",
            off,
            "ns",
            goal=f"<= {OFF_GOAL_NS:g} ns",
            goal_met=off <= OFF_GOAL_NS,
        )
    )
    rows.append(
        Row(
            AREA,
            "signpost (mark), profiler on (C++)",
            on,
            "ns",
            goal=f"<= {ON_GOAL_NS:g} ns",
            goal_met=on <= ON_GOAL_NS,
        )
    )

    progress(f"[{AREA}] encoding a fill with the profiler off and on")
    enc_off = _median(lambda: _bench.encode_fill_ns(encodes, False), rounds)
    enc_on = _median(lambda: _bench.encode_fill_ns(encodes, True), rounds)
    rows.append(
        Row(
            AREA,
            "encode one fill, profiler on (C++)",
            enc_on,
            "ns",
            "profiler off",
            enc_off,
            note="on: two device timestamps, the encode interval and its flow id per command",
        )
    )

    rows += _torch_rows(quick)

    # The export does not depend on the backend: measured where recording a million
    # records is quick.
    if backend == "cpu":
        progress(f"[{AREA}] exporting {EXPORT_RECORDS:,} records")
        fd, path = tempfile.mkstemp(suffix=".json", prefix="mpsrt-trace-")
        os.close(fd)
        try:
            secs, records, dropped = _bench.profile_export(EXPORT_RECORDS, path)
            size = os.path.getsize(path)
        finally:
            os.unlink(path)
            with profiler.profile():
                pass  # leave an empty session behind, not a million records
        rows.append(
            Row(
                AREA,
                f"export_trace of {records / 1e6:.2f}M records",
                secs,
                "s",
                goal=f"<= {EXPORT_GOAL_S:g} s",
                goal_met=secs <= EXPORT_GOAL_S and dropped == 0,
                note=f"{size / 1e6:.0f} MB of JSON, {size / secs / 1e6:.0f} MB/s, "
                f"{dropped} dropped",
            )
        )
    mpsrt.synchronize()
    return rows
