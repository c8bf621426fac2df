"""The PyTorch device's reductions, softmax and layer norm on mpsrt's kernels
(csrc/torch/ops/reduce.cpp, csrc/torch/ops/norm.cpp; csrc/kernels/reduce/,
csrc/kernels/norm/), forward and backward, against torch's CPU
results: reduced dims anywhere (middle, several, all), keepdim both ways, strided inputs, rows
longer than a workgroup and than llvmpipe's loop limit, size-1 dims."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kernel_check import check, torch

# Every test runs with the device's kernels where it has them (the fixture); dk() says whether.
pytestmark = pytest.mark.usefixtures("device_kernels", "kernels_only")


def dk() -> bool:
    """Whether the device runs its kernels (else the ops run through the fallback)."""
    return torch.mpsrt._kernels_enabled()


FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def inputs(dtype: torch.dtype) -> list[torch.Tensor]:
    """Inputs of several layouts: contiguous, transposed, sliced, a size-1 dim, long rows."""
    torch.manual_seed(0)
    base = torch.randn(6, 5, 9).to(dtype)
    return [
        base,
        base.transpose(0, 2),  # strided
        base[:, ::2, 1:],  # sliced: gaps in every dim
        torch.randn(4, 1, 7).to(dtype),  # a size-1 dim
    ]


# (dims, keepdim) for the 3-D inputs: one dim, the middle, several, all (None and []).
DIMS = [
    ((1,), False),
    ((1,), True),
    ((0, 2), False),
    ((0, 2), True),
    ((-1,), False),
    (None, False),
    ((), True),
]


def reduce_fn(op: Callable, dims: tuple[int, ...] | None, keepdim: bool, **kw) -> Callable:
    return lambda x: op(x, dim=dims, keepdim=keepdim, **kw)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sum_mean(dtype: torch.dtype) -> None:
    for x in inputs(dtype):
        for dims, keepdim in DIMS:
            check(reduce_fn(torch.sum, dims, keepdim), x, kernels=dk(), atol=1e-5)
            if dims is not None:
                check(reduce_fn(torch.mean, dims, keepdim), x, kernels=dk())
        check(torch.sum, x, kernels=dk(), atol=1e-5)
        check(torch.mean, x, kernels=dk())
    check(lambda x: x.sum(1, dtype=torch.float32), inputs(dtype)[0], kernels=dk(), atol=1e-5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sum_long_rows_and_columns(dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    wide = torch.rand(3, 1000).to(dtype)  # rows longer than a workgroup
    check(
        lambda x: x.sum(-1),
        wide,
        kernels=dk(),
        rtol=1e-3 if dtype == torch.float16 else None,
    )
    check(lambda x: x.mean(-1, keepdim=True), wide, kernels=dk())
    tall = torch.randn(700, 300).to(dtype)  # column sums: an invocation per output
    check(lambda x: x.sum(0), tall, kernels=dk(), atol=1e-4)
    check(lambda x: x.t().sum(1), tall, kernels=dk(), atol=1e-4)
    if dtype == torch.float32:
        huge = torch.rand(2, 70000)  # more than 65535 elements per row
        check(lambda x: x.sum(1), huge, kernels=dk(), rtol=1e-5)


def test_integer_sums() -> None:
    torch.manual_seed(2)
    i64 = torch.randint(-1000, 1000, (5, 6, 7))
    check(lambda x: x.sum((0, 2)), i64, kernels=dk())
    check(lambda x: x.sum(), i64 * 1_000_000_000, kernels=dk())  # beyond int32
    check(lambda x: x.sum(1, keepdim=True), i64.to(torch.int32), kernels=dk())
    check(lambda x: x.sum(-1), (i64 > 0).transpose(0, 1), kernels=dk())
    check(lambda x: x.sum(0), i64.to(torch.uint8), kernels=dk())
    check(lambda x: x.sum(1, dtype=torch.float32), i64, kernels=dk())


@pytest.mark.parametrize("dtype", [*FLOATS, torch.int64, torch.int32])
def test_max_min_arg(dtype: torch.dtype) -> None:
    torch.manual_seed(3)
    for x in inputs(torch.float32):
        x = (x * 3).round().to(dtype)  # ties: argmax takes the first
        for dims, keepdim in DIMS:
            check(reduce_fn(torch.amax, dims or (), keepdim), x, kernels=dk())
            check(reduce_fn(torch.amin, dims or (), keepdim), x, kernels=dk())
        for dim in (0, 1, -1):
            for keepdim in (False, True):
                check(lambda t, d=dim, k=keepdim: torch.argmax(t, d, k), x, kernels=dk())
                check(lambda t, d=dim, k=keepdim: torch.argmin(t, d, k), x, kernels=dk())
                check(lambda t, d=dim, k=keepdim: torch.max(t, d, k), x, kernels=dk())
                check(lambda t, d=dim, k=keepdim: torch.min(t, d, k), x, kernels=dk())
        check(torch.argmax, x, kernels=dk())
        check(lambda t: torch.argmin(t, keepdim=True), x, kernels=dk())
        check(torch.max, x, kernels=dk())
        check(torch.min, x, kernels=dk())
    long = torch.randn(2, 3000).to(dtype)
    check(lambda t: torch.max(t, 1), long, kernels=dk())
    check(lambda t: t.argmin(0), long.t().contiguous(), kernels=dk())


def test_max_nan() -> None:
    x = torch.randn(4, 600)
    x[1, 7] = float("nan")
    x[2, 300] = float("nan")
    x[2, 500] = float("nan")
    check(lambda t: t.amax(1), x, kernels=dk())
    check(lambda t: t.argmax(1), x, kernels=dk())
    check(lambda t: torch.min(t, 1), x, kernels=dk())
    check(lambda t: t.argmin(0), x[:, :20], kernels=dk())


@pytest.mark.filterwarnings("ignore:var\\(\\). degrees of freedom")  # the size-1 dim: NaN
@pytest.mark.parametrize("dtype", FLOATS)
def test_var_std(dtype: torch.dtype) -> None:
    for x in inputs(dtype):
        for dims, keepdim in DIMS[:5]:
            check(lambda t, d=dims, k=keepdim: torch.var(t, d, keepdim=k), x, kernels=dk())
            check(
                lambda t, d=dims, k=keepdim: torch.std(t, d, unbiased=False, keepdim=k),
                x,
                kernels=dk(),
            )
        check(lambda t: torch.var(t, 1, correction=0), x, kernels=dk())
        check(lambda t: torch.std(t, (0, 1), correction=2), x, kernels=dk())
        check(torch.var, x, kernels=dk())
        check(torch.std, x, kernels=dk())
        check(lambda t: torch.var_mean(t, (0, 2), keepdim=True), x, kernels=dk())
        check(lambda t: torch.std_mean(t, 1, correction=0), x, kernels=dk())
    long = (torch.randn(3, 2000) * 4 + 100).to(dtype)  # two passes: no cancellation
    check(lambda t: t.var(1), long, kernels=dk())
    check(lambda t: t.std(0), long, kernels=dk())


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax(dtype: torch.dtype) -> None:
    for x in inputs(dtype):
        for dim in (0, 1, -1):
            check(lambda t, d=dim: torch.softmax(t, d), x, kernels=dk())
            check(lambda t, d=dim: torch.log_softmax(t, d), x, kernels=dk())
    long = (torch.randn(3, 1500) * 5).to(dtype)
    long[1, :1000] = float("-inf")
    check(lambda t: torch.softmax(t, -1), long, kernels=dk())
    check(lambda t: torch.log_softmax(t, -1), long, kernels=dk())
    check(lambda t: torch.softmax(t, 0), long.t(), kernels=dk())
    check(lambda t: torch.softmax(t, 0), torch.randn(400, 300).to(dtype), kernels=dk())


def grads(fn: Callable, *params: bool, upcast: bool) -> Callable:
    """(out, grads) of fn over its tensor arguments, `params` saying which need gradients,
    with a random upstream gradient (seeded, so the CPU and device runs get the same).

    With `upcast` (where the device runs its kernels), float16 / bfloat16 arguments on the CPU
    are computed in float32 and the results rounded: torch's CPU backward kernels round
    intermediates to the reduced dtype (their error against float64 is several times the
    device's, which keeps float32 math), so the reference is torch's float32 math on the same
    reduced-precision values. Without it (the fallback runs torch's CPU kernels) the CPU
    computes in the arguments' dtypes."""

    def run(*args: torch.Tensor):
        dtypes = [a.dtype for a in args]
        if upcast and args[0].device.type == "cpu":
            args = tuple(
                a.float() if a.dtype in (torch.float16, torch.bfloat16) else a for a in args
            )
        leaves = [a.detach().requires_grad_(p) for a, p in zip(args, params)]
        out = fn(*leaves)
        g = torch.randn(out.shape, generator=torch.Generator().manual_seed(7)).to(dtypes[0])
        wanted = [(t, d) for t, d in zip(leaves, dtypes) if t.requires_grad]
        got = torch.autograd.grad(out, [t for t, _ in wanted], g.to(out.device, out.dtype))
        return out.detach().to(dtypes[0]), tuple(r.to(d) for r, (_, d) in zip(got, wanted))

    return run


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_backward(dtype: torch.dtype) -> None:
    for x in inputs(dtype)[:3]:
        for dim in (0, -1):
            check(
                grads(lambda t, d=dim: torch.softmax(t, d), True, upcast=dk()),
                x,
                kernels=dk(),
            )
            check(
                grads(lambda t, d=dim: torch.log_softmax(t, d), True, upcast=dk()),
                x,
                kernels=dk(),
            )
    long = torch.randn(2, 700).to(dtype)
    check(
        grads(lambda t: torch.softmax(t, 1), True, upcast=dk()),
        long,
        kernels=dk(),
    )
    check(
        grads(lambda t: torch.log_softmax(t, 1), True, upcast=dk()),
        long,
        kernels=dk(),
    )


def layer_norm(shape: list[int], affine: bool) -> Callable:
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(
            x, shape, w if affine else None, b if affine else None, 1e-5
        )

    return fn


def layer_norm_cases(dtype: torch.dtype) -> list[tuple[torch.Tensor, list[int], torch.dtype]]:
    torch.manual_seed(4)
    x = torch.randn(4, 6, 300).to(dtype)
    return [
        (torch.randn(5, 10).to(dtype), [10], dtype),
        (x, [300], dtype),  # rows longer than a workgroup
        (x, [6, 300], dtype),  # two normalized dims
        (x.transpose(0, 1), [300], dtype),  # strided rows
        (torch.randn(3, 40, 5).to(dtype).transpose(1, 2), [5, 40], torch.float32),  # strided
    ]


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm(dtype: torch.dtype) -> None:
    for x, shape, wdtype in layer_norm_cases(dtype):
        w = (torch.rand(shape) + 0.5).to(wdtype)
        b = torch.randn(shape).to(wdtype)
        for affine in (True, False):
            check(layer_norm(shape, affine), x, w, b, kernels=dk())
        check(lambda t, s=shape: torch.native_layer_norm(t, s, None, None, 1e-5), x, kernels=dk())


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm_backward(dtype: torch.dtype) -> None:
    for x, shape, wdtype in layer_norm_cases(dtype):
        w = (torch.rand(shape) + 0.5).to(wdtype)
        b = torch.randn(shape).to(wdtype)
        # weight's and bias's gradients sum a product per row (up to 24 rows here): float32
        # sums in another order; float16 / bfloat16 ones also see mean and rstd stored rounded
        # to the dtype by the forward (as torch's are), against a float32 reference.
        atol = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 5e-2}[dtype]
        check(
            grads(layer_norm(shape, True), True, True, True, upcast=dk()),
            x,
            w,
            b,
            kernels=dk(),
            atol=atol,
        )
        check(
            grads(layer_norm(shape, True), True, False, False, upcast=dk()),
            x,
            w,
            b,
            kernels=dk(),
            atol=atol,
        )
        check(
            grads(layer_norm(shape, False), True, False, False, upcast=dk()),
            x,
            w,
            b,
            kernels=dk(),
            atol=atol,
        )
        check(
            grads(layer_norm(shape, True), False, True, True, upcast=dk()),
            x,
            w,
            b,
            kernels=dk(),
            atol=atol,
        )


def test_declined_dtypes_fall_back() -> None:
    x = torch.randn(3, 5, dtype=torch.float64)
    fallbacks = ("aten::_softmax", "aten::sum.dim_IntList", "aten::var.correction")
    check(lambda t: torch.softmax(t, 1), x, kernels=dk(), fallbacks=fallbacks)
    check(lambda t: t.sum(1), x, kernels=dk(), fallbacks=fallbacks)
    check(lambda t: t.var(0), x, kernels=dk(), fallbacks=fallbacks)
    if dk():
        counts = torch.mpsrt.fallback_counts()
        assert counts.get("aten::var.correction") == 1, counts


def test_too_many_dims_fall_back() -> None:
    # Five reduced dims that do not coalesce (the reduce kernel takes four): the fallback runs.
    x = torch.randn(2, 3, 2, 3, 2, 3, 2, 3, 2)
    name = "aten::sum.dim_IntList"
    check(lambda t: t.sum((0, 2, 4, 6, 8)), x, kernels=dk(), fallbacks=(name,), atol=1e-5)
    if dk():
        assert torch.mpsrt.fallback_counts().get(name) == 1
    check(lambda t: t.sum((0, 2, 4, 6)), x, kernels=dk(), atol=1e-5)  # four: the kernel
