"""The PyTorch device's element-wise ops on mpsrt's kernels (csrc/torch/ops/elementwise.cpp,
csrc/kernels/elementwise/), against torch's CPU results: broadcasting, strides, scalars,
type promotion, in-place and out= forms."""

from __future__ import annotations

import pytest
from kernel_check import check, torch

# Where the device runs kernels (conftest.kernels_only says why not elsewhere).
pytestmark = pytest.mark.usefixtures("kernels_only")

FLOATS = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_ops_broadcast(device_kernels: bool, dtype: torch.dtype) -> None:
    a = torch.randn(5, 1, 7).to(dtype)
    b = torch.randn(3, 7).to(dtype)
    check(lambda x, y: x + y, a, b, kernels=device_kernels)
    check(lambda x, y: torch.add(x, y, alpha=-2.5), a, b, kernels=device_kernels)
    check(lambda x, y: x - y, a, b, kernels=device_kernels)
    check(lambda x, y: x * y, a, b, kernels=device_kernels)
    check(lambda x, y: x / (y.abs() + 1) if False else x / y, a, b + 3, kernels=device_kernels)


def test_strided_inputs_and_scalars(device_kernels: bool) -> None:
    a = torch.randn(6, 8)
    check(lambda x: x.t() * 3 - 1, a, kernels=device_kernels)
    check(lambda x: x[::2, 1::3] + x[1::2, ::3], a, kernels=device_kernels)
    check(lambda x: x + torch.tensor(2.5), a, kernels=device_kernels)


def test_type_promotion(device_kernels: bool) -> None:
    i = torch.arange(-6, 6, dtype=torch.int64).reshape(3, 4)
    f = torch.randn(3, 4)
    check(lambda x, y: x + y, i, f, kernels=device_kernels)
    check(lambda x: x * 3 - 7, i, kernels=device_kernels)
    check(lambda x: x / 4, i, kernels=device_kernels)
    check(lambda x, y: x * y, i.to(torch.int32), f.half(), kernels=device_kernels)


def test_inplace_and_out(device_kernels: bool) -> None:
    def inplace(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x.add_(y, alpha=2)
        x.mul_(y)
        return x

    a, b = torch.randn(4, 5), torch.randn(5)
    check(inplace, a, b, kernels=device_kernels)

    def out_form(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        o = torch.empty(0, device=x.device)
        torch.sub(x, y, out=o)
        return o

    check(out_form, a, b, kernels=device_kernels)


@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_direct_path(device_kernels: bool, dtype: torch.dtype) -> None:
    """The binary ops' direct path (same dtype, contiguous, same shape or a wrapped number: no
    TensorIterator) in every form, and the calls just outside it, equal torch CPU's."""
    a, b = torch.randn(3, 5).to(dtype), torch.randn(3, 5).to(dtype)

    def forms(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        x = x.clone()
        x.add_(1).sub_(y, alpha=0.5).mul_(2.5).div_(y.abs() + 1)
        o = torch.empty_like(x)
        torch.add(x, y, alpha=3, out=o)
        z = y.clone()
        torch.mul(x, z, out=z)  # out is an input
        return [x, o, z, x + 2, x * y, x - 1.5, x / 4, torch.maximum(x, y), True + x]

    check(forms, a, b, kernels=device_kernels)


def test_binary_direct_path_edges(device_kernels: bool) -> None:
    """What the direct path leaves to the general one: a partial overlap raises torch's error,
    out= of another shape is resized, an integer tensor with a float number promotes."""
    a = torch.arange(8.0).to("mpsrt")
    with pytest.raises(RuntimeError, match="single memory location"):
        a[1:].add_(a[:-1])
    assert torch.equal(a.cpu(), torch.arange(8.0))  # nothing written
    check(
        lambda x: torch.add(x, x, out=torch.empty(0, device=x.device)),
        torch.randn(4),
        kernels=device_kernels,
    )
    check(lambda x: x + 0.5, torch.arange(6), kernels=device_kernels)


def test_unary(device_kernels: bool) -> None:
    a = torch.randn(33, 17)
    check(lambda x: -x, a, kernels=device_kernels)
    check(torch.relu, a, kernels=device_kernels)


# ---- the element-wise family: unary, binary, ternary ops, backward ops, copies and cat ----

SPECIAL = torch.tensor([0.0, -0.0, 1.0, -1.0, float("nan"), float("inf"), float("-inf"), 1e-3])


def finite(x: torch.Tensor) -> torch.Tensor:
    """x with its infinities replaced by +-50 (torch's CPU gelu gives NaN at +-inf, a quirk of
    its vectorised path; the device gives gelu's limits)."""
    return x.clamp(-50.0, 50.0)


def values(*shape: int, scale: float = 3.0, seed: int = 0) -> torch.Tensor:
    """Random float32 values of `shape` (their first elements torch's special values)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * scale
    flat = x.view(-1)
    n = min(flat.numel(), SPECIAL.numel())
    flat[:n] = SPECIAL[:n]
    return x


UNARY = {
    "neg": torch.neg,
    "abs": torch.abs,
    "relu": torch.relu,
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "sin": torch.sin,
    "cos": torch.cos,
    "gelu": lambda x: torch.nn.functional.gelu(finite(x)),
    "gelu_tanh": lambda x: torch.nn.functional.gelu(finite(x), approximate="tanh"),
    "silu": torch.nn.functional.silu,
    "logical_not": torch.logical_not,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float32(device_kernels: bool, name: str) -> None:
    fn = UNARY[name]
    x = values(9, 13)
    x[0, 8:] = torch.tensor([20.0, -20.0, 88.0, -88.0, 100.0])  # saturation, overflow
    check(fn, x, kernels=device_kernels)
    check(lambda t: fn(t.t()), x, kernels=device_kernels)  # strided input
    # Wider arguments for the periodic functions, the exponent's range for exp and log.
    check(fn, torch.linspace(-200.0, 200.0, 301), kernels=device_kernels)
    # (sin and cos are as accurate as torch's for |x| <= 8192, not beyond: the kernel's
    # range reduction stops there.)
    big = torch.logspace(-30, 30 if name not in ("sin", "cos") else 3.9, 61)
    check(fn, torch.cat([big, -big]), kernels=device_kernels)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_unary_reduced_floats(device_kernels: bool, dtype: torch.dtype) -> None:
    x = values(7, 11).to(dtype)
    for name in ("exp", "tanh", "sigmoid", "gelu", "gelu_tanh", "silu", "sqrt", "sin", "relu"):
        check(UNARY[name], x, kernels=device_kernels)


def test_unary_forms_and_integers(device_kernels: bool) -> None:
    i = torch.arange(-7, 8, dtype=torch.int64).reshape(3, 5)
    for fn in (torch.neg, torch.abs, torch.relu, torch.logical_not):
        check(fn, i, kernels=device_kernels)
        check(fn, i.to(torch.int32), kernels=device_kernels)
    check(torch.sqrt, i.abs(), kernels=device_kernels)  # integer in, float out
    check(torch.sigmoid, i.to(torch.int32), kernels=device_kernels)
    check(torch.logical_not, torch.tensor([True, False, True]), kernels=device_kernels)

    def inplace(x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x.exp_().sin_().sigmoid_()
        torch.nn.functional.gelu(x, approximate="tanh").logical_not_()
        x.abs_().sqrt_().tanh_().cos_().neg_().relu_()
        return x

    check(inplace, values(4, 6), kernels=device_kernels)

    def out_form(x: torch.Tensor) -> torch.Tensor:
        o = torch.empty(6, 4, device=x.device).t()  # a strided output
        torch.exp(x, out=o)
        torch.log(o, out=o)
        b = torch.empty(0, dtype=torch.bool, device=x.device)
        torch.logical_not(x, out=b)
        return o, b, torch.nn.functional.silu(x.clone(), inplace=True)

    check(out_form, values(4, 6), kernels=device_kernels)


def test_div_rounding_modes(device_kernels: bool) -> None:
    a = values(6, 7, scale=10.0)
    b = values(7, scale=3.0, seed=1)
    b[0] = 0.0
    for mode in (None, "trunc", "floor"):
        check(
            lambda x, y, mode=mode: torch.div(x, y, rounding_mode=mode),
            a,
            b,
            kernels=device_kernels,
        )
        check(
            lambda x, mode=mode: torch.div(x, -2.5, rounding_mode=mode), a, kernels=device_kernels
        )
    check(lambda x, y: x // y, a, b, kernels=device_kernels)

    def forms(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        o = torch.empty_like(x)
        torch.div(x, y, rounding_mode="floor", out=o)
        return o, x.clone().div_(y, rounding_mode="trunc")

    check(forms, a, b, kernels=device_kernels)
    # Integer division raises on a zero divisor on the CPU: the device leaves it to the CPU.
    i = torch.arange(1, 13).reshape(3, 4)
    check(
        lambda x: torch.div(x, 3, rounding_mode="floor"),
        i,
        kernels=device_kernels,
        fallbacks=("aten::div.Tensor_mode",),
    )


def test_pow(device_kernels: bool) -> None:
    base = values(5, 6).abs() + 0.1
    exponent = values(6, scale=2.0, seed=2).nan_to_num(0.5)
    check(torch.pow, base, exponent, kernels=device_kernels)
    x = values(5, 6)
    for e in (2, 3, -1, -2, 0, 0.5, -0.5, 2.5, -1.5):
        check(lambda t, e=e: t**e, x, kernels=device_kernels)
    check(lambda t: 2.0**t, x, kernels=device_kernels)
    check(lambda t: torch.pow(t, x.new_tensor(3.0)), x, kernels=device_kernels)
    i = torch.arange(-4, 5, dtype=torch.int64)
    check(lambda t: t**3, i, kernels=device_kernels)
    check(lambda t, e: t**e, i, i.abs().flip(0), kernels=device_kernels)
    check(lambda t: t**2.5, i.abs(), kernels=device_kernels)  # int tensor, float exponent

    def forms(t: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        o = torch.empty(0, device=t.device)
        torch.pow(t, e, out=o)
        return o, t.clone().pow_(2), t.clone().pow_(e)

    check(forms, base, exponent, kernels=device_kernels)


def test_add_sub_alpha_integers_exact(device_kernels: bool) -> None:
    a = torch.tensor([2**40 + 1, -(2**41) - 3, 7, 2**52 + 5])
    b = torch.tensor([3, 2**39 + 7, -9, 11])
    check(lambda x, y: torch.add(x, y, alpha=3), a, b, kernels=device_kernels)
    check(lambda x, y: torch.sub(x, y, alpha=2**20), a, b, kernels=device_kernels)
    check(lambda x, y: x + y, a, b.to(torch.int32), kernels=device_kernels)
    check(lambda x: x + 2**45, a, kernels=device_kernels)
    check(lambda x, y: x.clone().sub_(y, alpha=-5), a, b, kernels=device_kernels)
    check(
        lambda x, y: x + y,
        torch.tensor([True, False]),
        torch.tensor([True, True]),
        kernels=device_kernels,
    )


@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(device_kernels: bool, name: str) -> None:
    fn = getattr(torch, name)
    a = values(4, 1, 5).round()
    b = values(3, 5, seed=3).round()
    check(fn, a, b, kernels=device_kernels)
    check(lambda x: fn(x, 1.0), a, kernels=device_kernels)
    check(lambda x: fn(x.t(), 0), b, kernels=device_kernels)
    i = torch.arange(-3, 3).reshape(2, 3)
    check(fn, i, i.flip(1).to(torch.int32), kernels=device_kernels)
    check(lambda x: fn(x, 0.5), i, kernels=device_kernels)  # int tensor, float scalar
    check(fn, a.half(), b, kernels=device_kernels)

    def forms(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        o = torch.empty(0, dtype=torch.bool, device=x.device)
        fn(x, y, out=o)
        z = x.clone()
        getattr(z, name + "_")(y)
        w = x.clone()
        getattr(w, name + "_")(0.0)
        return o, z, w

    check(forms, b, b.flip(0), kernels=device_kernels)


def test_where_and_masked_fill(device_kernels: bool) -> None:
    a = values(4, 5)
    b = values(5, seed=4)
    c = values(4, 1, seed=5) > 0
    check(torch.where, c, a, b, kernels=device_kernels)
    check(lambda m, x, y: x.where(m, y), c, a, b.half(), kernels=device_kernels)
    check(lambda m, x: torch.where(m, x, 0.0), c, a, kernels=device_kernels)
    i = torch.arange(20).reshape(4, 5)
    check(lambda m, x, y: torch.where(m, x, y), c, i, a, kernels=device_kernels)
    check(lambda m, x: torch.where(m, x, -1), c, i, kernels=device_kernels)

    def out_form(m: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        o = torch.empty(0, device=x.device)
        torch.where(m, x, y, out=o)
        return o

    check(out_form, c, a, b, kernels=device_kernels)
    mask = values(4, 5, seed=6) > 0
    check(lambda x, m: x.masked_fill(m, -7.5), a, mask, kernels=device_kernels)
    check(lambda x, m: x.masked_fill(m[0], float("nan")), a, mask, kernels=device_kernels)
    check(lambda x, m: x.masked_fill(m, 3.7), i, mask, kernels=device_kernels)
    check(lambda x, m: x.masked_fill(m, torch.tensor(2.5)), a.half(), mask, kernels=device_kernels)
    check(
        lambda x, m, v: x.t().masked_fill_(m.t(), v),
        a,
        mask,
        torch.tensor(-1.25),
        kernels=device_kernels,
    )


def test_clamp_maximum_minimum(device_kernels: bool) -> None:
    x = values(6, 7)
    check(lambda t: t.clamp(-1.0, 0.5), x, kernels=device_kernels)
    check(lambda t: t.clamp(min=0.25), x, kernels=device_kernels)
    check(lambda t: t.clamp(max=-0.25), x, kernels=device_kernels)
    check(lambda t: t.clamp(1.0, -1.0), x, kernels=device_kernels)  # min > max: max
    check(lambda t: t.clamp_min(0.0), x.t(), kernels=device_kernels)
    check(lambda t: t.clamp_max(0.0), x.bfloat16(), kernels=device_kernels)
    i = torch.arange(-10, 10).reshape(4, 5)
    check(lambda t: t.clamp(-3, 4), i, kernels=device_kernels)
    check(lambda t: t.clamp(-2.5, 4), i, kernels=device_kernels)  # float bounds: float result

    def forms(t: torch.Tensor) -> torch.Tensor:
        o = torch.empty(0, device=t.device)
        torch.clamp(t, -0.5, 0.5, out=o)
        return o, t.clone().clamp_(max=1.0), t.clone().clamp_min_(0.0), t.clone().clamp_max_(0)

    check(forms, x, kernels=device_kernels)
    y = values(7, seed=7)
    for fn in (torch.maximum, torch.minimum):
        check(fn, x, y, kernels=device_kernels)
        check(fn, i, i.flip(0).to(torch.int32), kernels=device_kernels)
        check(fn, x.half(), y, kernels=device_kernels)

        def out_form(a: torch.Tensor, b: torch.Tensor, fn=fn) -> torch.Tensor:
            o = torch.empty(0, device=a.device)
            fn(a, b, out=o)
            return o

        check(out_form, x, y, kernels=device_kernels)


def grads(fn, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """d fn(x) / dx applied to g, through autograd."""
    x = x.detach().requires_grad_()
    (gx,) = torch.autograd.grad(fn(x), x, grad_outputs=g)
    return gx


@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "relu"])
def test_backward_through_autograd(device_kernels: bool, name: str) -> None:
    fn = {
        "gelu": torch.nn.functional.gelu,
        "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
    }.get(name, UNARY[name])
    x = finite(values(5, 8))
    g = values(5, 8, scale=1.0, seed=8)
    check(lambda t, u: grads(fn, t, u), x, g, kernels=device_kernels)
    check(lambda t, u: grads(fn, t, u), x.half(), g.half(), kernels=device_kernels)


def test_backward_ops(device_kernels: bool) -> None:
    aten = torch.ops.aten
    x = values(4, 6)
    g = values(4, 6, scale=1.0, seed=9)
    check(lambda u, t: aten.threshold_backward(u, t, 0.5), g, x, kernels=device_kernels)
    check(
        lambda u, t: aten.gelu_backward(u, t, approximate="tanh"),
        g,
        x.bfloat16(),
        kernels=device_kernels,
    )
    check(lambda u, t: aten.silu_backward(u, t.t()), g.t(), x, kernels=device_kernels)
    check(lambda u, t: aten.sigmoid_backward(u, torch.sigmoid(t)), g, x, kernels=device_kernels)
    check(lambda u, t: aten.tanh_backward(u, torch.tanh(t)), g, x, kernels=device_kernels)

    def out_form(u: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        o = torch.empty_like(t)
        aten.gelu_backward.grad_input(u, t, grad_input=o)
        return o

    check(out_form, g, x, kernels=device_kernels)


CAST_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool]


def test_casts(device_kernels: bool) -> None:
    base = torch.tensor([[0.0, 1.0, -2.0, 3.5, 100.0, -0.0], [7.25, -8.5, 0.0, 42.0, -1.0, 5.0]])
    for src in CAST_DTYPES:
        x = base.to(src)
        for dst in CAST_DTYPES:
            check(lambda t, dst=dst: t.to(dst), x, kernels=device_kernels)
            check(lambda t, dst=dst: t.t().to(dst), x, kernels=device_kernels)
    # Specials: NaN and infinities to the other floats, NaN to bool.
    check(lambda t: (t.half(), t.bfloat16(), t.bool()), SPECIAL, kernels=device_kernels)

    def copy_into(x: torch.Tensor) -> torch.Tensor:
        o = torch.zeros(3, 6, 4, dtype=torch.bfloat16, device=x.device)
        o[:, :, 1].copy_(x[0])  # broadcast into a strided view
        return o

    check(copy_into, base, kernels=device_kernels)


def test_contiguous_of_views(device_kernels: bool) -> None:
    x = values(3, 4, 5, 6)
    check(lambda t: t.transpose(1, 3).contiguous(), x, kernels=device_kernels)
    check(lambda t: t.permute(2, 0, 3, 1).contiguous(), x, kernels=device_kernels)
    check(lambda t: t[:, ::2, 1:, ::3].contiguous(), x, kernels=device_kernels)
    check(
        lambda t: t.permute(3, 1, 2, 0).contiguous(), x.to(torch.float64), kernels=device_kernels
    )  # bits: exact for every dtype
    check(lambda t: t.t().contiguous(), torch.arange(35).reshape(5, 7), kernels=device_kernels)
    check(
        lambda t: t.t().contiguous(),
        torch.arange(35).reshape(5, 7) % 3 == 0,
        kernels=device_kernels,
    )


def test_cat_and_stack(device_kernels: bool) -> None:
    a, b, c = values(2, 3, 4), values(2, 5, 4, seed=10), values(2, 1, 4, seed=11)
    check(lambda x, y, z: torch.cat([x, y, z], 1), a, b, c, kernels=device_kernels)
    check(lambda x, y: torch.cat([x, y[:, 1:4]], 0), a, b, kernels=device_kernels)
    check(lambda x, y: torch.cat([x, y]), a, a.half(), kernels=device_kernels)  # promotes
    check(lambda x, y: torch.cat([x, y], -1), a, a.to(torch.int64), kernels=device_kernels)
    check(lambda x, e: torch.cat([x, e, x], 2), a, torch.empty(0), kernels=device_kernels)
    check(lambda x, y: torch.stack([x, y]), a, a.flip(0), kernels=device_kernels)
    check(lambda x, y: torch.stack([x, y], dim=2), a, a.flip(0), kernels=device_kernels)

    def out_form(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        o = torch.empty(0, device=x.device)
        torch.cat([x, y], dim=1, out=o)
        return o

    check(out_form, a, b, kernels=device_kernels)
