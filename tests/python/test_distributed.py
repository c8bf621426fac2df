"""torch.distributed (gloo) all_reduce on mpsrt buffers through DLPack, in two processes.

Each rank hands its Buffer to torch with torch.from_dlpack (zero-copy: same address) and
gloo reduces in place, so the result appears in the mpsrt buffer with no copy on mpsrt's side
(its cumulative allocation count and allocated bytes do not grow; current bytes are not
compared: gloo may release the previous tensor, and with it its buffer, at any time).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback

import mpsrt
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the DLPack peer)")
dist = pytest.importorskip("torch.distributed", reason="torch.distributed is not available")

N = 1 << 16
WORLD = 2


def _rank_main(rank: int, backend: str, init: str, results: mp.Queue) -> None:
    try:
        os.environ["MPSRT_BACKEND"] = backend
        import mpsrt as rt
        import torch as th
        import torch.distributed as td

        td.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
        out = {}
        for dtype, np_dtype in (("float32", np.float32), ("int64", np.int64)):
            buf = rt.empty(N, dtype=dtype)
            buf.copy_((np.arange(N) * (rank + 1)).astype(np_dtype))
            stats = rt.memory_stats()
            before = (stats["allocated_bytes.all.allocated"], stats["allocation.all.allocated"])
            t = th.from_dlpack(buf)
            assert t.data_ptr() == buf.data_ptr, "torch.from_dlpack copied the buffer"
            td.all_reduce(t, op=td.ReduceOp.SUM)
            # The reduction landed in the mpsrt buffer itself.
            got = buf.numpy()
            expected = (np.arange(N) * sum(r + 1 for r in range(WORLD))).astype(np_dtype)
            stats = rt.memory_stats()
            after = (stats["allocated_bytes.all.allocated"], stats["allocation.all.allocated"])
            out[dtype] = {
                "equal": bool(np.array_equal(got, expected)),
                "same_ptr": t.data_ptr() == buf.data_ptr,
                "no_alloc": before == after,
                "backend": rt.backend(),
            }
            del t, buf, got
        td.barrier()
        td.destroy_process_group()
        results.put((rank, out))
    except BaseException:
        results.put((rank, traceback.format_exc()))


@pytest.mark.usefixtures("unified_memory")  # zero-copy into torch needs host-visible memory
def test_gloo_all_reduce_through_dlpack(backend: str, tmp_path) -> None:
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed has no gloo here")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = [ctx.Process(target=_rank_main, args=(r, backend, init, results)) for r in range(WORLD)]
    for p in procs:
        p.start()
    got = {}
    try:
        for _ in range(WORLD):
            rank, out = results.get(timeout=120)
            got[rank] = out
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    for rank in range(WORLD):
        out = got[rank]
        assert isinstance(out, dict), f"rank {rank} failed:\n{out}"
        for dtype, r in out.items():
            assert r["backend"] == backend
            assert r["same_ptr"], f"rank {rank} {dtype}: the tensor is not the buffer's memory"
            assert r["equal"], f"rank {rank} {dtype}: wrong all_reduce result in the buffer"
            assert r["no_alloc"], f"rank {rank} {dtype}: mpsrt allocated during the reduction"
    assert all(p.exitcode == 0 for p in procs)
    assert mpsrt.backend() == backend  # this process's runtime was not touched
