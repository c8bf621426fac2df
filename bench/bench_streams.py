"""Streams and events: encode and event costs from C++, a tiny fill from Python, and two
streams filling independently beside one.

On a GPU, Event.record() + query() stands beside the device peers' events (torch.cuda.Event;
goal: ahead of torch.cuda) instead of torch's CPU event where the memory is not host memory,
each two-stream sample is a batch of fills per stream (about 64 MiB of them) followed by one
synchronize, and the device peer's own two streams against one are shown beside mpsrt's.
"""

from __future__ import annotations

import mpsrt
import numpy as np
from mpsrt import _bench

from .peers import Goal, Peers, cpu_goals, current, gpu_goal, versus
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


def _device_event(quick: bool, peers: Peers) -> list[Row]:
    progress(f"[{AREA}] Event.record() + query() (Python, device peers)")
    e = mpsrt.Event()

    def ours() -> None:
        e.record()
        e.query()

    timing = {"rounds": 2 if quick else 5, "warmup": 1, "repeats": 10}
    return versus(peers, AREA, "Event.record() + query() (Python)", ours, lambda p: p.event(),
                  unit="ns", number=2000, sync=False, goal=Goal("<= 1.0x {peer}", 1.0),
                  timing=timing)  # fmt: skip


def _python_event(quick: bool) -> list[Row]:
    """Event.record() + query() from Python, beside torch's CPU event (torch.cpu.Event)."""
    progress(f"[{AREA}] Event.record() + query() (Python)")
    e = mpsrt.Event()

    def ours() -> None:
        e.record()
        e.query()

    fns = {"mpsrt": ours}
    try:
        import torch

        te = torch.cpu.Event()

        def theirs() -> None:
            te.record()
            te.query()

        fns["torch"] = theirs
    except (ImportError, AttributeError):
        pass
    st = measure_interleaved(fns, rounds=2 if quick else 5, warmup=1, repeats=10, number=2000)
    ns = {k: v.median * 1e9 for k, v in st.items()}
    peer = ("torch.cpu.Event", ns["torch"]) if "torch" in ns else ("", None)
    note = "torch.cpu.Event records nothing (CPU ops run synchronously): a floor for a call pair"
    return [Row(AREA, "Event.record() + query() (Python)", ns["mpsrt"], "ns", *peer, note=note)]


# Goals set for a GPU: two streams of independent byte fills against one stream.
GPU_STREAM_GOALS = {2 * MiB: 1.5, 64 * MiB: 1.0}


def _peer_streams(fns: dict, peers: Peers | None, kind: str, n: int, batch: int) -> list[str]:
    """Adds each device peer's one- and two-stream fills to `fns` ("<peer> one", "<peer>
    two"); returns the names of the peers added."""
    theirs: list[str] = []
    if peers is None or not peers.device_style or kind != "fill":
        return theirs
    for p in peers.instances():
        try:
            f1, f2 = p.streams(n, 1, batch), p.streams(n, 2, batch)
        except Exception:
            f1 = f2 = None
        if f1 is not None and f2 is not None:
            fns[f"{p.name} one"], fns[f"{p.name} two"] = f1, f2
            theirs.append(p.name)
    return theirs


def _two_streams(
    quick: bool, n: int, kind: str, ceiling: float, peers: Peers | None = None
) -> list[Row]:
    """Two streams each filling n bytes (`kind` "fill": bytes, bound by memory or cache
    bandwidth; "normal": float32 normal numbers, compute-bound) beside one stream. On a GPU
    each stream gets a batch of fills per sample (about 64 MiB), and the device peers' two
    streams are timed beside."""
    gpu = peers is not None and peers.gpu
    batch = max(1, min(64, (64 * MiB) // n)) if gpu else 1
    progress(f"[{AREA}] two streams, {kind} {n // MiB} MiB")
    if kind == "normal":
        a, b = mpsrt.empty(n // 4, "float32"), mpsrt.empty(n // 4, "float32")
        g1, g2 = mpsrt.Generator().manual_seed(1), mpsrt.Generator().manual_seed(2)

        def fill(x: mpsrt.Buffer) -> None:
            x.normal_(generator=g1 if x is a else g2)

    else:
        a, b = mpsrt.empty(n), mpsrt.empty(n)

        def fill(x: mpsrt.Buffer) -> None:
            x.fill_(2)

    s1, s2 = mpsrt.Stream(), mpsrt.Stream()
    for buf in (a, b):  # fault the pages in
        buf.fill_(0)
    mpsrt.synchronize()

    # mpsrt.synchronize() commits every stream but one before waiting, and may run that one's
    # work on the calling thread: the two fills run side by side.
    def one() -> None:
        with mpsrt.stream(s1):
            for _ in range(batch):
                fill(a)
        mpsrt.synchronize()

    def two() -> None:
        with mpsrt.stream(s1):
            for _ in range(batch):
                fill(a)
        with mpsrt.stream(s2):
            for _ in range(batch):
                fill(b)
        mpsrt.synchronize()

    fns = {"one": one, "two": two}
    theirs = _peer_streams(fns, peers, kind, n, batch)
    st = measure_interleaved(fns, rounds=2 if quick else 6, warmup=1, repeats=5 if quick else 10)
    per_sample = n * batch
    one_gbs = per_sample / st["one"].median / 1e9
    two_gbs = 2 * per_sample / st["two"].median / 1e9
    what = "normal float32" if kind == "normal" else "byte"
    size = f"{n // MiB} MiB" if n >= MiB else f"{n >> 10} KiB"
    name = f"two streams, {what} fills of {size} each"
    row = Row(AREA, name, two_gbs, "GB/s", "one stream", one_gbs)
    rows = [row]
    if kind == "normal":
        row.goal = ">= 1.7x one stream (when the ceiling is >= 1.9x)"
        row.goal_met = two_gbs >= 1.7 * one_gbs if ceiling >= 1.9 else None
    elif peers is not None and peers.gpu:
        row.note = f"{batch} fills per stream per sample"
    else:
        row.note = "bound by the memory system (64 MiB) or the shared L3 (2 MiB), not by mpsrt"
    if kind == "fill" and peers is not None and peers.backend != "cpu" and n in GPU_STREAM_GOALS:
        want = GPU_STREAM_GOALS[n]
        gpu_goal(row, f">= {want:g}x one stream", two_gbs >= want * one_gbs, peers)
    for p in theirs:
        t_one = per_sample / st[f"{p} one"].median / 1e9
        t_two = 2 * per_sample / st[f"{p} two"].median / 1e9
        note = f"{p}: two streams {t_two / t_one:.2f}x its one stream ({t_one:.3g} GB/s)"
        rows.append(Row(AREA, name, two_gbs, "GB/s", f"{p}, two streams", t_two, note=note))
    return rows


def run(quick: bool, backend: str = "cpu", peers: Peers | None = None) -> list[Row]:
    peers = peers or current(backend)
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
    # Byte fills: 64 MiB bound by memory bandwidth, 2 MiB by the caches; normal float32 fills
    # of 512 KiB (below the size that splits one fill over the pool) are bound by the cores.
    rows = (
        _cpp_rows(quick, backend)
        + (_python_event(quick) if peers.cpu_peers else [])
        + _python_fill_sync(quick)
        + [ref]
        + _two_streams(quick, MiB // 2, "normal", scaling, peers)
    )
    cpu_goals(rows, backend)  # the goals above were set for the cpu backend
    if peers.device_style:
        rows[2:2] = _device_event(quick, peers)
    rows += _two_streams(quick, 64 * MiB, "fill", scaling, peers)
    rows += _two_streams(quick, 2 * MiB, "fill", scaling, peers)
    peers.release()
    return rows
