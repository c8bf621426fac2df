"""Cost of small API calls against a nanobind call that does nothing.

Each sample times a plain Python loop of 10,000 calls (timeit-style), so every per-call
number includes the same loop overhead; the no-op is measured the same way, in turns with
the others.
"""

from __future__ import annotations

import mpsrt
from mpsrt import _bench

from .timing import Row, measure_interleaved, progress

AREA = "binding"
GOAL = 1.5
PEER = "nanobind no-op"


def run(quick: bool) -> list[Row]:
    fns = {
        "noop()": _bench.noop,
        "current_device()": mpsrt.current_device,
        "device_count()": mpsrt.device_count,
        "get_device_properties()": mpsrt.get_device_properties,
    }
    progress(f"[{AREA}] {', '.join(fns)}")
    if quick:
        stats = measure_interleaved(fns, rounds=3, warmup=1, repeats=10, number=10_000)
    else:
        stats = measure_interleaved(fns, rounds=20, warmup=1, repeats=10, number=10_000)
    ns = {name: st.median * 1e9 for name, st in stats.items()}
    noop = ns.pop("noop()")
    rows = []
    for name, value in ns.items():
        row = Row(AREA, name, value, "ns", PEER, noop)
        if name != "get_device_properties()":
            row.goal = f"<= {GOAL:g}x no-op"
            row.goal_met = value <= GOAL * noop
        rows.append(row)
    return rows
