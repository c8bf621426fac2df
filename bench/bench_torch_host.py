"""The host cost of one op on mpsrt's kernels: what the CPU spends to enqueue it, not the device's
time. Each sample waits for the device first and makes `WARM` calls (both untimed), then times
`CALLS` calls back to back without waiting, so the figure is the time torch's dispatcher, the
glue and the runtime take to record the op. The warm calls matter where the device is software
on the host's own cores (lavapipe): its run of the previous sample's work evicts the host's
caches, and the first calls after it measured 0.1-2 ms each (a Python call that does nothing:
7.5 us), a cost of the device sharing the CPU rather than of enqueueing.

mpsrt records ops into an open command buffer and encodes them into the device's command buffer
when it commits (at a synchronize, a stream's query(), an event): that share, the commit's time
divided by the ops it carried (query() commits without waiting), is in the row's note. On
lavapipe it is the software driver's recording; a GPU driver's is a fraction of it. Cases: a
1-element `add_` (the per-op floor), a small convolution, a batch norm in training and an
attention call; goals are absolute (the host's cost does not depend on the GPU): `add_` <= 1.5
us, the others <= 3 us.

Beside it, on this machine: torch CPU running the same call (computing it: the cost a user of
the host alone pays), and on a GPU with torch.cuda in the process, torch.cuda's enqueue cost
timed the same way.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from .peers import Peers
from .timing import Row, progress

AREA = "torch"
CALLS = {False: 200, True: 50}  # calls per sample: few enough not to fill the device's queue
WARM = 10  # untimed calls after the wait (see above)
ROUNDS = {False: 30, True: 5}
GOAL_NS = {"add_": 1500.0}  # the other cases: 3000 ns


def _make(torch: Any, case: str, device: str) -> Callable[[], object]:
    """The call a case times, with its tensors on `device` (made once, seeded)."""
    g = torch.Generator().manual_seed(0)
    if case == "add_":
        t = torch.zeros(1, device=device)
        return lambda: t.add_(1)
    if case == "conv2d":
        x = torch.randn(1, 8, 16, 16, generator=g).to(device)
        w = torch.randn(8, 8, 3, 3, generator=g).to(device)
        return lambda: torch.nn.functional.conv2d(x, w, padding=1)
    if case == "batch_norm":
        x = torch.randn(2, 8, 16, 16, generator=g).to(device)
        mean, var = torch.zeros(8, device=device), torch.ones(8, device=device)
        return lambda: torch.nn.functional.batch_norm(x, mean, var, training=True)
    q = torch.randn(1, 2, 16, 32, generator=g).to(device)
    return lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q)


CASES = {
    "add_": "t.add_(1), 1 element",
    "conv2d": "conv2d 8->8 ch, 3x3, 16x16, padding 1",
    "batch_norm": "batch_norm training, 2x8x16x16",
    "sdpa": "scaled_dot_product_attention 1x2x16x32",
}


def host_ns(
    fn: Callable[[], object],
    sync: Callable[[], object],
    quick: bool,
    commit: Callable[[], object] = lambda: None,
) -> tuple[float, float]:
    """The medians over samples of the time per call, in ns, of CALLS calls enqueued back to back
    after the device was waited for and WARM calls were made (untimed), and of their `commit`
    (not waiting) per call enqueued."""
    calls, per, committing = CALLS[quick], [], []
    fn()  # the first call builds pipelines and caches
    for _ in range(ROUNDS[quick]):
        sync()
        for _ in range(WARM):
            fn()
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter_ns()
        commit()
        per.append((t1 - t0) / calls)
        committing.append((time.perf_counter_ns() - t1) / (calls + WARM))
    sync()
    return statistics.median(per), statistics.median(committing)


def _peer(torch: Any, peers: Peers, case: str, quick: bool) -> tuple[str, float | None]:
    """torch.cuda's enqueue cost where it is in the process, else torch CPU's time."""
    for p in peers.instances():
        if getattr(p, "device", None) == "cuda" and getattr(p, "real", False):
            fn = _make(torch, case, "cuda")
            return "torch cuda (enqueue)", host_ns(fn, torch.cuda.synchronize, quick)[0]
    return "torch cpu (computed)", host_ns(_make(torch, case, "cpu"), lambda: None, quick)[0]


def rows(torch: Any, quick: bool, peers: Peers) -> list[Row]:
    out = []
    for case, name in CASES.items():
        name = f"host cost: {name}"
        progress(f"[{AREA}] {name}")
        fallbacks_before = sum(torch.mpsrt.fallback_counts().values())
        stream = torch.mpsrt.current_stream()
        fn = _make(torch, case, "mpsrt")
        mine, commit = host_ns(fn, torch.mpsrt.synchronize, quick, stream.query)
        fell_back = sum(torch.mpsrt.fallback_counts().values()) > fallbacks_before
        peer_name, theirs = _peer(torch, peers, case, quick)
        goal = GOAL_NS.get(case, 3000.0)
        row = Row(AREA, name, mine, "ns", peer_name, theirs)
        row.goal = f"<= {goal / 1000:g} us"
        row.goal_met = None if fell_back else mine <= goal
        row.note = f"commit: {commit:.0f} ns per op more"
        if fell_back:
            row.note += "; the op ran through the fallback here (no kernel took it): no goal judged"
        out.append(row)
    return out
