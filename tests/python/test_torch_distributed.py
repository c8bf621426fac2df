"""torch.distributed on the PyTorch device "mpsrt": the backend "mpsrt" (gloo on host aliases of
the device memory, on host copies on discrete memory), in two processes started with
torch.multiprocessing (spawn).

One run of two ranks per backend does everything (starting ranks costs seconds): DDP of a small
model on mpsrt next to the same DDP on CPU over a plain gloo group; DDP and FSDP2 (fully_shard)
of a small transformer-style block on mpsrt, in the default mode and on mpsrt's kernels, against
one CPU process trained on both ranks' batches; collectives called directly on mpsrt tensors; and
bad input. Each rank saves what it saw; test_two_ranks checks it. Skipped when torch,
torch.distributed or gloo is missing. Both memory models run all of it (CI runs the suite again
with MPSRT_VULKAN_MEMORY=discrete): there the collectives run on host copies (staged in and out)
and the ops without a kernel on staged copies too.
"""

from __future__ import annotations

import copy
import datetime
import gc
import time
import traceback
import weakref
from pathlib import Path
from typing import Any

import mpsrt
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch")
dist = pytest.importorskip("torch.distributed", reason="torch.distributed is not available")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("this torch has no torch.distributed with gloo", allow_module_level=True)
import mpsrt.torch  # noqa: E402  (after the importorskip)
import torch.multiprocessing as torch_mp  # noqa: E402

WORLD = 2
STEPS = 3
N = 1 << 12  # elements in the direct collectives' tensors
PATIENCE = 120.0  # seconds for the whole two-rank run

# ---------------------------------------------------------------------------------- the ranks


# DDP's options that change how it reduces (find_unused_parameters keeps a map of used
# parameters in pinned host memory, from the device's pinned allocator).
DDP_VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "find_unused_parameters": {"find_unused_parameters": True},
    "static_graph": {"static_graph": True},
}


def _ddp_section(rank: int, cpu_group: Any) -> dict[str, Any]:
    """DDP of Linear-ReLU-Linear on mpsrt (group "mpsrt") and on CPU (group "gloo"), STEPS SGD
    steps each, from the same start, for each of DDP_VARIANTS; rank 1 starts from other
    weights, which DDP's initial broadcast must overwrite with rank 0's."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(rank)
    base = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    variants: dict[str, Any] = {}
    for variant, options in DDP_VARIANTS.items():
        runs: dict[str, Any] = {}
        for device in ("mpsrt", "cpu"):
            model = copy.deepcopy(base).to(device)
            # Small buckets: several allreduces per backward, overlapping it.
            ddp = DDP(
                model,
                bucket_cap_mb=0.0005,
                process_group=None if device == "mpsrt" else cpu_group,
                **options,
            )
            opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
            grads = []
            for step in range(STEPS):
                g = torch.Generator().manual_seed(100 * step + rank)  # each rank its own data
                x, y = torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(ddp(x.to(device)), y.to(device))
                loss.backward()
                grads.append([p.grad.detach().cpu().clone() for p in model.parameters()])
                opt.step()
            runs[device] = {
                "grads": grads,
                "params": [p.detach().cpu().clone() for p in model.parameters()],
                "param_devices": sorted({p.device.type for p in model.parameters()}),
            }
            del ddp, opt, model
        variants[variant] = runs
    return variants


def _zoo_like_model() -> Any:
    """A small transformer-style MLP block (LayerNorm, GELU, a residual), the same weights on
    every rank (seed 0)."""
    torch.manual_seed(0)
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp, self.norm = nn.Linear(8, 32), nn.LayerNorm(32)
            self.mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
            self.out = nn.Linear(32, 4)

        def forward(self, x: Any) -> Any:
            h = self.inp(x)
            return self.out(h + self.mlp(self.norm(h)))

    return Block()


def _batch(step: int, rank: int) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(100 * step + rank)  # each rank its own data
    return torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)


def _train(model: Any, device: str, rank: int) -> None:
    """STEPS of SGD with momentum on the rank's batches (every rank's, where rank is None)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        ranks = range(WORLD) if rank is None else [rank]
        x, y = (torch.cat(t) for t in zip(*(_batch(step, r) for r in ranks)))
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        opt.zero_grad()


def _sharded_section(rank: int) -> dict[str, Any]:
    """The zoo-like model trained across the ranks by DDP and by FSDP2 (fully_shard: each rank
    holds a shard of every parameter; all-gathers before use, reduce-scatters the gradients),
    on mpsrt in the default mode and on mpsrt's kernels (where the device has them); and on
    one process on the CPU over both ranks' batches (what each must equal)."""
    single = _zoo_like_model()
    _train(single, "cpu", None)
    out: dict[str, Any] = {"single": [p.detach().clone() for p in single.parameters()]}
    for mode in ("auto", "device"):
        previous = torch.mpsrt._set_kernels(mode)
        try:
            if mode == "auto" or torch.mpsrt._kernels_enabled():
                out[mode] = _sharded_runs(rank)
        finally:
            torch.mpsrt._set_kernels(previous)
    return out


def _sharded_runs(rank: int) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    out: dict[str, Any] = {}
    model = _zoo_like_model().to("mpsrt")
    _train(DDP(model, bucket_cap_mb=0.0005), "mpsrt", rank)
    out["ddp"] = [p.detach().cpu() for p in model.parameters()]
    model = _zoo_like_model().to("mpsrt")
    mesh = init_device_mesh("mpsrt", (WORLD,))
    for layer in (model.inp, model.mlp, model.out):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    _train(model, "mpsrt", rank)
    out["fsdp_sharded"] = all(type(p).__name__ == "DTensor" for p in model.parameters())
    # full_tensor(): the functional all-gather (the group's coalesced all-gather, from C++)
    out["fsdp"] = [p.full_tensor().detach().cpu() for p in model.parameters()]
    return out


def _collectives_section(rank: int) -> dict[str, Any]:
    """Collectives called directly on mpsrt tensors; what each rank got, as CPU tensors."""
    out: dict[str, Any] = {}
    base = torch.arange(N)
    for dtype in (torch.float32, torch.int64):
        t = (base * (rank + 1)).to(dtype).to("mpsrt")
        ptr = t.data_ptr()
        allocations = mpsrt.memory_stats()["allocation.all.allocated"]
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        value = work.get_future().value()
        out[f"sum_{dtype}"] = t.cpu()
        out[f"in_place_{dtype}"] = t.data_ptr() == ptr
        # gloo worked on the device memory itself: mpsrt allocated nothing for it
        out[f"no_copy_{dtype}"] = mpsrt.memory_stats()["allocation.all.allocated"] == allocations
        out[f"future_value_{dtype}"] = [v.device.type for v in value] == ["mpsrt"] and (
            value[0].data_ptr() == ptr
        )
    # The caller drops its tensor while gloo works on it: the work keeps it alive.
    t = torch.full((N,), float(rank + 1), device="mpsrt")
    work, ref = dist.all_reduce(t, async_op=True), weakref.ref(t)
    del t
    gc.collect()
    out["kept_alive"] = ref() is not None
    work.wait()
    out["dropped"] = work.get_future().value()[0].cpu()
    t = torch.full((N,), float(rank + 1), device="mpsrt")
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    out["avg"] = t.cpu()
    t = (base * (1 - 2 * rank)).to(torch.float64).to("mpsrt")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out["max"] = t.cpu()
    # Stream order: a fill queued behind a slow host callback lands before gloo reads.
    t = torch.zeros(N, device="mpsrt")
    mpsrt.current_stream().add_callback(lambda: time.sleep(0.2))
    t.fill_(rank + 1)
    dist.all_reduce(t)
    out["after_queued_fill"] = t.cpu()

    b = (base + 1000 * rank).to(torch.float64).to("mpsrt")
    dist.broadcast(b, src=1)
    out["broadcast"] = b.cpu()
    gathered = [torch.empty(N, dtype=torch.int32, device="mpsrt") for _ in range(WORLD)]
    dist.all_gather(gathered, (base + 1000 * rank).to(torch.int32).to("mpsrt"))
    out["all_gather"] = [g.cpu() for g in gathered]
    gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    flat = torch.empty(WORLD * N, device="mpsrt")
    gather_single(flat, (base + 1000 * rank).float().to("mpsrt"))
    out["all_gather_single"] = flat.cpu()
    scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    part = torch.empty(N, device="mpsrt")
    scatter_single(part, torch.arange(WORLD * N).float().mul(rank + 1).to("mpsrt"))
    out["reduce_scatter"] = part.cpu()
    r = torch.full((N,), float(rank + 1), device="mpsrt")
    dist.reduce(r, dst=0, op=dist.ReduceOp.AVG)
    out["reduce_avg"] = r.cpu()
    mine = (base + 1000 * rank).float().to("mpsrt")
    into = [torch.empty(N, device="mpsrt") for _ in range(WORLD)] if rank == 0 else None
    dist.gather(mine, into, dst=0)
    out["gather"] = [t.cpu() for t in into] if into is not None else None
    piece = torch.empty(N, device="mpsrt")
    pieces = [(base + 1000 * i).float().to("mpsrt") for i in range(WORLD)] if rank == 0 else None
    dist.scatter(piece, pieces, src=0)
    out["scatter"] = piece.cpu()
    swapped = torch.empty(WORLD * 4, device="mpsrt")
    dist.all_to_all_single(swapped, (torch.arange(WORLD * 4) + 100 * rank).float().to("mpsrt"))
    out["all_to_all_single"] = swapped.cpu()
    p2p = (base + 7).float().to("mpsrt") if rank == 0 else torch.zeros(N, device="mpsrt")
    if rank == 0:
        dist.send(p2p, dst=1)
    else:
        dist.recv(p2p, src=0)
    out["send_recv"] = p2p.cpu()
    # Functional collectives (torch.compile, DTensor) find the group by its name.
    from torch.distributed import _functional_collectives as funcol

    reduced = funcol.all_reduce(
        torch.full((4,), float(rank + 1), device="mpsrt"), "sum", dist.group.WORLD
    )
    out["functional"] = reduced.cpu()
    # CPU tensors through the same group (what object collectives use), AVG included.
    c = torch.full((4,), float(rank + 1))
    dist.all_reduce(c, op=dist.ReduceOp.AVG)
    out["cpu_avg"] = c
    objects: list[Any] = [None] * WORLD
    dist.all_gather_object(objects, {"rank": rank})
    out["objects"] = objects
    dist.barrier()
    return out


def _error(fn: Any) -> str:
    try:
        fn()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


def _bad_input_section(rank: int, cpu_group: Any) -> dict[str, Any]:
    """Each call fails on both ranks before any communication, so the group stays usable."""
    dev = torch.ones(4, device="mpsrt")
    out = {
        "mixed_devices": _error(lambda: dist.all_gather([torch.empty(4)] * WORLD, dev)),
        "avg_of_integers": _error(
            lambda: dist.all_reduce(
                torch.ones(4, dtype=torch.int64, device="mpsrt"), op=dist.ReduceOp.AVG
            )
        ),
        "mpsrt_tensor_on_gloo_group": _error(lambda: dist.all_reduce(dev, group=cpu_group)),
    }
    dist.all_reduce(dev)  # still in step
    out["after"] = dev.cpu()
    return out


def _rank_main(rank: int, backend: str, init: str, out_dir: str) -> None:
    results: dict[str, Any] = {}
    assert mpsrt.backend() == backend, (mpsrt.backend(), backend)
    dist.init_process_group(
        "mpsrt",
        init_method=init,
        rank=rank,
        world_size=WORLD,
        timeout=datetime.timedelta(seconds=60),
    )
    results["group"] = (type(dist.group.WORLD).__name__, dist.get_backend())
    cpu_group = dist.new_group(backend="gloo")
    results["unified"] = mpsrt.get_device_properties().unified_memory
    sections = [
        ("ddp", lambda: _ddp_section(rank, cpu_group)),
        ("sharded", lambda: _sharded_section(rank)),
        ("collectives", lambda: _collectives_section(rank)),
        ("bad_input", lambda: _bad_input_section(rank, cpu_group)),
    ]
    for name, section in sections:
        try:
            results[name] = section()
        except Exception:
            results[name] = traceback.format_exc()
    dist.destroy_process_group()
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")


# ---------------------------------------------------------------------------------- the tests


def _spawn_ranks(backend: str, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Runs _rank_main in WORLD processes on `backend`; what each rank saved."""
    out_dir = tmp_path_factory.mktemp(f"ranks_{backend}")
    init = f"file://{out_dir / 'rendezvous'}"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MPSRT_BACKEND", backend)  # the ranks inherit it: their runtime's backend
        ctx = torch_mp.start_processes(
            _rank_main,
            args=(backend, init, str(out_dir)),
            nprocs=WORLD,
            join=False,
            start_method="spawn",
        )
    deadline = time.monotonic() + PATIENCE
    try:
        while not ctx.join(timeout=1.0):  # raises with a rank's traceback if one failed
            if time.monotonic() > deadline:
                raise TimeoutError(f"the ranks did not finish within {PATIENCE} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(WORLD)]


def _section(ranks: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    for r, res in enumerate(ranks):
        assert isinstance(res[name], dict), f"rank {r} failed in {name}:\n{res[name]}"
    return [res[name] for res in ranks]


def _check_ddp_matches_cpu(ranks: list[dict[str, Any]]) -> None:
    # Bit-equal, not close: both runs execute the same CPU kernels on the same values (mpsrt
    # runs aten's CPU kernels on its host-visible memory) and gloo sums the same bytes in the
    # same order in both groups, so any difference is a bug, not rounding.
    sections = _section(ranks, "ddp")
    for variant in DDP_VARIANTS:
        runs = [section[variant] for section in sections]
        for r, run in enumerate(runs):
            assert run["mpsrt"]["param_devices"] == ["mpsrt"]
            assert run["cpu"]["param_devices"] == ["cpu"]
            for step in range(STEPS):
                for i, (g_dev, g_cpu) in enumerate(
                    zip(run["mpsrt"]["grads"][step], run["cpu"]["grads"][step])
                ):
                    assert torch.equal(g_dev, g_cpu), f"{variant} rank {r} step {step} grad {i}"
            for i, (p_dev, p_cpu) in enumerate(zip(run["mpsrt"]["params"], run["cpu"]["params"])):
                assert torch.equal(p_dev, p_cpu), f"{variant} rank {r} param {i}: mpsrt != cpu"
        # DDP's point: every rank holds the same (averaged) gradients and weights, though each
        # saw its own data and rank 1 started from other weights.
        for a, b in zip(runs[0]["mpsrt"]["params"], runs[1]["mpsrt"]["params"]):
            assert torch.equal(a, b), variant
        for step in range(STEPS):
            for a, b in zip(runs[0]["mpsrt"]["grads"][step], runs[1]["mpsrt"]["grads"][step]):
                assert torch.equal(a, b), variant


def _check_sharded_matches_one_cpu_process(ranks: list[dict[str, Any]]) -> None:
    # Close, not equal: the single process averages the gradients over one batch of 32 rows,
    # the ranks over two of 16 and then across the group (another order of float32 sums).
    for r, out in enumerate(_section(ranks, "sharded")):
        modes = [m for m in ("auto", "device") if m in out]
        assert "auto" in modes and ("device" in modes or mpsrt.backend() == "cpu"), (
            f"rank {r} ran {modes}"
        )
        for mode in modes:
            runs = out[mode]
            assert runs["fsdp_sharded"], f"rank {r} ({mode}): FSDP2's parameters are not DTensors"
            for kind in ("ddp", "fsdp"):
                assert len(runs[kind]) == len(out["single"])
                for i, (got, want) in enumerate(zip(runs[kind], out["single"])):
                    where = f"{kind} ({mode}) rank {r} parameter {i}"
                    torch.testing.assert_close(
                        got, want, atol=1e-5, rtol=1e-5, msg=lambda m, w=where: f"{w}: {m}"
                    )


def _check_collectives(ranks: list[dict[str, Any]]) -> None:
    outs = _section(ranks, "collectives")
    base = torch.arange(N)
    for r, out in enumerate(outs):
        for dtype in (torch.float32, torch.int64):
            assert torch.equal(out[f"sum_{dtype}"], (base * 3).to(dtype)), (r, dtype)
            assert out[f"in_place_{dtype}"], (r, dtype)
            assert out[f"no_copy_{dtype}"], f"rank {r} {dtype}: mpsrt allocated during all_reduce"
            assert out[f"future_value_{dtype}"], f"rank {r}: the future's value is not the tensor"
        assert out["kept_alive"] and torch.equal(out["dropped"], torch.full((N,), 3.0))
        assert torch.equal(out["avg"], torch.full((N,), 1.5))
        assert torch.equal(out["max"], base.to(torch.float64))
        assert torch.equal(out["after_queued_fill"], torch.full((N,), 3.0)), "stream not synced"
        assert torch.equal(out["broadcast"], (base + 1000).to(torch.float64))
        for src in range(WORLD):
            assert torch.equal(out["all_gather"][src], (base + 1000 * src).to(torch.int32))
        assert torch.equal(out["all_gather_single"], torch.cat([base, base + 1000]).float())
        whole = torch.arange(WORLD * N).float() * 3
        assert torch.equal(out["reduce_scatter"], whole[r * N : (r + 1) * N])
        if r == 0:  # the destination (gloo leaves the other rank's tensor undefined)
            assert torch.equal(out["reduce_avg"], torch.full((N,), 1.5))
            for src in range(WORLD):
                assert torch.equal(out["gather"][src], (base + 1000 * src).float())
        assert torch.equal(out["scatter"], (base + 1000 * r).float())
        expect = torch.cat([torch.arange(4) + 4 * r + 100 * src for src in range(WORLD)])
        assert torch.equal(out["all_to_all_single"], expect.float())
        assert torch.equal(out["send_recv"], (base + 7).float())
        assert torch.equal(out["functional"], torch.full((4,), 3.0))
        assert torch.equal(out["cpu_avg"], torch.full((4,), 1.5))
        assert out["objects"] == [{"rank": 0}, {"rank": 1}]


def _check_bad_input(ranks: list[dict[str, Any]]) -> None:
    for out in _section(ranks, "bad_input"):
        msg = out["mixed_devices"]
        assert msg.startswith("ValueError: [distributed] allgather: the tensors"), msg
        assert "all on mpsrt or all on cpu" in msg, msg
        msg = out["avg_of_integers"]
        assert msg.startswith("ValueError: [distributed] allreduce: ReduceOp.AVG"), msg
        # A plain gloo group has no backend for mpsrt tensors: torch says so (see the README).
        msg = out["mpsrt_tensor_on_gloo_group"]
        assert msg.startswith("RuntimeError") and "mpsrt" in msg, msg
        assert torch.equal(out["after"], torch.full((4,), 2.0))  # the group is still usable


def test_two_ranks(backend: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """One test, so that the ranks start once per backend whatever the xdist distribution;
    it runs every check below and reports each one that fails (DDP's on unified memory)."""
    ranks = _spawn_ranks(backend, tmp_path_factory)
    for r, res in enumerate(ranks):
        assert res["group"] == ("ProcessGroupMpsrt", "mpsrt"), f"rank {r}: {res['group']}"
        assert res["unified"] == mpsrt.get_device_properties().unified_memory
    failures = []
    checks = (_check_ddp_matches_cpu, _check_sharded_matches_one_cpu_process, _check_collectives)
    for check in (*checks, _check_bad_input):
        try:
            check(ranks)
        except AssertionError as e:
            failures.append(f"{check.__name__}: {e}")
    assert not failures, "\n\n".join(failures)
