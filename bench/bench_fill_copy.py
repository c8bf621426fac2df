"""Fill and copy bandwidth of device memory, beside the device's peers.

Where the device's memory is host memory (cpu, lavapipe): raw heaps against memset/memcpy,
numpy and torch. Every CPU peer works on the same pages as mpsrt (numpy and torch through
zero-copy views of the heap), touched once before timing, so the ratios compare kernels, not
page faults or page placement.

On a GPU (a device peer such as torch.cuda, or memory that is not host memory): Buffers
beside the device peers' tensors, each sample a batch of back-to-back operations followed by
one synchronize of its own device (bench.peers.versus); no host view of device memory. There
the rows also carry the GPU goals: fill_ and copy at 1 GiB (smaller under --quick or when
memory is short), and host<->device copies of 256 MiB from and to pageable memory.

Copies count the bytes copied once (GB = 1e9 bytes).
"""

from __future__ import annotations

from typing import Callable

import mpsrt
import numpy as np
from mpsrt import _bench

from .peers import Goal, Peers, big_size, cpu_goals, current, goal_peer, gpu_goal, versus
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


def batch(peers: Peers, nbytes: int) -> int:
    """Operations per sample on a GPU: about 256 MiB of them (at most 256), so that the one
    synchronize per sample does not dominate the small sizes; 1 elsewhere."""
    return max(1, min(256, (256 * MiB) // nbytes)) if peers.gpu else 1


def device_timing(quick: bool) -> dict[str, float]:
    if quick:
        return {"rounds": 3, "warmup": 1, "repeats": 2, "min_time": 0.04}
    return {"rounds": 6, "warmup": 1, "repeats": 2, "min_time": 0.3}


def _device_at_size(quick: bool, peers: Peers, n: int) -> list[Row]:
    k, timing, size = batch(peers, n), device_timing(quick), _size_name(n)
    a, b = mpsrt.empty(n), mpsrt.empty(n)
    b32 = b.view(0, n // 4, "int32")
    a.fill_(0)
    b.fill_(1)
    progress(f"[{AREA}] {size}: fills and copy (device)")
    common = {"unit": "GB/s", "nbytes": n, "number": k, "timing": timing}
    rows = versus(peers, AREA, f"byte fill {size}", lambda: b.fill_(BYTE),
                  lambda p: p.fill(n, "uint8", BYTE), **common)  # fmt: skip
    rows += versus(peers, AREA, f"4-byte fill {size}", lambda: b32.fill_(PATTERN),
                   lambda p: p.fill(n, "int32", PATTERN), **common)  # fmt: skip
    rows += versus(peers, AREA, f"copy {size}", lambda: a.copy_(b), lambda p: p.copy(n), **common)
    return rows


def _device_big(quick: bool, peers: Peers) -> list[Row]:
    """fill_ float32 and copy at 1 GiB (the GPU goals)."""
    n, note = big_size(peers, quick, 1 << 30, copies=2)
    size, timing = _size_name(n), device_timing(quick)
    progress(f"[{AREA}] {size}: fill_ and copy (device)")
    common = {"unit": "GB/s", "nbytes": n, "number": batch(peers, n), "timing": timing}
    f, g = mpsrt.empty(n // 4, "float32"), mpsrt.empty(n // 4, "float32")
    f.fill_(0.0)
    rows = versus(peers, AREA, f"fill_ float32 {size}", lambda: f.fill_(1.0),
                  lambda p: p.fill(n, "float32", 1.0), goal=Goal(">= 0.95x {peer}", 0.95),
                  note=note, **common)  # fmt: skip
    peers.release()
    rows += versus(peers, AREA, f"copy {size}", lambda: g.copy_(f), lambda p: p.copy(n),
                   goal=Goal(">= 0.9x {peer}", 0.9), note=note, **common)  # fmt: skip
    return rows


def host_view_aliases() -> bool | None:
    """Whether Buffer.numpy() aliases device memory (True: no copy is made, e.g. memory the
    host maps across the bus), returns a host copy (False), or fails (None)."""
    b = mpsrt.empty(4096)
    try:
        b.fill_(0)
        view = b.numpy()
        b.fill_(1)  # seen by `view` only if it is the device memory itself
        mpsrt.synchronize()
        return int(view[0]) == 1
    except (RuntimeError, ValueError):
        return None


def _host_device(quick: bool, peers: Peers) -> list[Row]:
    """host->device from pageable numpy memory (Buffer.copy_ beside a torch.cuda tensor's
    copy_ from a CPU tensor) and device->host (Buffer.numpy() beside .cpu())."""
    n, note = big_size(peers, False, 256 * MiB, copies=1)
    size, timing = _size_name(n), device_timing(quick)
    progress(f"[{AREA}] host<->device {size}")
    host = np.ones(n, np.uint8)
    buf = mpsrt.empty(n)
    buf.fill_(0)
    case = f"host→device {size} (pageable numpy → Buffer.copy_)"
    h2d_note = "; ".join(x for x in (note, "peer: tensor.copy_(cpu_tensor)") if x)
    rows = versus(peers, AREA, case, lambda: buf.copy_(host), lambda p: p.host_to_device(host),
                  unit="GB/s", nbytes=n, goal=Goal(">= 1.0x {peer}", 1.0), timing=timing,
                  note=h2d_note)  # fmt: skip
    case = f"device→host {size} (Buffer.numpy())"
    aliases = host_view_aliases()
    if aliases is False:
        rows += versus(peers, AREA, case, buf.numpy, lambda p: p.device_to_host(n), unit="GB/s",
                       nbytes=n, goal=Goal(">= 1.0x {peer}", 1.0), timing=timing,
                       note="peer: tensor.cpu()")  # fmt: skip
    else:
        why = (
            "skipped: Buffer.numpy() aliases the device memory here (no copy to time)"
            if aliases
            else "skipped: Buffer.numpy() is not available on this device"
        )
        row = Row(AREA, case, None, "GB/s", note=why)
        gpu_goal(row, f">= 1.0x {goal_peer(peers)}", None, peers)
        rows.append(row)
    return rows


def run(quick: bool, backend: str = "cpu", peers: Peers | None = None) -> list[Row]:
    peers = peers or current(backend)
    rows: list[Row] = []
    if peers.cpu_peers:  # host memory: the CPU peers on the same pages
        sizes = [MiB, 64 * MiB] if quick else [MiB, 16 * MiB, 256 * MiB]
        for nbytes in sizes:
            rows += _at_size(quick, nbytes)
        if not quick:
            rows += _large_fill(quick)
        cpu_goals(rows, backend)
    if peers.device_style:  # a GPU: beside its own peers, no host view of device memory
        for nbytes in [MiB, 64 * MiB] if quick else [MiB, 16 * MiB, 256 * MiB]:
            rows += _device_at_size(quick, peers, nbytes)
        for part in (_device_big, _host_device):  # their Buffers are gone when they return
            rows += part(quick, peers)
            mpsrt.empty_cache()
            peers.release()
    return rows
