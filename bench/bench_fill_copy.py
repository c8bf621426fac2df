"""Fill and copy bandwidth of raw device memory against memset/memcpy, numpy and torch.

Every peer works on the same pages as mpsrt (numpy and torch through zero-copy views of the
heap), touched once before timing, so the ratios compare kernels, not page faults or page
placement. Copies count the bytes copied once (GB = 1e9 bytes).
"""

from __future__ import annotations

from typing import Callable

import mpsrt
import numpy as np
from mpsrt._C import _bench

from .timing import Row, gbps, measure_interleaved, progress

try:
    import torch
except ImportError:
    torch = None

AREA = "fill_copy"
MiB = 1 << 20
BYTE = 0x5A
PATTERN = 0x01020304
GOAL_NEAR = 0.9
GOAL_LARGE = 2.0


def _size_name(nbytes: int) -> str:
    return f"{nbytes >> 30} GiB" if nbytes >= 1 << 30 else f"{nbytes >> 20} MiB"


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class _Case:
    """One operation at one size: mpsrt and its peers, timed in alternating turns.

    Gives one row per peer, all with the same mpsrt value.
    """

    def __init__(self, nbytes: int, op: str) -> None:
        self.nbytes = nbytes
        self.name = f"{op} {_size_name(nbytes)}"
        self.fns: dict[str, Callable[[], object]] = {}
        self.goals: dict[str, float] = {}

    def add(self, who: str, fn: Callable[[], object], goal: float | None = None) -> None:
        self.fns[who] = fn
        if goal is not None:
            self.goals[who] = goal

    def rows(self, quick: bool) -> list[Row]:
        progress(f"[{AREA}] {self.name}: {', '.join(self.fns)}")
        if quick:
            stats = measure_interleaved(self.fns, rounds=3, warmup=1, repeats=2, min_time=0.04)
        else:
            stats = measure_interleaved(self.fns, rounds=6, warmup=1, repeats=2, min_time=0.3)
        value = gbps(self.nbytes, stats.pop("mpsrt").median)
        rows = []
        for who, st in stats.items():
            row = Row(AREA, self.name, value, "GB/s", who, gbps(self.nbytes, st.median))
            goal = self.goals.get(who)
            if goal is not None:
                row.goal = f">= {goal:g}x {who}"
                row.goal_met = row.ratio is not None and row.ratio >= goal
            rows.append(row)
        return rows


def _sync_after(op: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        op()
        mpsrt.synchronize()

    return run


def _at_size(quick: bool, nbytes: int) -> list[Row]:
    src = _bench.RawHeap(nbytes)
    dst = _bench.RawHeap(nbytes)
    for h in (src, dst):  # fault every page in before timing
        h.fill(0)
        mpsrt.synchronize()
        h.c_memset(0)
    a_src, a_dst = src.numpy(), dst.numpy()
    t_src = t_dst = None
    if torch is not None:
        t_src, t_dst = torch.from_numpy(a_src), torch.from_numpy(a_dst)

    fill = _Case(nbytes, "byte fill")
    fill.add("mpsrt", _sync_after(lambda: dst.fill(BYTE)))
    fill.add("C memset", lambda: dst.c_memset(BYTE), GOAL_NEAR)
    fill.add("numpy fill", lambda: a_dst.fill(BYTE))
    if t_dst is not None:
        fill.add("torch fill_", lambda: t_dst.fill_(BYTE))

    pattern = _Case(nbytes, "4-byte fill")
    pattern.add("mpsrt", _sync_after(lambda: dst.fill(PATTERN, 4)))
    a_u32 = a_dst.view(np.uint32)
    pattern.add("numpy u32 fill", lambda: a_u32.fill(PATTERN))
    if torch is not None:
        t_i32 = torch.from_numpy(a_dst.view(np.int32))
        pattern.add("torch i32 fill_", lambda: t_i32.fill_(PATTERN))

    copy = _Case(nbytes, "copy")
    copy.add("mpsrt", _sync_after(lambda: dst.copy_from(src)))
    copy.add("C memcpy", lambda: dst.c_memcpy_from(src), GOAL_NEAR)
    copy.add("numpy copyto", lambda: np.copyto(a_dst, a_src))
    if t_dst is not None:
        copy.add("torch copy_", lambda: t_dst.copy_(t_src))
    return fill.rows(quick) + pattern.rows(quick) + copy.rows(quick)


def _large_fill(quick: bool) -> list[Row]:
    nbytes = 1 << 30
    case = _Case(nbytes, "large byte fill")
    goal = f">= {GOAL_LARGE:g}x C memset (NT stores / threads)"
    avail = _mem_available()
    if avail is not None and avail < 2 * nbytes:
        note = f"skipped: {avail / 2**30:.1f} GiB available, needs 2 GiB"
        return [Row(AREA, case.name, None, "GB/s", "C memset", goal=goal, note=note)]
    try:
        heap = _bench.RawHeap(nbytes)
    except (MemoryError, RuntimeError) as e:
        return [Row(AREA, case.name, None, "GB/s", "C memset", goal=goal, note=f"skipped: {e}")]
    heap.fill(0)
    mpsrt.synchronize()
    heap.c_memset(0)
    case.add("mpsrt", _sync_after(lambda: heap.fill(BYTE)))
    case.add("C memset", lambda: heap.c_memset(BYTE), GOAL_LARGE)
    rows = case.rows(quick)
    rows[0].goal = goal
    return rows


def run(quick: bool) -> list[Row]:
    sizes = [MiB, 64 * MiB] if quick else [MiB, 16 * MiB, 256 * MiB]
    rows: list[Row] = []
    for nbytes in sizes:
        rows += _at_size(quick, nbytes)
    if not quick:
        rows += _large_fill(quick)
    return rows
