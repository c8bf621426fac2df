"""Streams and events: encode and event costs from C++, a tiny fill from Python, and two
streams filling independently beside one."""

from __future__ import annotations

import mpsrt
import numpy as np
from mpsrt._C import _bench

from .timing import Row, measure_interleaved, progress

AREA = "streams"
MiB = 1 << 20


def _cpp_rows(quick: bool, backend: str) -> list[Row]:
    progress(f"[{AREA}] event record+query, encode fill (C++)")
    iters = 20_000 if quick else 100_000
    if backend != "cpu":
        iters //= 50  # a slower device bounds the loop by back-pressure
    rq = float(np.median([_bench.event_record_query_ns(iters) for _ in range(3 if quick else 7)]))
    enc = float(np.median([_bench.encode_fill_ns(iters) for _ in range(3 if quick else 7)]))
    return [
        Row(
            AREA,
            "event record + query (C++)",
            rq,
            "ns",
            goal="<= 200 ns",
            goal_met=rq <= 200,
            note="an idle stream: the record is signalled from the host (no command buffer)",
        ),
        Row(AREA, "encode one fill (C++)", enc, "ns", goal="<= 100 ns", goal_met=enc <= 100),
    ]


def _python_fill_sync(quick: bool) -> list[Row]:
    progress(f"[{AREA}] tiny fill_ + synchronize (Python)")
    b = mpsrt.empty(64)
    s = mpsrt.current_stream()

    def fill_sync() -> None:
        b.fill_(1)
        s.synchronize()

    st = measure_interleaved(
        {"f": fill_sync}, rounds=2 if quick else 5, warmup=1, repeats=10, number=200
    )["f"]
    us = st.median * 1e6
    return [
        Row(
            AREA,
            "tiny fill_ + stream synchronize (Python)",
            us,
            "µs",
            goal="<= 5 µs",
            goal_met=us <= 5,
        )
    ]


def _two_streams(quick: bool, n: int) -> list[Row]:
    progress(f"[{AREA}] two streams filling {n // MiB} MiB")
    a, b = mpsrt.empty(n), mpsrt.empty(n)
    s1, s2 = mpsrt.Stream(), mpsrt.Stream()
    for buf in (a, b):  # fault the pages in
        buf.fill_(0)
    mpsrt.synchronize()

    # mpsrt.synchronize() commits every stream before waiting, so the two fills run side by
    # side (a stream's own synchronize() may run its work on the calling thread).
    def one() -> None:
        with mpsrt.stream(s1):
            a.fill_(1)
        mpsrt.synchronize()

    def two() -> None:
        with mpsrt.stream(s1):
            a.fill_(2)
        with mpsrt.stream(s2):
            b.fill_(2)
        mpsrt.synchronize()

    st = measure_interleaved(
        {"one": one, "two": two}, rounds=2 if quick else 6, warmup=1, repeats=5 if quick else 10
    )
    one_gbs = n / st["one"].median / 1e9
    two_gbs = 2 * n / st["two"].median / 1e9
    return [
        Row(
            AREA,
            f"two streams, {n // MiB} MiB fills each",
            two_gbs,
            "GB/s",
            "one stream",
            one_gbs,
            goal=">= 1.7x one stream",
            goal_met=two_gbs >= 1.7 * one_gbs,
        )
    ]


def run(quick: bool, backend: str = "cpu") -> list[Row]:
    # The development VM has two vCPUs but about one core of compute between them: the
    # reference row says how much two threads can gain here at all.
    scaling = float(np.median([_bench.thread_scaling() for _ in range(3)]))
    ref = Row(
        AREA,
        "this machine: 2 threads vs 1 on a compute loop (C++)",
        scaling,
        "x",
        note="the ceiling for any two-stream or two-thread speed-up here",
    )
    # 64 MiB: past the caches, bound by memory bandwidth; 2 MiB: in cache, bound by the cores.
    rows = (
        _cpp_rows(quick, backend)
        + _python_fill_sync(quick)
        + [ref]
        + _two_streams(quick, 64 * MiB)
        + _two_streams(quick, 2 * MiB)
    )
    if backend != "cpu":
        for r in rows:  # the goals were set for the cpu backend
            if r.goal:
                r.goal, r.goal_met = f"{r.goal} (cpu)", None
    return rows
