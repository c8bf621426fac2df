"""The PyTorch device's batch norm, instance norm, group norm and RMS norm on mpsrt's kernels
(csrc/torch/ops/batch_norm.cpp; csrc/kernels/norm/batch_norm.comp) against torch's CPU
results: outputs, saved statistics, running statistics after a step and gradients through
autograd, for 1d / 2d / 3d inputs, channels-last, eval and train, with and without affine
parameters, float32 / float16 / bfloat16 (and half inputs with float32 parameters), in the run's
memory model (CI runs the suite again in discrete memory; a module's training step here runs in
both); each asserting that no op ran through the fallback."""

from __future__ import annotations

import pytest
from kernel_check import check, torch

# Where the device runs kernels (conftest.kernels_only says why not elsewhere).
pytestmark = pytest.mark.usefixtures("kernels_only")

F = torch.nn.functional

REDUCED = (torch.float16, torch.bfloat16)


@pytest.fixture(params=["as_run", "discrete"])
def both_memories(request: pytest.FixtureRequest, runtime_env, device_kernels: bool):
    """The run's memory model, or MPSRT_VULKAN_MEMORY=discrete (vulkan's discrete model)."""
    if request.param == "as_run":
        yield request.param
        return
    with runtime_env(MPSRT_VULKAN_MEMORY="discrete"):
        torch.mpsrt._set_kernels("device")
        yield request.param


def grads(out: torch.Tensor, inputs: list[torch.Tensor], seed: int = 1) -> list:
    """The gradients of sum(out * a fixed random tensor) w.r.t. inputs (None where unused)."""
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out)
    return list(torch.autograd.grad(out, inputs, g, allow_unused=True))


def leaf(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().requires_grad_()


def batch_norm_step(x, w, b, rm, rv, training: bool, momentum: float = 0.1, eps: float = 1e-5):
    """F.batch_norm's output, running statistics after it (updated on copies: check() runs
    the CPU first) and gradients of x, w, b."""
    x, w, b = leaf(x), leaf(w), leaf(b)
    rm, rv = (None if t is None else t.clone() for t in (rm, rv))
    out = F.batch_norm(x, rm, rv, w, b, training=training, momentum=momentum, eps=eps)
    ins = [t for t in (x, w, b) if t is not None]
    return [out, *grads(out, ins), *(t for t in (rm, rv) if t is not None)]


def tolerance(dtype: torch.dtype, atol: float = 1e-5) -> dict:
    """float32: statistics over up to a few hundred elements summed in another order than the
    CPU's; bfloat16: the input's gradient (dy - mean(dy) - ...) cancels, and the CPU's rounds
    its bfloat16 operands differently (one element in a few hundred off by ~0.05)."""
    return {
        torch.float32: {"atol": atol, "rtol": 1e-4},
        torch.bfloat16: {"atol": 6e-2, "rtol": 1.6e-2},
    }.get(dtype, {})


SHAPES = {
    "1d": (6, 3),
    "1d_len": (4, 3, 7),
    "2d": (3, 4, 5, 6),
    "3d": (2, 3, 3, 4, 5),
}


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("dtype", [torch.float32, *REDUCED])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm(device_kernels, shape, dtype, affine, training) -> None:
    c = shape[1]
    x = (torch.randn(shape) * 2 + 0.5).to(dtype)
    w = torch.rand(c).to(dtype) + 0.5 if affine else None
    b = torch.randn(c).to(dtype) if affine else None
    rm, rv = torch.randn(c).to(dtype), (torch.rand(c) + 0.5).to(dtype)
    check(batch_norm_step, x, w, b, rm, rv, training, kernels=device_kernels, **tolerance(dtype))


@pytest.mark.parametrize("shape", [(3, 4, 5, 6), (2, 3, 3, 4, 5)], ids=["2d", "3d"])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_channels_last(device_kernels, shape, training) -> None:
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    x = torch.randn(shape).contiguous(memory_format=fmt)
    c = shape[1]
    w, b = torch.rand(c) + 0.5, torch.randn(c)
    rm, rv = torch.randn(c), torch.rand(c) + 0.5

    def step(*a):
        r = batch_norm_step(*a, training)
        assert r[0].is_contiguous(memory_format=fmt)  # the output keeps the input's layout
        return r

    check(step, x, w, b, rm, rv, kernels=device_kernels, **tolerance(torch.float32))
    # a strided (sliced) input: the output contiguous
    check(
        lambda *a: batch_norm_step(*a, training),
        x[:, :, 1:],
        w,
        b,
        rm,
        rv,
        kernels=device_kernels,
        **tolerance(torch.float32),
    )


@pytest.mark.parametrize("dtype", REDUCED)
def test_batch_norm_mixed(device_kernels, dtype) -> None:
    """A half input with float32 parameters and running statistics: float32 saved statistics."""
    x = torch.randn(4, 3, 5).to(dtype)
    w, b = torch.rand(3) + 0.5, torch.randn(3)
    rm, rv = torch.zeros(3), torch.ones(3)
    for training in (True, False):
        check(batch_norm_step, x, w, b, rm, rv, training, kernels=device_kernels)
    got = check(
        lambda x, w, b, rm, rv: torch.native_batch_norm(
            x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5
        ),
        x,
        w,
        b,
        rm,
        rv,
        kernels=device_kernels,
    )
    assert got[1].dtype == torch.float32 and got[2].dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_native_batch_norm_saved_stats(device_kernels, dtype) -> None:
    """native_batch_norm's save_mean / save_invstd and in-place running statistics, and its
    backward with each output_mask, train and eval."""
    x = (torch.randn(5, 4, 9) * 3 - 1).to(dtype)
    w, b = torch.rand(4).to(dtype) + 0.5, torch.randn(4).to(dtype)
    rm, rv = torch.randn(4).to(dtype), (torch.rand(4) + 0.5).to(dtype)

    def fwd(x, w, b, rm, rv):
        rm, rv = rm.clone(), rv.clone()
        out, mean, invstd = torch.native_batch_norm(x, w, b, rm, rv, True, 0.3, 1e-3)
        return out, mean, invstd, rm, rv

    check(fwd, x, w, b, rm, rv, kernels=device_kernels, **tolerance(dtype))
    dy = torch.randn(x.shape).to(dtype)
    for train in (True, False):
        for mask in ([True, True, True], [True, False, False], [False, True, True]):

            def bwd(dy, x, w, rm, rv, train=train, mask=mask):
                _, sm, si = torch.native_batch_norm(
                    x, w, None, rm.clone(), rv.clone(), True, 0.1, 1e-5
                )
                return torch.ops.aten.native_batch_norm_backward(
                    dy, x, w, rm, rv, sm, si, train, 1e-5, mask
                )

            check(bwd, dy, x, w, rm, rv, kernels=device_kernels, **tolerance(dtype))


def test_batch_norm_module_training_step(both_memories, device_kernels) -> None:
    """nn.BatchNorm2d in training: the running statistics and num_batches_tracked after two
    steps (num_batches_tracked's add_ runs on the device too), then eval."""

    def run(x):
        bn = torch.nn.BatchNorm2d(3).to(x.device)
        with torch.no_grad():
            bn.weight.copy_(torch.tensor([0.5, 1.0, 2.0]))
        for _ in range(2):
            out = bn(x)
            (out * out).sum().backward()
        bn.eval()
        return [
            out,
            bn(x + 1),
            bn.running_mean,
            bn.running_var,
            bn.num_batches_tracked,
            bn.weight.grad,
            bn.bias.grad,
        ]

    check(run, torch.randn(4, 3, 5, 5), kernels=device_kernels, **tolerance(torch.float32))


@pytest.mark.parametrize("running", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_instance_norm(device_kernels, running, dtype) -> None:
    def run(x, w, b, rm, rv):
        x, w, b = leaf(x), leaf(w), leaf(b)
        rm, rv = rm.clone(), rv.clone()
        out = F.instance_norm(
            x,
            rm if running else None,
            rv if running else None,
            w,
            b,
            use_input_stats=True,
            momentum=0.2,
        )
        return [out, *grads(out, [x, w, b]), rm, rv]

    x = torch.randn(2, 3, 4, 5).to(dtype)
    w, b = (torch.rand(3) + 0.5).to(dtype), torch.randn(3).to(dtype)
    check(
        run,
        x,
        w,
        b,
        torch.zeros(3).to(dtype),
        torch.ones(3).to(dtype),
        kernels=device_kernels,
        **tolerance(dtype),
    )


@pytest.mark.parametrize("groups", [1, 2, 6])
@pytest.mark.parametrize("dtype", [torch.float32, *REDUCED])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(3, 6, 4, 5), (2, 6, 7), (4, 6)], ids=["2d", "1d", "0d"])
def test_group_norm(device_kernels, groups, dtype, affine, shape) -> None:
    def run(x, w, b):
        x, w, b = leaf(x), leaf(w), leaf(b)
        out = F.group_norm(x, groups, w, b, eps=1e-4)
        return [out, *grads(out, [t for t in (x, w, b) if t is not None])]

    x = (torch.randn(shape) * 2 + 1).to(dtype)
    w = (torch.rand(6) + 0.5).to(dtype) if affine else None
    b = torch.randn(6).to(dtype) if affine else None
    # a group of one element has rstd = 1 / sqrt(eps) = 100, which scales the rounding errors
    check(run, x, w, b, kernels=device_kernels, **tolerance(dtype, atol=1e-4))


def test_group_norm_native(device_kernels) -> None:
    """native_group_norm's mean and rstd, and its backward with each output_mask."""
    x, w, b = torch.randn(2, 6, 10), torch.rand(6) + 0.5, torch.randn(6)
    check(
        lambda *a: torch.native_group_norm(*a, 2, 6, 10, 3, 1e-5),
        x,
        w,
        b,
        kernels=device_kernels,
        **tolerance(torch.float32),
    )
    dy = torch.randn(2, 6, 10)
    for mask in ([True, True, True], [True, False, False], [False, True, False]):

        def bwd(dy, x, w, mask=mask):
            _, mean, rstd = torch.native_group_norm(x, w, None, 2, 6, 10, 3, 1e-5)
            return torch.ops.aten.native_group_norm_backward(
                dy, x, mean, rstd, w, 2, 6, 10, 3, mask
            )

        check(bwd, dy, x, w, kernels=device_kernels, **tolerance(torch.float32))


def test_many_chunks(device_kernels) -> None:
    """Channels of 80000 elements (5 chunks whose partials the merges combine), training and
    its backward, batch norm and group norm."""
    x = torch.randn(8, 2, 100, 100) * 3 + 2
    w, b = torch.rand(2) + 0.5, torch.randn(2)
    check(
        batch_norm_step,
        x,
        w,
        b,
        torch.zeros(2),
        torch.ones(2),
        True,
        kernels=device_kernels,
        atol=1e-4,
        rtol=1e-4,
    )

    def group(x, w, b):
        x, w, b = leaf(x), leaf(w), leaf(b)
        out = F.group_norm(x, 1, w, b)
        return [out, *grads(out, [x, w, b])]

    check(
        group,
        x[:2].reshape(1, 4, 100, 100),
        torch.rand(4) + 0.5,
        torch.randn(4),
        kernels=device_kernels,
        atol=1e-4,
        rtol=1e-4,
    )


def test_many_channels(device_kernels) -> None:
    """More than 65535 channels (batch norm) and (sample, group) rows (group norm): the
    per-chunk ops' workgroups span two grid dims."""
    # three samples a channel: some channels' variance is small and their invstd large, which
    # scales the rounding errors of the sums (taken in another order than the CPU's)
    x = torch.randn(3, 70000)
    w, b = torch.rand(70000) + 0.5, torch.randn(70000)
    check(
        batch_norm_step,
        x,
        w,
        b,
        torch.zeros(70000),
        torch.ones(70000),
        True,
        kernels=device_kernels,
        atol=5e-4,
        rtol=1e-3,
    )

    def group(x):
        x = leaf(x)
        out = F.group_norm(x, 32)
        return [out, *grads(out, [x])]

    x = torch.randn(2100, 64, 4) * 2  # 67200 rows of 8 elements
    check(group, x, kernels=device_kernels, **tolerance(torch.float32, atol=1e-4))


def test_legit_forms(device_kernels) -> None:
    """_native_batch_norm_legit (with running statistics and .no_stats) and
    _native_batch_norm_legit_no_training, as export and compile reach them."""
    x, w, b = torch.randn(4, 3, 6), torch.rand(3) + 0.5, torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    aten = torch.ops.aten

    def legit(x, w, b, rm, rv):
        rm, rv = rm.clone(), rv.clone()
        return [*aten._native_batch_norm_legit(x, w, b, rm, rv, True, 0.1, 1e-5), rm, rv]

    check(legit, x, w, b, rm, rv, kernels=device_kernels, **tolerance(torch.float32))
    check(
        lambda x, w: aten._native_batch_norm_legit.no_stats(x, w, None, True, 0.1, 1e-5),
        x,
        w,
        kernels=device_kernels,
        **tolerance(torch.float32),
    )
    check(
        lambda *a: aten._native_batch_norm_legit_no_training(*a, 0.1, 1e-5),
        x,
        w,
        b,
        rm,
        rv,
        kernels=device_kernels,
        **tolerance(torch.float32),
    )


def test_reserve_forms(device_kernels) -> None:
    """_batch_norm_with_update, _batch_norm_no_update (with an empty reserve) and
    batch_norm_backward, as torch.export's graphs call them."""
    x, w, b = torch.randn(4, 3, 6), torch.rand(3) + 0.5, torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    aten = torch.ops.aten

    def update(x, w, b, rm, rv):
        rm, rv = rm.clone(), rv.clone()
        return [*aten._batch_norm_with_update(x, w, b, rm, rv, 0.1, 1e-5), rm, rv]

    check(update, x, w, b, rm, rv, kernels=device_kernels, **tolerance(torch.float32))
    check(
        lambda *a: aten._batch_norm_no_update(*a, 0.1, 1e-5)[0],
        x,
        w,
        b,
        rm,
        rv,
        kernels=device_kernels,
        **tolerance(torch.float32),
    )
    dy = torch.randn(4, 3, 6)

    def backward(dy, x, w, rm, rv):
        _, sm, si, reserve = aten._batch_norm_with_update(
            x, w, None, rm.clone(), rv.clone(), 0.1, 1e-5
        )
        mask = [True, True, True]
        return aten.batch_norm_backward(dy, x, w, rm, rv, sm, si, True, 1e-5, mask, reserve)

    check(backward, dy, x, w, rm, rv, kernels=device_kernels, **tolerance(torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, *REDUCED])
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm(device_kernels, dtype, affine) -> None:
    """F.rms_norm and nn.RMSNorm: composite in torch on this device (no fused op reaches it):
    forward and backward run on the device's elementwise and reduction kernels."""

    def run(x, w):
        x, w = leaf(x), leaf(w)
        out = F.rms_norm(x, (4, 5), w, eps=1e-6)
        return [out, *grads(out, [t for t in (x, w) if t is not None])]

    x = torch.randn(3, 2, 4, 5).to(dtype)
    w = (torch.rand(4, 5) + 0.5).to(dtype) if affine else None
    check(run, x, w, kernels=device_kernels, **tolerance(dtype))

    def module(x):
        m = torch.nn.RMSNorm(5, device=x.device, dtype=x.dtype)
        out = m(x)
        (out * out).sum().backward()
        return [out, m.weight.grad]

    check(module, x, kernels=device_kernels, **tolerance(dtype))


def test_declines_to_the_fallback(device_kernels) -> None:
    """What the kernels do not take (float64) runs through the fallback, with torch's results."""
    x = torch.randn(4, 3, 5, dtype=torch.float64)
    for training in (True, False):
        check(
            batch_norm_step,
            x,
            None,
            None,
            torch.zeros(3, dtype=torch.float64),
            torch.ones(3, dtype=torch.float64),
            training,
            kernels=device_kernels,
            fallbacks=("aten::native_batch_norm", "aten::native_batch_norm_backward"),
        )
    check(
        lambda x: F.group_norm(x, 3),
        x,
        kernels=device_kernels,
        fallbacks=("aten::native_group_norm",),
    )


def _profiled(fn):
    """fn()'s result and the names of the aten ops it dispatched (torch's profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = fn()
    return out, [e.name for e in prof.events()]


@pytest.mark.parametrize("how", ["no_grad", "nothing_requires_grad", "inference_mode"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_without_autograd_batch_norm_runs_the_kernels_itself(
    device_kernels: bool, how: str, training: bool
) -> None:
    # Where autograd has nothing to do, aten::batch_norm's own entry runs the kernels (torch's
    # composition, native_batch_norm included, is not dispatched): the output and the running
    # statistics equal torch CPU's, and the running statistics' versions stay as torch CPU's do.
    g = torch.Generator().manual_seed(3)
    x, w, b = (torch.randn(s, generator=g) for s in ((4, 3, 5, 5), (3,), (3,)))
    rm, rv = torch.randn(3, generator=g), torch.rand(3, generator=g) + 0.5
    if how == "no_grad":
        w.requires_grad_()
    results = {}
    for dev in ("cpu", "mpsrt"):
        xs, ws, bs = (t.detach().to(dev).requires_grad_(t.requires_grad) for t in (x, w, b))
        rms, rvs = rm.clone().to(dev), rv.clone().to(dev)
        versions = rms._version, rvs._version
        ctx = torch.inference_mode() if how == "inference_mode" else torch.no_grad()
        with ctx, torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
            out = F.batch_norm(xs, rms, rvs, ws, bs, training=training)
        names = [e.name for e in p.events()]
        bumped = (rms._version - versions[0], rvs._version - versions[1])
        results[dev] = (out.cpu(), rms.cpu(), rvs.cpu(), bumped if how != "inference_mode" else 0)
        if dev == "mpsrt":
            assert "aten::batch_norm" in names and "aten::native_batch_norm" not in names, names
    for got, want in zip(results["mpsrt"], results["cpu"]):
        if isinstance(want, torch.Tensor):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
        else:
            assert got == want


def test_with_autograd_or_a_dispatch_mode_batch_norm_is_torchs_composition(
    device_kernels: bool,
) -> None:
    # A gradient wanted, or a TorchDispatchMode watching: torch's composition runs (the mode
    # sees native_batch_norm), on the kernels, equal to the CPU.
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    x = torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(4))
    xd = x.to("mpsrt").requires_grad_()
    _, names = _profiled(lambda: F.batch_norm(xd, None, None, training=True))
    assert "aten::native_batch_norm" in names
    with Seen() as seen:
        out = F.batch_norm(x.to("mpsrt"), None, None, training=True)
    assert any("native_batch_norm" in op for op in seen.ops), seen.ops
    torch.testing.assert_close(out.cpu(), F.batch_norm(x, None, None, training=True))


def test_one_chunk_and_many_chunks_agree(device_kernels: bool) -> None:
    # A channel of one chunk takes the one-launch statistics (STATS_MERGE), a bigger one the
    # partials and their merge: both equal torch CPU's, running statistics included.
    for count in (4 * 9, 3 * 256 * 256):
        x = torch.randn(3, 2, count // 3, generator=torch.Generator().manual_seed(count)) * 3 + 1
        rm, rv = torch.zeros(2), torch.ones(2)

        def step(x: torch.Tensor, rm: torch.Tensor, rv: torch.Tensor) -> list[torch.Tensor]:
            rm, rv = rm.clone(), rv.clone()
            return [F.batch_norm(x, rm, rv, training=True), rm, rv]

        check(step, x, rm, rv, kernels=device_kernels, atol=1e-4, rtol=1e-4)
