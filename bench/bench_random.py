"""Random fills (Philox4x32-10) beside numpy, PyTorch and MLX (CPU) when installed.

Runs that need other settings (one or two kernel threads, AVX2 forced) use their own process,
since options are read once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from .timing import Row, measure, progress

AREA = "random"
MB = 1_000_000


def fill_gbs(kind: str, dtype: str, nbytes: int, repeats: int) -> float:
    """GB/s of one random fill of nbytes, filled in place and waited for (in this process)."""
    import mpsrt

    itemsize = np.dtype("uint16" if dtype == "bfloat16" else dtype).itemsize
    b = mpsrt.empty(nbytes // itemsize, dtype)
    g = mpsrt.Generator().manual_seed(1)
    fill = {
        "uniform": lambda: b.uniform_(generator=g),
        "normal": lambda: b.normal_(generator=g),
        "int": lambda: b.random_(0, 1000, generator=g),
        "bernoulli": lambda: b.bernoulli_(0.3, generator=g),
        "bits": lambda: mpsrt._C._random_fill(b, "bits", 0, 1, 0, 1, 0.5, g),
    }[kind]

    def run() -> None:
        fill()
        mpsrt.synchronize()

    st = measure(run, warmup=2, repeats=repeats)
    return nbytes / st.median / 1e9


def _in_process(kind: str, dtype: str, nbytes: int, repeats: int, **env: str) -> float:
    e = dict(os.environ)
    e.update(env)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench._worker",
            "random_gbs",
            kind,
            dtype,
            str(nbytes),
            str(repeats),
        ],
        env=e,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return float(json.loads(out.stdout)["gbs"])


def _peer_gbs(fn, nbytes: int, repeats: int) -> float:
    st = measure(fn, warmup=1, repeats=repeats)
    return nbytes / st.median / 1e9


def run(quick: bool) -> list[Row]:
    nbytes = 16 * MB if quick else 64 * MB
    reps = 3 if quick else 7
    rows: list[Row] = []
    progress(f"[{AREA}] float32 uniform, {nbytes // MB} MB")
    one = _in_process("uniform", "float32", nbytes, reps, MPSRT_CPU_THREADS="1")
    one_avx2 = _in_process(
        "uniform", "float32", nbytes, reps, MPSRT_CPU_THREADS="1", MPSRT_CPU_ISA="avx2"
    )
    two = _in_process("uniform", "float32", nbytes, reps, MPSRT_CPU_THREADS="2")
    bits = _in_process("bits", "uint32", nbytes, reps, MPSRT_CPU_THREADS="1")

    out = np.empty(nbytes // 4, np.float32)
    rng = np.random.default_rng(1)
    np_gbs = _peer_gbs(lambda: rng.random(out=out, dtype=np.float32), nbytes, reps)
    case = f"float32 uniform {nbytes // MB} MB, 1 thread"
    rows.append(
        Row(
            AREA,
            case,
            one,
            "GB/s",
            "numpy default_rng",
            np_gbs,
            goal=">= 3.5x numpy (AVX-512)",
            goal_met=one >= 3.5 * np_gbs,
        )
    )
    rows.append(
        Row(
            AREA,
            case + ", AVX2 forced",
            one_avx2,
            "GB/s",
            "numpy default_rng",
            np_gbs,
            goal=">= 2.3x numpy",
            goal_met=one_avx2 >= 2.3 * np_gbs,
        )
    )
    try:
        import torch

        t = torch.empty(nbytes // 4, dtype=torch.float32)
        torch_gbs = _peer_gbs(lambda: t.uniform_(), nbytes, reps)
        rows.append(
            Row(
                AREA,
                case,
                one,
                "GB/s",
                "torch uniform_",
                torch_gbs,
                goal=">= 5x torch",
                goal_met=one >= 5 * torch_gbs,
            )
        )
    except ImportError:
        pass
    try:
        import mlx.core as mx

        def mlx_fill() -> None:
            mx.eval(mx.random.uniform(shape=(nbytes // 4,), dtype=mx.float32))

        rows.append(Row(AREA, case, one, "GB/s", "mlx uniform", _peer_gbs(mlx_fill, nbytes, reps)))
    except ImportError:
        pass
    rows.append(
        Row(
            AREA,
            f"float32 uniform {nbytes // MB} MB, 2 threads",
            two,
            "GB/s",
            "1 thread",
            one,
            goal=">= 1.7x 1 thread",
            goal_met=two >= 1.7 * one,
            note="see streams: this VM runs two threads at about one core's speed",
        )
    )
    rows.append(
        Row(
            AREA,
            f"raw uint32 {nbytes // MB} MB, 1 thread",
            bits,
            "GB/s",
            goal=">= 7 GB/s (AVX-512)",
            goal_met=bits >= 7,
        )
    )

    if not quick:
        progress(f"[{AREA}] other distributions")
        n = nbytes
        o32, o64 = np.empty(n // 4, np.float32), np.empty(n // 8)
        peers = {
            ("normal", "float32"): (
                "numpy standard_normal",
                lambda: rng.standard_normal(out=o32, dtype=np.float32),
            ),
            ("normal", "float64"): ("numpy standard_normal", lambda: rng.standard_normal(out=o64)),
            ("uniform", "float64"): ("numpy random", lambda: rng.random(out=o64)),
            ("int", "int64"): ("numpy integers", lambda: rng.integers(0, 1000, n // 8)),
            ("bernoulli", "float32"): (
                "numpy random < p",
                lambda: rng.random(n // 4, dtype=np.float32) < 0.3,
            ),
            ("uniform", "float16"): ("", None),
            ("uniform", "bfloat16"): ("", None),
        }
        for (kind, dtype), (peer, fn) in peers.items():
            ours = _in_process(kind, dtype, n, reps, MPSRT_CPU_THREADS="1")
            theirs = _peer_gbs(fn, n, reps) if fn is not None else None
            rows.append(
                Row(AREA, f"{kind} {dtype} {n // MB} MB, 1 thread", ours, "GB/s", peer, theirs)
            )
    return rows
