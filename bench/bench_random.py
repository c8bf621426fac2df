"""Random fills (Philox4x32-10) per distribution and dtype.

Where the device's memory is host memory (cpu, lavapipe): on one and two threads, beside numpy,
PyTorch and MLX (CPU) when installed. mpsrt's figures come from their own processes
(`python -m bench._worker random_gbs`), since the thread count and instruction set are options
read once per process: on cpu the kernel threads are MPSRT_CPU_THREADS, on vulkan over Mesa's
lavapipe they are LP_NUM_THREADS.

On a GPU: in this process, beside the device peers (torch.cuda's uniform_, normal_, random_;
CuPy; torch.mps, MLX), each sample a batch of fills followed by a synchronize of its own
device; the GPU goals (uniform, normal and 32-bit random bits at 64 MiB and 1 GiB, >= 0.9x
torch.cuda) are on those rows.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Callable, Optional

import numpy as np

from .peers import Goal, Peers, big_size, current, versus
from .timing import Row, measure, progress

AREA = "random"
MB = 1_000_000
MiB = 1 << 20

# (distribution, dtype); the quick run keeps the first five.
CASES = [
    ("uniform", "float32"),
    ("normal", "float32"),
    ("int", "int32"),
    ("bernoulli", "float32"),
    ("bits", "uint32"),
    ("uniform", "float16"),
    ("uniform", "bfloat16"),
    ("uniform", "float64"),
    ("normal", "float64"),
    ("int", "int64"),
    ("bernoulli", "bool"),
]


def fill_gbs(kind: str, dtype: str, nbytes: int, repeats: int) -> float:
    """GB/s of one random fill of nbytes, filled in place and waited for (in this process)."""
    import mpsrt

    fill = mpsrt_fill(kind, dtype, nbytes)

    def run() -> None:
        fill()
        mpsrt.synchronize()

    st = measure(run, warmup=2, repeats=repeats)
    return nbytes / st.median / 1e9


def mpsrt_fill(kind: str, dtype: str, nbytes: int) -> Callable[[], object]:
    """One random fill of a new Buffer of nbytes (queued, not waited for)."""
    import mpsrt

    itemsize = np.dtype("uint16" if dtype == "bfloat16" else dtype).itemsize
    b = mpsrt.empty(nbytes // itemsize, dtype)
    g = mpsrt.Generator().manual_seed(1)
    return {
        "uniform": lambda: b.uniform_(generator=g),
        "normal": lambda: b.normal_(generator=g),
        "int": lambda: b.random_(0, 1000, generator=g),
        "bernoulli": lambda: b.bernoulli_(0.3, generator=g),
        "bits": lambda: mpsrt._C._random_fill(b, "bits", 0, 1, 0, 1, 0.5, g),
    }[kind]


def thread_env(backend: str, threads: int) -> dict[str, str]:
    """The settings that give a backend's random kernels `threads` host threads."""
    if backend == "cpu":
        return {"MPSRT_CPU_THREADS": str(threads)}
    if backend == "vulkan":
        return {"LP_NUM_THREADS": str(threads)}  # lavapipe's threads; ignored by real GPUs
    return {}


def _in_process(kind: str, dtype: str, nbytes: int, repeats: int, **env: str) -> float:
    e = dict(os.environ)
    e.update(env)
    cmd = [sys.executable, "-m", "bench._worker", "random_gbs", kind, dtype, str(nbytes)]
    out = subprocess.run(
        [*cmd, str(repeats)], env=e, capture_output=True, text=True, timeout=300, check=True
    )
    return float(json.loads(out.stdout)["gbs"])


def _gbs(fn: Callable[[], object], nbytes: int, repeats: int) -> float:
    st = measure(fn, warmup=1, repeats=repeats)
    return nbytes / st.median / 1e9


Peer = Optional[Callable[[], object]]


def _numpy_peer(kind: str, dtype: str, n: int) -> tuple[str, Peer]:
    rng = np.random.default_rng(1)
    if dtype in ("float16", "bfloat16"):
        return "numpy", None  # no half-precision generators
    out = np.empty(n // np.dtype(dtype).itemsize, dtype)
    if kind == "uniform":
        return "numpy random", lambda: rng.random(out=out, dtype=out.dtype)
    if kind == "normal":
        return "numpy standard_normal", lambda: rng.standard_normal(out=out, dtype=out.dtype)
    if kind == "int":
        return "numpy integers", lambda: rng.integers(0, 1000, out.size, dtype=out.dtype)
    if kind == "bernoulli":
        return "numpy random < p", lambda: np.less(rng.random(out.size, np.float32), 0.3, out=out)
    return "numpy random_raw", lambda: rng.bit_generator.random_raw(n // 8)


def _torch_peer(kind: str, dtype: str, n: int) -> tuple[str, Peer]:
    try:
        import torch
    except ImportError:
        return "torch", None
    tdtype = getattr(torch, dtype if dtype != "uint32" else "int32")
    t = torch.empty(n // torch.empty(0, dtype=tdtype).element_size(), dtype=tdtype)
    if kind == "uniform":
        return "torch uniform_", t.uniform_
    if kind == "normal":
        return "torch normal_", t.normal_
    if kind == "int":
        return "torch random_", lambda: t.random_(0, 1000)
    if kind == "bernoulli":
        return "torch bernoulli_", lambda: t.bernoulli_(0.3)
    return "torch random_", t.random_


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to n for the block (the 1-thread rows compare 1 thread)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _mlx_peer(kind: str, dtype: str, n: int) -> tuple[str, Peer]:
    try:
        import mlx.core as mx
    except ImportError:
        return "mlx", None
    if dtype == "float64" or kind == "bits":
        return "mlx", None  # no float64 random numbers, no raw bits
    mdtype = getattr(mx, "bool_" if dtype == "bool" else dtype)
    shape = (n // np.dtype("uint16" if dtype == "bfloat16" else dtype).itemsize,)
    make = {
        "uniform": lambda: mx.random.uniform(shape=shape, dtype=mdtype),
        "normal": lambda: mx.random.normal(shape=shape, dtype=mdtype),
        "int": lambda: mx.random.randint(0, 1000, shape=shape, dtype=mdtype),
        "bernoulli": lambda: mx.random.bernoulli(0.3, shape=shape),
    }[kind]
    return f"mlx random.{kind if kind != 'int' else 'randint'}", lambda: mx.eval(make())


def _memset_gbs(nbytes: int, repeats: int) -> float:
    """C memset of nbytes of host-visible device memory (pages faulted in first), in GB/s."""
    import mpsrt
    from mpsrt import _bench

    heap = _bench.RawHeap(nbytes)
    heap.fill(0)
    mpsrt.synchronize()
    return _gbs(lambda: heap.c_memset(0x5A), nbytes, repeats)


def _bandwidth_rows(case: str, one: float, two: float, memset: float) -> list[Row]:
    """uniform float32 beside the memset bandwidth of the same size (the fill-bandwidth goals)."""
    note = "compute-bound where memset runs from the caches: Philox4x32-10 costs ~1 cycle/word"
    return [
        Row(AREA, f"{case}, 1 thread", one, "GB/s", "C memset", memset,
            goal=">= 0.8x C memset", goal_met=one >= 0.8 * memset, note=note),
        Row(AREA, f"{case}, 2 threads", two, "GB/s", "C memset", memset,
            goal=">= 0.9x C memset", goal_met=two >= 0.9 * memset),
    ]  # fmt: skip


GPU_GOAL_CASES = (("uniform", "float32"), ("normal", "float32"), ("bits", "uint32"))


def _device_rows(quick: bool, peers: Peers) -> list[Row]:
    """Every case at 64 MiB, and the goal cases at 1 GiB, beside the device peers."""
    import mpsrt

    from .bench_fill_copy import batch, device_timing

    big, note = big_size(peers, quick, 1 << 30, copies=1)
    sized = [(k, d, 64 * MiB, "") for k, d in (CASES[:5] if quick else CASES)]
    sized += [(k, d, big, note) for k, d in GPU_GOAL_CASES]
    rows: list[Row] = []
    for kind, dtype, n, why in sized:
        case = f"{kind} {dtype} {n >> 30} GiB" if n >= 1 << 30 else f"{kind} {dtype} {n >> 20} MiB"
        progress(f"[{AREA}] {case} (device)")
        goal = Goal(">= 0.9x {peer}", 0.9) if (kind, dtype) in GPU_GOAL_CASES else None
        fill = mpsrt_fill(kind, dtype, n)
        rows += versus(peers, AREA, case, fill, lambda p, k=kind, d=dtype, n=n: p.random(k, d, n),
                       unit="GB/s", nbytes=n, number=batch(peers, n), goal=goal, note=why,
                       timing=device_timing(quick))  # fmt: skip
        del fill
        if n > 64 * MiB:
            mpsrt.empty_cache()
            peers.release()
    return rows


def run(quick: bool, backend: str = "cpu", peers: Peers | None = None) -> list[Row]:
    peers = peers or current(backend)
    rows = _host_memory_rows(quick, backend) if peers.cpu_peers else []
    if peers.device_style:
        rows += _device_rows(quick, peers)
    return rows


def _peer_goal(row: Row, kind: str, dtype: str, backend: str, peer_of, theirs: float) -> None:
    """The goal of one thread's fill beside one peer, set on `row` (none for most rows)."""
    one = row.value
    primary = kind == "uniform" and dtype == "float32"
    if primary and backend == "cpu" and peer_of is _numpy_peer:
        row.goal, row.goal_met = ">= 3.5x numpy (AVX-512)", one >= 3.5 * theirs
    if primary and backend == "cpu" and peer_of is _torch_peer:
        row.goal, row.goal_met = ">= 5x torch", one >= 5 * theirs
    if kind == "normal" and backend == "cpu":  # the vectorised normal's goals
        ratio = {
            ("float32", "numpy"): 10,
            ("float32", "torch"): 5,
            ("float64", "numpy"): 5,
        }.get((dtype, row.peer_name.split()[0]))
        if ratio is not None:
            row.goal, row.goal_met = f">= {ratio}x {row.peer_name}", one >= ratio * theirs


def _peer_rows(case: str, kind: str, dtype: str, nbytes: int, reps: int, backend: str,
               one: float, two: float) -> list[Row]:  # fmt: skip
    """One thread's fill (and, for torch, two threads') beside each installed peer."""
    rows: list[Row] = []
    primary = kind == "uniform" and dtype == "float32"
    for peer_of in (_numpy_peer, _torch_peer, _mlx_peer):
        peer, fn = peer_of(kind, dtype, nbytes)
        if fn is None:
            continue
        if peer_of is _torch_peer:
            # torch with its default intra-op threads beside mpsrt's two; one beside one
            import torch

            default = f"{peer} ({torch.get_num_threads()} threads)"
            rows.append(Row(AREA, f"{case}, 2 threads", two, "GB/s", default,
                            _gbs(fn, nbytes, reps)))  # fmt: skip
            with _torch_threads(1):
                theirs = _gbs(fn, nbytes, reps)
            peer = f"{peer} (1 thread)"
        else:
            theirs = _gbs(fn, nbytes, reps)
        row = Row(AREA, f"{case}, 1 thread", one, "GB/s", peer, theirs)
        _peer_goal(row, kind, dtype, backend, peer_of, theirs)
        rows.append(row)
        if primary and backend == "cpu" and peer_of is _numpy_peer:
            avx2 = _in_process(
                kind, dtype, nbytes, reps, MPSRT_CPU_ISA="avx2", **thread_env(backend, 1)
            )
            rows.append(Row(AREA, f"{case}, 1 thread, AVX2 forced", avx2, "GB/s", peer, theirs,
                            goal=">= 2.3x numpy", goal_met=avx2 >= 2.3 * theirs))  # fmt: skip
    return rows


def _host_memory_rows(quick: bool, backend: str) -> list[Row]:
    nbytes = 16 * MB if quick else 64 * MB
    reps = 3 if quick else 7
    cases = CASES[:5] if quick else CASES
    rows: list[Row] = []
    # Two threads' ceiling on this machine now (as in the streams area): the scaling goals of
    # compute-bound fills hold only where the machine gives a second core.
    ceiling = 0.0
    if backend == "cpu":
        from mpsrt import _bench

        ceiling = float(np.median([_bench.thread_scaling() for _ in range(3)]))
    for kind, dtype in cases:
        case = f"{kind} {dtype} {nbytes // MB} MB"
        progress(f"[{AREA}] {case}")
        one = _in_process(kind, dtype, nbytes, reps, **thread_env(backend, 1))
        two = _in_process(kind, dtype, nbytes, reps, **thread_env(backend, 2))
        primary = kind == "uniform" and dtype == "float32"
        rows += _peer_rows(case, kind, dtype, nbytes, reps, backend, one, two)
        row = Row(AREA, f"{case}, 2 threads", two, "GB/s", "1 thread", one)
        if primary and backend == "cpu":
            row.goal, row.goal_met = ">= 1.7x 1 thread", two >= 1.7 * one
            row.note = f"two threads' ceiling on a compute loop here now: {ceiling:.2f}x"
            rows += _bandwidth_rows(case, one, two, _memset_gbs(nbytes, reps))
        if kind == "normal" and backend == "cpu":  # compute-bound: scales with the cores
            row.goal = ">= 1.8x 1 thread (when the ceiling is >= 1.9x)"
            row.goal_met = two >= 1.8 * one if ceiling >= 1.9 else None
            row.note = f"two threads' ceiling on a compute loop here now: {ceiling:.2f}x"
        if primary and backend == "vulkan":
            row.goal, row.goal_met = ">= 1.7 GB/s (lavapipe)", two >= 1.7
        if kind == "bits" and backend == "cpu":
            rows.append(Row(AREA, f"{case}, 1 thread", one, "GB/s",
                            goal=">= 7 GB/s (AVX-512)", goal_met=one >= 7))  # fmt: skip
        rows.append(row)
    return rows
