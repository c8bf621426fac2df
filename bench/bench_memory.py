"""The caching allocator beside its peers.

- Python `empty(n)` + release (a cache hit after the first call) beside `numpy.empty` and,
  when installed, `torch.empty`;
- the same from C++ (`mpsrt::Buffer`) beside `posix_memalign` + `free`;
- page faults when 256 MiB is allocated again after a free, and filled;
- a mixed-size trace (transformer-like activations at varying sequence lengths): peak
  reserved / peak allocated beside a whole-buffer cache without split (the policy of
  torch.mps's allocator, modelled here), goal <= 1.3.

The Python `empty()` rows, the cache misses and the page faults are device rows: where the
device's memory is not host memory they stand beside the device's peers (torch.cuda.empty,
cupy.empty; goal at 1 MiB: ahead of torch.cuda) instead of numpy and torch on the CPU. The C++
cache-hit rows and the trace time the allocator's bookkeeping on the host: they keep their
peers everywhere.
"""

from __future__ import annotations

import random
import resource

import mpsrt
import numpy as np
from mpsrt import _bench

from .peers import Goal, Peers, cpu_goals, current, versus
from .timing import Row, measure_interleaved, progress

try:
    import torch
except ImportError:
    torch = None

AREA = "memory"
KiB, MiB = 1 << 10, 1 << 20


def _size_name(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else (f"{n // KiB} KiB" if n >= KiB else f"{n} B")


def _python_rows(quick: bool) -> list[Row]:
    rows = []
    for n in (64, MiB, 256 * MiB):
        fns = {
            "mpsrt": lambda n=n: mpsrt.empty(n),
            "numpy.empty": lambda n=n: np.empty(n, np.uint8),
        }
        if torch is not None:
            fns["torch.empty"] = lambda n=n: torch.empty(n, dtype=torch.uint8)
        progress(f"[{AREA}] empty({_size_name(n)}) + release")
        number = 200 if n > MiB else 5000
        st = measure_interleaved(
            fns, rounds=2 if quick else 6, warmup=1, repeats=5 if quick else 10, number=number
        )
        ns = {k: v.median * 1e9 for k, v in st.items()}
        case = f"empty({_size_name(n)}) + release"
        row = Row(AREA, case, ns["mpsrt"], "ns", "numpy.empty", ns["numpy.empty"])
        if n <= MiB:  # a cache hit: the binding's own cost against numpy's
            row.goal, row.goal_met = "<= 1.0x numpy.empty", ns["mpsrt"] <= ns["numpy.empty"]
        rows.append(row)
        if "torch.empty" in ns:
            row = Row(AREA, case, ns["mpsrt"], "ns", "torch.empty", ns["torch.empty"])
            if n == MiB:
                row.goal = "<= 0.25x torch.empty"
                row.goal_met = ns["mpsrt"] <= 0.25 * ns["torch.empty"]
            rows.append(row)
    return rows


def _device_python_rows(quick: bool, peers: Peers) -> list[Row]:
    """empty(n) + release beside the device peers' caching allocators (torch.cuda.empty)."""
    rows = []
    timing = {"rounds": 2 if quick else 6, "warmup": 1, "repeats": 5 if quick else 10}
    for n in (64, MiB, 256 * MiB):
        progress(f"[{AREA}] empty({_size_name(n)}) + release (device peers)")
        goal = Goal("<= 1.0x {peer}", 1.0) if n == MiB else None
        rows += versus(peers, AREA, f"empty({_size_name(n)}) + release", lambda n=n: mpsrt.empty(n),
                       lambda p, n=n: p.empty(n), unit="ns", number=200 if n > MiB else 5000,
                       sync=False, goal=goal, timing=timing)  # fmt: skip
    peers.release()
    return rows


def _cpp_rows(quick: bool, cpu_peers: bool = True) -> list[Row]:
    rows = []
    for n in (64, MiB, 256 * MiB):
        progress(f"[{AREA}] C++ Buffer({_size_name(n)}) + free")
        iters = (2_000 if n > MiB else 100_000) // (5 if quick else 1)
        ours, theirs = [], []
        for _ in range(3 if quick else 7):  # interleaved, medians
            ours.append(_bench.alloc_free_ns(n, iters))
            theirs.append(_bench.posix_memalign_free_ns(n, iters))
        mine, peer = float(np.median(ours)), float(np.median(theirs))
        rows.append(
            Row(
                AREA,
                f"C++ alloc+free {_size_name(n)}",
                mine,
                "ns",
                "posix_memalign+free",
                peer,
                goal="<= 1.0x posix_memalign",
                goal_met=mine <= peer,
            )
        )
        misses = [_bench.alloc_free_ns(n, max(20, iters // 100), True) for _ in range(3)]
        # A miss makes a device heap: host memory is its peer only where it is device memory.
        rows.append(
            Row(
                AREA,
                f"C++ alloc+free {_size_name(n)}, cache miss (new heap each time)",
                float(np.median(misses)),
                "ns",
                *(("posix_memalign+free", peer) if cpu_peers else ()),
                note="" if cpu_peers else "a new device heap (no host-memory peer)",
            )
        )
    return rows


def _minflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _fault_rows(cpu_peers: bool = True) -> list[Row]:
    progress(f"[{AREA}] page faults, 256 MiB again")
    n = 256 * MiB
    b = mpsrt.empty(n)
    b.fill_(1)
    mpsrt.synchronize()
    del b
    f0 = _minflt()
    b = mpsrt.empty(n)
    b.fill_(2)
    mpsrt.synchronize()
    ours = _minflt() - f0
    del b
    name, goal = "256 MiB again + fill: page faults", {"goal": "0 faults", "goal_met": ours == 0}
    if not cpu_peers:
        note = "host page faults while device memory is reused and filled"
        return [Row(AREA, name, ours, "faults", note=note, **goal)]
    a = np.empty(n, np.uint8)
    a.fill(1)
    del a
    f0 = _minflt()
    a = np.empty(n, np.uint8)
    a.fill(2)
    theirs = _minflt() - f0
    del a
    return [Row(AREA, name, ours, "faults", "numpy.empty", theirs, **goal)]


def _trace(seed: int, steps: int) -> list[tuple[str, int, int]]:
    """Alloc/free events of a transformer-like forward pass at varying sequence lengths."""
    rng = random.Random(seed)
    batch, hidden, heads, layers = 4, 2048, 16, 4  # a ~1B-parameter model's shapes
    events: list[tuple[str, int, int]] = []
    next_id = 0

    def alloc(nbytes: int) -> int:
        nonlocal next_id
        next_id += 1
        events.append(("alloc", next_id, nbytes))
        return next_id

    for _ in range(steps):
        seq = rng.randint(64, 1024)
        live = []
        for _ in range(layers):
            act = 2 * batch * seq * hidden  # fp16 activations
            qkv = alloc(3 * act)
            scores = alloc(2 * batch * heads * seq * seq)
            attn = alloc(act)
            events.append(("free", scores, 0))
            mlp = alloc(4 * act)
            out = alloc(act)
            events.append(("free", mlp, 0))
            events.append(("free", qkv, 0))
            live += [attn, out]
        for i in reversed(live):  # backward frees the saved activations
            events.append(("free", i, 0))
    return events


def _whole_buffer_model(events: list[tuple[str, int, int]]) -> tuple[int, int]:
    """Peak reserved and peak allocated of a cache that reuses whole freed buffers (the
    smallest cached one that fits) and never splits or merges them."""
    cached: list[int] = []
    held: dict[int, int] = {}
    reserved = allocated = peak_res = peak_alloc = 0
    for kind, ident, nbytes in events:
        if kind == "alloc":
            size = (
                -(-nbytes // 512) * 512
                if nbytes < 10 * MiB
                else -(-nbytes // (2 * MiB)) * (2 * MiB)
            )
            fit = [c for c in cached if c >= size]
            if fit:
                size = min(fit)
                cached.remove(size)
            else:
                reserved += size
            held[ident] = size
            allocated += size
            peak_res, peak_alloc = max(peak_res, reserved), max(peak_alloc, allocated)
        else:
            size = held.pop(ident)
            allocated -= size
            cached.append(size)
    return peak_res, peak_alloc


def _trace_rows(quick: bool) -> list[Row]:
    progress(f"[{AREA}] mixed-size trace")
    events = _trace(seed=1, steps=10 if quick else 40)
    mpsrt.synchronize()
    mpsrt.empty_cache()
    base_res, base_alloc = mpsrt.memory_reserved(), mpsrt.memory_allocated()
    peak_res = peak_alloc = 0
    live = {}
    for kind, ident, nbytes in events:
        if kind == "alloc":
            live[ident] = mpsrt.empty(nbytes)
            peak_res = max(peak_res, mpsrt.memory_reserved() - base_res)
            peak_alloc = max(peak_alloc, mpsrt.memory_allocated() - base_alloc)
        else:
            del live[ident]
    ours = peak_res / peak_alloc
    res, alloc = _whole_buffer_model(events)
    theirs = res / alloc
    mpsrt.empty_cache()
    note = f"peak allocated {peak_alloc / MiB:.0f} MiB"
    return [
        Row(
            AREA,
            "mixed-size trace: peak reserved / peak allocated",
            ours,
            "x",
            "whole-buffer cache",
            theirs,
            goal="<= 1.3",
            goal_met=ours <= 1.3,
            note=note,
        )
    ]


def run(quick: bool, backend: str = "cpu", peers: Peers | None = None) -> list[Row]:
    peers = peers or current(backend)
    rows = _python_rows(quick) if peers.cpu_peers else []
    rows += _cpp_rows(quick, peers.cpu_peers) + _fault_rows(peers.cpu_peers) + _trace_rows(quick)
    cpu_goals(rows, backend)  # the goals above were set for the cpu backend
    if peers.device_style:
        rows[0:0] = _device_python_rows(quick, peers)
    return rows
