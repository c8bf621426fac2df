"""Latency of committing an empty command buffer on the default stream and waiting for it.

Commits are timed in C++ (`_bench.commit_wait_ns`), so no Python overhead is in the numbers.
The park-only variant (MPSRT_CPU_SPIN_US=0) and the runs pinned to one CPU happen in
subprocesses, since options are read once per process and threads inherit the affinity.

On a GPU, a 1-element fill_ followed by a synchronize, from Python, stands beside the same on
each device peer (torch.cuda: `t.fill_(1.0); torch.cuda.synchronize()`), median and p99; the
CPU reference (torch's `t.add_(1)` on the CPU) is shown only where the device's memory is host
memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mpsrt
from mpsrt import _bench

from .peers import Goal, Peers, current, gpu_goal, versus
from .timing import Row, Stats, measure, progress

try:
    import torch
except ImportError:
    torch = None

AREA = "dispatch"
GOAL_US = 1.0
VULKAN_GOAL_US = 30.0
GPU_P99_GOAL_US = 50.0
GPU_ROUND_TRIP_GOAL = 1.2  # 1-element op + synchronize: at most this many times torch.cuda's
IDLE_US = 2000


def hot_samples_ns(iters: int) -> list[int]:
    """Back-to-back commit+wait latencies, after a warm-up."""
    _bench.commit_wait_ns(max(100, iters // 10))
    return _bench.commit_wait_ns(iters)


def _stats(samples_ns: list[int]) -> Stats:
    return Stats.from_samples([s * 1e-9 for s in samples_ns])


def _option(name: str) -> str:
    return next((o["value"] for o in mpsrt.options() if o["name"] == name), "?")


def _child(iters: int, spin_us: str | None = None, cpu: int | None = None) -> Stats | str:
    """Hot latencies from `python -m bench._worker` (own options, optionally pinned to one
    CPU), or why they could not be had."""
    env = dict(os.environ)
    if spin_us is not None:
        env["MPSRT_CPU_SPIN_US"] = spin_us
    cmd = [sys.executable, "-m", "bench._worker", "dispatch_hot", str(iters)]
    if cpu is not None:
        cmd.append(str(cpu))
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            cmd, env=env, cwd=root, capture_output=True, text=True, timeout=120, check=True
        )
        return _stats(json.loads(out.stdout)["samples_ns"])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
        err = (getattr(e, "stderr", "") or str(e)).strip()
        return f"subprocess failed: {err.splitlines()[-1] if err else type(e).__name__}"


def _versus(
    name: str, mine: Stats | str, peer_name: str, peer: Stats | str, note: str = ""
) -> list[Row]:
    """Median and p99 rows of `mine` against `peer` (either may be a failure message)."""
    rows = []
    for attr in ("median", "p99"):
        value = mine if isinstance(mine, str) else getattr(mine, attr) * 1e6
        other = peer if isinstance(peer, str) else getattr(peer, attr) * 1e6
        failed = " ".join(x for x in (value, other) if isinstance(x, str))
        rows.append(
            Row(
                AREA,
                f"{name}, {attr}",
                None if isinstance(value, str) else value,
                "µs",
                peer_name,
                None if isinstance(other, str) else other,
                note=failed or (note if attr == "median" else ""),
            )
        )
    return rows


def _round_trip_rows(quick: bool, peers: Peers) -> list[Row]:
    progress(f"[{AREA}] 1-element fill_ + synchronize (Python, device peers)")
    b = mpsrt.empty(1, "float32")

    def ours() -> None:
        b.fill_(1.0)
        mpsrt.synchronize()

    timing = {"rounds": 3 if quick else 5, "warmup": 20, "repeats": 200 if quick else 1000}
    goal = Goal(f"<= {GPU_ROUND_TRIP_GOAL:g}x {{peer}}'s time", 1 / GPU_ROUND_TRIP_GOAL)
    return versus(peers, AREA, "1-element fill_ + synchronize (Python)", ours,
                  lambda p: p.tiny_op_sync(), unit="µs", sync=False, stats=("median", "p99"),
                  goal=goal, timing=timing)  # fmt: skip


def run(quick: bool, backend: str = "cpu", peers: Peers | None = None) -> list[Row]:
    peers = peers or current(backend)
    iters = 2000 if quick else 20000
    idle_iters = 100 if quick else 500
    rows: list[Row] = []
    us = 1e6

    progress(f"[{AREA}] hot commit+wait x{iters}")
    hot = _stats(hot_samples_ns(iters))
    # cpu: a worker thread's hand-off; vulkan: a submit, the device and the semaphore poll.
    limit = GOAL_US if backend == "cpu" else VULKAN_GOAL_US if backend == "vulkan" else None
    rows.append(Row(AREA, "hot, median", hot.median * us, "µs"))
    if limit is not None:
        rows[-1].goal = f"<= {limit:g} µs" + (" (polling)" if backend == "vulkan" else "")
        rows[-1].goal_met = hot.median * us <= limit
    rows.append(Row(AREA, "hot, p99", hot.p99 * us, "µs"))
    if backend != "cpu":
        p99 = hot.p99 * us
        gpu_goal(rows[-1], f"<= {GPU_P99_GOAL_US:g} µs", p99 <= GPU_P99_GOAL_US, peers)

    progress(f"[{AREA}] commit+wait after {IDLE_US} µs idle x{idle_iters}")
    _bench.commit_wait_ns(10, IDLE_US)
    idle = _stats(_bench.commit_wait_ns(idle_iters, IDLE_US))
    rows.append(Row(AREA, f"after {IDLE_US} µs idle, median", idle.median * us, "µs"))
    rows.append(Row(AREA, f"after {IDLE_US} µs idle, p99", idle.p99 * us, "µs"))

    # The spin and pinning variants are settings of the cpu backend's queues.
    if backend == "cpu":
        progress(f"[{AREA}] hot commit+wait, MPSRT_CPU_SPIN_US=0 (subprocess)")
        spin = f"spin-then-park (SPIN_US={_option('MPSRT_CPU_SPIN_US')})"
        park = "park-only (SPIN_US=0)"
        note = "both columns are mpsrt; ratio > 1 means spinning before parking pays"
        rows += _versus(f"hot, {spin}", hot, park, _child(iters, "0"), note)

    if backend == "cpu" and hasattr(os, "sched_setaffinity"):
        # Caller and worker sharing one CPU: what a busy or small machine may do to them.
        cpu = min(os.sched_getaffinity(0))
        n = min(iters, 5000)
        progress(f"[{AREA}] hot commit+wait on one CPU (subprocesses)")
        rows += _versus(f"hot on 1 CPU, {spin}", _child(n, cpu=cpu), park, _child(n, "0", cpu))

    if torch is not None and peers.cpu_peers:
        progress(f"[{AREA}] torch CPU t.add_(1), 1 element")
        t = torch.zeros(1)
        ref = measure(lambda: t.add_(1), warmup=2, repeats=50, min_time=0.2, number=1000)
        rows.append(
            Row(
                AREA,
                "hot, median (reference)",
                hot.median * us,
                "µs",
                "torch CPU t.add_(1), 1 elem",
                ref.median * us,
            )
        )
    if peers.device_style:
        rows += _round_trip_rows(quick, peers)
    return rows
