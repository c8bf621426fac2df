"""The PyTorch device's matrix products on mpsrt's gemm kernel (csrc/torch/ops/gemm.cpp,
csrc/kernels/gemm/), against torch's CPU results: mm, bmm, addmm and baddbmm with odd and
tile-crossing shapes, transposed, sliced and expanded (stride 0) operands, broadcast biases,
alpha and beta, out= and in-place forms, K = 0, and nn.Linear forward and backward (the
composite ops reach the kernel through views: no copies)."""

from __future__ import annotations

import math

import pytest
from kernel_check import TOLERANCES, check, torch

# Where the device runs kernels (conftest.kernels_only says why not elsewhere).
pytestmark = pytest.mark.usefixtures("kernels_only")

FLOATS = [torch.float32, torch.float16, torch.bfloat16]

# (M, K, N): one element, odd sizes, exact tiles (64 x 64, K chunks of 16), one past them.
SHAPES = [(1, 1, 1), (37, 29, 53), (64, 16, 64), (65, 17, 63), (3, 130, 5)]

# torch's composite ops reach the matrix products through views; the sum of a bias's gradient
# is a reduction (no kernel here).
REDUCTIONS = ("aten::sum.IntList_out", "aten::sum.dim_IntList")


def tol(dtype: torch.dtype, k: int) -> dict[str, float]:
    """Tolerances for sums of k products: float32 within 1e-5 relative, the absolute part (for
    cancellation near zero) and float16 / bfloat16's grown with sqrt(k), as rounding errors of
    random terms grow."""
    r, a = TOLERANCES[dtype]
    if dtype == torch.float32:
        return {"rtol": 1e-5, "atol": 1e-5 * math.sqrt(max(k, 1))}
    return {"rtol": r, "atol": a * math.sqrt(max(k, 1))}


def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape).to(dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mkn", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_mm_shapes(device_kernels: bool, dtype: torch.dtype, mkn: tuple[int, int, int]) -> None:
    m, k, n = mkn
    a, b = randn(m, k, dtype=dtype), randn(k, n, dtype=dtype)
    check(torch.mm, a, b, kernels=device_kernels, **tol(dtype, k))


def test_mm_transposed_and_strided(device_kernels: bool) -> None:
    a, b = randn(29, 37), randn(53, 29)
    t = tol(torch.float32, 29)
    check(lambda x, y: x.t() @ y.t(), a, b, kernels=device_kernels, **t)
    check(lambda x, y: x.t() @ y[:29, :37], a, b, kernels=device_kernels, **t)
    check(lambda x, y: y @ x, a, b, kernels=device_kernels, **t)
    check(lambda x, y: y[::2, 1::2] @ x[1::2, ::3], a, b, kernels=device_kernels, **t)
    check(lambda x, y: x[3:7].t() @ y[5:9, 2:20], a, b, kernels=device_kernels, **t)


@pytest.mark.parametrize("dtype", FLOATS)
def test_mm_large_k(device_kernels: bool, dtype: torch.dtype) -> None:
    # 125 chunks of K for one output tile.
    a, b = randn(5, 2000, dtype=dtype), randn(2000, 3, dtype=dtype)
    check(torch.mm, a, b, kernels=device_kernels, **tol(dtype, 2000))
    check(lambda x, y: y.t() @ x.t(), a, b, kernels=device_kernels, **tol(dtype, 2000))


def test_long_k(device_kernels: bool) -> None:
    # 6250 chunks of K in one invocation (llvmpipe counts all of an invocation's loop
    # iterations against 65535: the kernel's fixed loops must be unrolled), and a K past that
    # budget, which declines to the fallback.
    ones = torch.ones(100_000)
    got = check(torch.dot, ones, ones, kernels=device_kernels)
    assert got.item() == 100_000
    x, y = randn(100_000), randn(100_000)
    check(torch.dot, x, y, kernels=device_kernels, **tol(torch.float32, 100_000))
    x, y = randn(1_050_000), randn(1_050_000)
    check(
        torch.dot,
        x,
        y,
        kernels=device_kernels,
        fallbacks=("aten::dot",),
        **tol(torch.float32, 1_050_000),
    )


@pytest.mark.parametrize("dtype", FLOATS)
def test_bmm(device_kernels: bool, dtype: torch.dtype) -> None:
    a, b = randn(3, 37, 29, dtype=dtype), randn(3, 29, 70, dtype=dtype)
    t = tol(dtype, 29)
    check(torch.bmm, a, b, kernels=device_kernels, **t)
    # Transposed matrices inside the batch, and a batch-major layout with a batch stride that
    # is not the matrix's size.
    check(
        lambda x, y: x.transpose(1, 2).transpose(1, 2) @ y.transpose(1, 2).mT,
        a,
        b,
        kernels=device_kernels,
        **t,
    )
    check(lambda x, y: torch.bmm(y.mT, x.mT), a, b, kernels=device_kernels, **t)
    check(
        lambda x, y: torch.bmm(x.permute(1, 0, 2), y[:, :, ::2]),
        a.permute(1, 0, 2).contiguous(),
        b,
        kernels=device_kernels,
        **t,
    )


def test_bmm_expanded_batch(device_kernels: bool) -> None:
    # expand gives batch stride 0: every batch reads the same matrix.
    a, b = randn(1, 9, 17), randn(4, 17, 6)
    t = tol(torch.float32, 17)
    check(lambda x, y: torch.bmm(x.expand(4, 9, 17), y), a, b, kernels=device_kernels, **t)
    check(lambda x, y: torch.bmm(y.mT, x.expand(4, 9, 17).mT), a, b, kernels=device_kernels, **t)
    v = randn(17, 1)
    check(
        lambda x, y: torch.bmm(x.expand(4, 9, 17), y.expand(4, 17, 6)),
        a,
        v.expand(17, 6),
        kernels=device_kernels,
        **t,
    )


@pytest.mark.parametrize("dtype", FLOATS)
def test_addmm_bias_alpha_beta(device_kernels: bool, dtype: torch.dtype) -> None:
    m, k, n = 37, 29, 53
    a, b = randn(m, k, dtype=dtype), randn(k, n, dtype=dtype)
    t = tol(dtype, k)
    for bias in (
        randn(n, dtype=dtype),
        randn(m, 1, dtype=dtype),
        randn(m, n, dtype=dtype),
        randn(dtype=dtype),
        randn(1, n, dtype=dtype),
    ):
        check(torch.addmm, bias, a, b, kernels=device_kernels, **t)
        check(
            lambda c, x, y: torch.addmm(c, x.t().t(), y, beta=0.5, alpha=-2.0),
            bias,
            a,
            b,
            kernels=device_kernels,
            **t,
        )
    # beta = 0: the bias is not read (its NaNs do not reach the result).
    nan = torch.full((n,), float("nan")).to(dtype)
    check(
        lambda c, x, y: torch.addmm(c, x, y, beta=0, alpha=3),
        nan,
        a,
        b,
        kernels=device_kernels,
        **t,
    )
    # A transposed bias of the output's shape.
    check(
        lambda c, x, y: torch.addmm(c.t(), x, y, beta=-1.5),
        randn(n, m, dtype=dtype),
        a,
        b,
        kernels=device_kernels,
        **t,
    )


@pytest.mark.parametrize("dtype", FLOATS)
def test_baddbmm(device_kernels: bool, dtype: torch.dtype) -> None:
    a, b = randn(2, 21, 19, dtype=dtype), randn(2, 19, 66, dtype=dtype)
    t = tol(dtype, 19)
    for bias in (
        randn(2, 21, 66, dtype=dtype),
        randn(66, dtype=dtype),
        randn(21, 1, dtype=dtype),
        randn(2, 1, 66, dtype=dtype),
    ):
        check(torch.baddbmm, bias, a, b, kernels=device_kernels, **t)
        check(
            lambda c, x, y: torch.baddbmm(c, x, y.mT.mT, beta=2.0, alpha=0.25),
            bias,
            a,
            b,
            kernels=device_kernels,
            **t,
        )
    nan = torch.full((2, 21, 66), float("nan")).to(dtype)
    check(lambda c, x, y: torch.baddbmm(c, x, y, beta=0.0), nan, a, b, kernels=device_kernels, **t)


def test_out_forms(device_kernels: bool) -> None:
    a, b = randn(37, 29), randn(29, 53)
    a3, b3 = randn(2, 37, 29), randn(2, 29, 53)
    t = tol(torch.float32, 29)

    def out_of(fn):
        def run(*args: torch.Tensor) -> torch.Tensor:
            o = torch.empty(0, device=args[0].device)
            fn(*args, out=o)
            return o

        return run

    check(out_of(torch.mm), a, b, kernels=device_kernels, **t)
    check(out_of(torch.bmm), a3, b3, kernels=device_kernels, **t)
    check(
        out_of(lambda c, x, y, out: torch.addmm(c, x, y, beta=0.5, alpha=2, out=out)),
        randn(53),
        a,
        b,
        kernels=device_kernels,
        **t,
    )
    check(
        out_of(lambda c, x, y, out: torch.baddbmm(c, x, y, beta=-1, out=out)),
        randn(37, 53),
        a3,
        b3,
        kernels=device_kernels,
        **t,
    )

    def transposed_out(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # An out of the right shape keeps its (column-major) strides.
        o = torch.empty(53, 37, device=x.device).t()
        torch.mm(x, y, out=o)
        assert o.stride() == (1, 37)
        return o

    check(transposed_out, a, b, kernels=device_kernels, **t)

    def into_slice(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        big = torch.zeros(40, 60, device=x.device)
        torch.mm(x, y, out=big[2:39, 3:56])
        return big

    check(into_slice, a, b, kernels=device_kernels, **t)


def test_inplace(device_kernels: bool) -> None:
    a, b, c = randn(37, 29), randn(29, 53), randn(37, 53)
    t = tol(torch.float32, 29)

    def addmm_(c: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        c = c.clone()
        c.addmm_(x, y, beta=0.5, alpha=-1)
        c.t().addmm_(y.t(), x.t())  # in place through a transposed view
        return c

    check(addmm_, c, a, b, kernels=device_kernels, fallbacks=("aten::clone",), **t)

    def baddbmm_(c: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        c = c.clone()
        c.baddbmm_(x, y, alpha=2)
        return c

    check(
        baddbmm_,
        randn(3, 5, 7),
        randn(3, 5, 4),
        randn(3, 4, 7),
        kernels=device_kernels,
        fallbacks=("aten::clone",),
        **t,
    )


@pytest.mark.parametrize("dtype", FLOATS)
def test_vector_products(device_kernels: bool, dtype: torch.dtype) -> None:
    # mv runs as addmv: a one-column product; dot as a 1 x K by K x 1 product.
    a, v, w = randn(37, 29, dtype=dtype), randn(29, dtype=dtype), randn(58, dtype=dtype)
    t = tol(dtype, 29)
    check(torch.mv, a, v, kernels=device_kernels, **t)
    check(lambda x, y: x.t() @ y[::2], a.t().contiguous(), w, kernels=device_kernels, **t)
    check(
        lambda c, x, y: torch.addmv(c, x, y, beta=0.5, alpha=2),
        randn(37, dtype=dtype),
        a,
        v,
        kernels=device_kernels,
        **t,
    )
    check(
        lambda c, x, y: torch.addmv(c, x, y, beta=-1),
        randn(1, dtype=dtype),
        a,
        v,
        kernels=device_kernels,
        **t,
    )
    check(torch.dot, v, w[1::2], kernels=device_kernels, **t)
    check(lambda x, y: x @ y, w, w, kernels=device_kernels, **tol(dtype, 58))

    def out_forms(c: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        o1, o2 = torch.empty(0, device=x.device, dtype=dtype), c.clone()
        torch.mv(x, y, out=o1)
        o2.addmv_(x, y, alpha=-0.5)
        o3 = torch.empty(0, device=x.device, dtype=dtype)
        torch.dot(y, y, out=o3)
        return o1, o2, o3

    check(out_forms, randn(37, dtype=dtype), a, v, kernels=device_kernels, **t)


def test_matmul_composites(device_kernels: bool) -> None:
    # torch.matmul and einsum fold batches and broadcast through views and reshapes.
    t = tol(torch.float32, 29)
    x3, y2 = randn(2, 3, 29), randn(29, 7)
    check(torch.matmul, x3, y2, kernels=device_kernels, **t)
    check(
        lambda x, y: torch.matmul(x.transpose(0, 1), y),
        randn(3, 2, 29),
        y2,
        kernels=device_kernels,
        **t,
    )
    check(torch.matmul, randn(3, 29), randn(4, 29, 7), kernels=device_kernels, **t)
    check(torch.matmul, randn(2, 1, 3, 29), randn(1, 4, 29, 7), kernels=device_kernels, **t)
    check(torch.matmul, randn(29), y2, kernels=device_kernels, **t)
    check(
        lambda x, y: torch.einsum("bik,bkj->bij", x, y),
        x3,
        randn(2, 29, 7),
        kernels=device_kernels,
        **t,
    )


def test_empty_dims(device_kernels: bool) -> None:
    # K = 0: the products are zeros, addmm gives beta * bias.
    a, b = randn(3, 0), randn(0, 4)
    check(torch.mm, a, b, kernels=device_kernels)
    check(lambda c, x, y: torch.addmm(c, x, y, beta=2.5), randn(4), a, b, kernels=device_kernels)
    check(torch.bmm, randn(2, 3, 0), randn(2, 0, 4), kernels=device_kernels)
    check(torch.baddbmm, randn(2, 3, 4), randn(2, 3, 0), randn(2, 0, 4), kernels=device_kernels)
    # No outputs.
    check(torch.mm, randn(0, 5), randn(5, 4), kernels=device_kernels)
    check(torch.bmm, randn(0, 3, 5), randn(0, 5, 4), kernels=device_kernels)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("batch", [(5,), (2, 3)], ids=["2d", "3d"])
def test_linear_forward_backward(
    device_kernels: bool, dtype: torch.dtype, batch: tuple[int, ...]
) -> None:
    x, w, bias = randn(*batch, 29, dtype=dtype), randn(37, 29, dtype=dtype), randn(37, dtype=dtype)
    grad = randn(*batch, 37, dtype=dtype)

    def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, grad: torch.Tensor):
        x, w, bias = (v.detach().requires_grad_() for v in (x, w, bias))
        y = torch.nn.functional.linear(x, w, bias)
        y.backward(grad)
        return y.detach(), x.grad, w.grad, bias.grad

    # The weight's gradient sums over the batch: K is the batch's size there.
    check(linear, x, w, bias, grad, kernels=device_kernels, fallbacks=REDUCTIONS, **tol(dtype, 29))


def test_linear_module(device_kernels: bool) -> None:
    torch.manual_seed(3)
    cpu = torch.nn.Linear(29, 37)
    dev = torch.nn.Linear(29, 37).to("mpsrt")
    dev.load_state_dict(cpu.state_dict())
    x = randn(6, 29)
    for module, inp in ((cpu, x), (dev, x.to("mpsrt"))):
        module.zero_grad()
        torch.mpsrt.reset_fallback_counts()
        module(inp).backward(torch.ones(6, 37, device=inp.device))
    if device_kernels:
        ran = {k for k in torch.mpsrt.fallback_counts() if k not in REDUCTIONS}
        assert ran == set(), f"ops ran through the fallback: {ran}"
    t = tol(torch.float32, 29)
    for p_cpu, p_dev in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, **t)


def test_declined_run_on_the_fallback(device_kernels: bool) -> None:
    # float64, mixed dtypes and outputs overlapping an input run (or fail) as on the CPU.
    a, b = torch.randn(5, 7, dtype=torch.float64), torch.randn(7, 3, dtype=torch.float64)
    check(torch.mm, a, b, kernels=device_kernels, fallbacks=("aten::mm",))
    with pytest.raises(RuntimeError):
        torch.mm(randn(5, 7).to("mpsrt"), randn(7, 3, dtype=torch.float16).to("mpsrt"))
    with pytest.raises(RuntimeError):
        torch.mm(randn(5, 7).to("mpsrt"), randn(6, 3).to("mpsrt"))

    def aliased(x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        torch.mm(x, x, out=x)
        return x

    check(
        aliased,
        randn(6, 6),
        kernels=device_kernels,
        fallbacks=("aten::clone", "aten::mm.out"),
        **tol(torch.float32, 6),
    )
