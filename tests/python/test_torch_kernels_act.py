"""The PyTorch device's activations and factories on mpsrt's kernels against torch's CPU
results: hardsigmoid, hardswish, leaky_relu, elu (selu, celu), softplus, mish, hardtanh
(relu6) and prelu with their gradients (csrc/kernels/elementwise/), and arange, linspace,
eye, tril / triu and roll (csrc/kernels/factory/): functional, in-place and out= forms,
float32 / float16 / bfloat16 and integer dtypes, run on the kernels (no fallback)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
from kernel_check import assert_close, check, torch

# Where the device runs kernels (conftest.kernels_only says why not elsewhere).
pytestmark = pytest.mark.usefixtures("kernels_only")

F = torch.nn.functional
HALF = [torch.float32, torch.float16, torch.bfloat16]

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "elu": lambda x: F.elu(x, 1.5),
    "selu": F.selu,
    "celu": lambda x: F.celu(x, 0.7),
    "softplus": lambda x: F.softplus(x, 2.0, 3.0),
    "mish": F.mish,
    "hardtanh": lambda x: F.hardtanh(x, -0.5, 2.0),
    "relu6": F.relu6,
}


def _inputs(dtype: torch.dtype) -> torch.Tensor:
    # Both sides of every bend (hardsigmoid's +-3, softplus's threshold, ...), small and large
    # values (expm1 / log1p near 0, exp overflowing), and NaN.
    x = torch.cat([torch.linspace(-8, 8, 97), torch.tensor([-1e-6, 1e-6, -60.0, 60.0, 100.0])])
    x = torch.cat([x, torch.randn(40) * 3, torch.tensor([float("nan")])])
    return x.to(dtype)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_forward(device_kernels: bool, name: str, dtype: torch.dtype) -> None:
    fn = ACTIVATIONS[name]
    check(fn, _inputs(dtype), kernels=device_kernels)
    # A strided (transposed) input.
    check(lambda x: fn(x.t()), torch.randn(6, 7).to(dtype), kernels=device_kernels)


@pytest.mark.parametrize(
    "name", ["hardsigmoid", "hardswish", "leaky_relu", "elu", "selu", "celu", "hardtanh", "relu6"]
)
def test_activation_inplace(device_kernels: bool, name: str) -> None:
    fn = ACTIVATIONS[name]
    kw = {"hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish, "relu6": F.relu6}
    if name in kw:
        inplace = lambda x: kw[name](x, inplace=True)  # noqa: E731
    else:
        inplace = {
            "leaky_relu": lambda x: F.leaky_relu_(x, 0.2),
            "elu": lambda x: F.elu_(x, 1.5),
            "selu": lambda x: F.selu_(x),
            "celu": lambda x: F.celu_(x, 0.7),
            "hardtanh": lambda x: F.hardtanh_(x, -0.5, 2.0),
        }[name]

    def run(x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        r = inplace(y)
        assert r.data_ptr() == y.data_ptr()
        return y

    x = _inputs(torch.float32)
    got = check(run, x, kernels=device_kernels)
    assert_close(got, fn(x))  # as the functional form


def test_activation_out_forms(device_kernels: bool) -> None:
    x = torch.randn(5, 6)

    def outs(t: torch.Tensor) -> list[torch.Tensor]:
        res = []
        for op, args in [
            (torch.ops.aten.hardsigmoid.out, ()),
            (torch.ops.aten.leaky_relu.out, (0.3,)),
            (torch.ops.aten.elu.out, (1.0, 1.0, 1.0)),
            (torch.ops.aten.softplus.out, (1.0, 20.0)),
            (torch.ops.aten.mish.out, ()),
            (torch.ops.aten.hardtanh.out, (-1.0, 1.0)),
        ]:
            out = torch.empty(0, device=t.device)
            op(t, *args, out=out)
            res.append(out)
        return res

    check(outs, x, kernels=device_kernels)


def _grad(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, g: torch.Tensor):
    x = x.detach().requires_grad_()
    y = fn(x)
    y.backward(g)
    return y.detach(), x.grad


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_backward(device_kernels: bool, name: str, dtype: torch.dtype) -> None:
    fn = ACTIVATIONS[name]
    x = _inputs(dtype)[:-1]  # the NaN's gradient is torch's choice per op
    g = torch.randn(x.shape).to(dtype)
    check(lambda a, b: _grad(fn, a, b), x, g, kernels=device_kernels)


def test_elu_backward_from_output(device_kernels: bool) -> None:
    # An in-place elu's gradient is computed from its output (is_result).
    def fwd_bwd(x: torch.Tensor, g: torch.Tensor):
        x = x.detach().requires_grad_()
        y = F.elu(x * 1.0, 0.8, inplace=True)
        y.backward(g)
        return y.detach(), x.grad

    check(fwd_bwd, torch.randn(50), torch.randn(50), kernels=device_kernels)


@pytest.mark.parametrize("dtype", HALF)
def test_prelu(device_kernels: bool, dtype: torch.dtype) -> None:
    x = torch.randn(2, 3, 4, 5).to(dtype)
    g = torch.randn(2, 3, 4, 5).to(dtype)
    for w in (torch.tensor([0.25]), torch.tensor([0.1, -0.5, 2.0])):
        w = w.to(dtype)

        def fwd_bwd(a: torch.Tensor, b: torch.Tensor, gr: torch.Tensor):
            a = a.detach().requires_grad_()
            b = b.detach().requires_grad_()
            y = F.prelu(a, b)
            y.backward(gr)
            return y.detach(), a.grad, b.grad

        # The weight's gradient is summed down to its shape by the reduce kernels.
        check(
            fwd_bwd, x, w, g, kernels=device_kernels, atol=1e-2 if dtype != torch.float32 else 1e-5
        )


def test_activation_declines_integers(device_kernels: bool) -> None:
    # No integer kernel in torch either: the fallback raises torch's own error.
    with pytest.raises(RuntimeError):
        F.hardsigmoid(torch.arange(4, device="mpsrt"))
    with pytest.raises(RuntimeError):
        F.elu(torch.arange(4, device="mpsrt"))


# ---------------------------------------------------------------- factories


@pytest.mark.parametrize(
    "dtype",
    [torch.int64, torch.int32, torch.float32, torch.float64, torch.float16, torch.bfloat16],
)
def test_arange(device_kernels: bool, dtype: torch.dtype) -> None:
    for args in [(10,), (3, 17), (2, 30, 3), (20, -5, -2), (0, 1, 0.1), (-1.5, 2.25, 0.25), (7, 7)]:
        if dtype in (torch.int64, torch.int32) and any(isinstance(a, float) for a in args):
            continue
        expected = torch.arange(*args, dtype=dtype)
        torch.mpsrt.reset_fallback_counts()
        got = torch.arange(*args, dtype=dtype, device="mpsrt")
        if device_kernels:
            assert torch.mpsrt.fallback_counts() == {}
        assert_close(got, expected)
    # Positions as GPT-2 takes them, long enough for many workgroups.
    assert_close(torch.arange(0, 70000, device="mpsrt"), torch.arange(0, 70000))


def test_arange_out(device_kernels: bool) -> None:
    def run(x: torch.Tensor) -> list[torch.Tensor]:
        empty = torch.empty(0, dtype=torch.int64, device=x.device)
        torch.arange(1, 11, 2, out=empty)
        same = torch.empty(5, device=x.device)
        torch.arange(0.5, 3, 0.5, out=same)
        strided = x[:, 0]
        torch.arange(4, out=strided)
        # Of the range's size but 2-d (torch keeps the shape), and empty but 2-d (made 1-d).
        square = torch.empty(2, 2, dtype=torch.float16, device=x.device)
        torch.arange(4, out=square)
        flat = torch.empty(0, 3, device=x.device)
        torch.arange(-3, 3, out=flat)
        return [empty, same, x, square, flat]

    check(run, torch.zeros(4, 3), kernels=device_kernels)


def test_arange_out_of_another_size_is_resized_with_torchs_warning(device_kernels: bool) -> None:
    def run(device: str) -> tuple[torch.Tensor, list[str]]:
        out = torch.full((3,), 7.0, device=device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.arange(2, 12, 2, out=out)
        # (on discrete memory the fallback may also say, once, that it staged the op)
        return out, [
            str(w.message).split(" This behavior")[0] for w in caught if "resized" in str(w.message)
        ]

    got, got_warnings = run("mpsrt")
    expected, expected_warnings = run("cpu")
    assert_close(got, expected)
    assert got_warnings == expected_warnings and len(expected_warnings) == 1


def test_arange_bad_range(device_kernels: bool) -> None:
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        torch.arange(0, 10, 0, device="mpsrt")
    with pytest.raises(RuntimeError, match="upper bound and lower bound inconsistent"):
        torch.arange(10, 0, 1, device="mpsrt")


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64]
)
def test_linspace(device_kernels: bool, dtype: torch.dtype) -> None:
    for start, end, steps in [(-1, 2, 7), (0, 10, 2), (3.5, -2.25, 50), (0, 1000, 1001), (5, 5, 4)]:
        expected = torch.linspace(start, end, steps, dtype=dtype)
        torch.mpsrt.reset_fallback_counts()
        got = torch.linspace(start, end, steps, dtype=dtype, device="mpsrt")
        if device_kernels:
            assert torch.mpsrt.fallback_counts() == {}
        assert_close(got, expected)

    def out_forms(x: torch.Tensor) -> list[torch.Tensor]:
        torch.linspace(-3, 4, 4, out=x[:, 1])  # a strided out
        grid = torch.empty(2, 5, device=x.device)
        torch.linspace(0, 1, 10, out=grid)  # a 2-D out of the right size keeps its shape
        return [x, grid]

    check(out_forms, torch.zeros(4, 3), kernels=device_kernels)
    # One and no steps.
    assert_close(torch.linspace(2, 9, 1, device="mpsrt"), torch.linspace(2, 9, 1))
    assert_close(torch.linspace(2, 9, 0, device="mpsrt"), torch.linspace(2, 9, 0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_eye(device_kernels: bool, dtype: torch.dtype) -> None:
    for args in [(1,), (4,), (3, 5), (6, 2), (0, 3)]:
        expected = torch.eye(*args, dtype=dtype)
        torch.mpsrt.reset_fallback_counts()
        got = torch.eye(*args, dtype=dtype, device="mpsrt")
        if device_kernels:
            assert torch.mpsrt.fallback_counts() == {}
        assert_close(got, expected)

    def out_form(x: torch.Tensor) -> torch.Tensor:
        torch.eye(3, 4, out=x)
        return x

    check(out_form, torch.full((7,), 5.0).to(dtype), kernels=device_kernels)


@pytest.mark.parametrize("op", [torch.tril, torch.triu])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_tril_triu(device_kernels: bool, op: Callable, dtype: torch.dtype) -> None:
    a = (torch.randn(2, 3, 5, 6) * 10).to(dtype)
    for k in (0, 1, -2, 5, -7, 100, -100):
        check(lambda x, k=k: op(x, k), a, kernels=device_kernels)
    # Strided inputs: transposed matrices, batch dims that do not merge.
    check(lambda x: op(x.transpose(-1, -2), 1), a, kernels=device_kernels)
    check(lambda x: op(x.transpose(0, 1), -1), a, kernels=device_kernels)
    check(lambda x: op(x[0]), a, kernels=device_kernels)


@pytest.mark.parametrize("op", ["tril", "triu"])
def test_tril_triu_inplace_and_out(device_kernels: bool, op: str) -> None:
    def inplace(x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        getattr(y, op + "_")(1)
        z = x.clone().transpose(0, 1)  # in place on a strided view
        getattr(z, op + "_")(-1)
        return torch.stack([y, z.transpose(0, 1)])

    def out_form(x: torch.Tensor) -> list[torch.Tensor]:
        out = torch.empty(0, device=x.device)
        getattr(torch, op)(x, 2, out=out)
        same = torch.empty_like(x)
        getattr(torch, op)(x, -1, out=same)
        return [out, same]

    a = torch.randn(4, 4, 4)
    check(inplace, a, kernels=device_kernels)
    check(out_form, a, kernels=device_kernels)


def test_causal_mask(device_kernels: bool) -> None:
    # The causal mask of GPT-style attention.
    def mask(x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-1]
        m = torch.tril(torch.ones(n, n, dtype=torch.bool, device=x.device))
        return x.masked_fill(m.logical_not(), float("-inf"))

    check(mask, torch.randn(2, 9, 9), kernels=device_kernels)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_roll(device_kernels: bool, dtype: torch.dtype) -> None:
    a = (torch.randn(3, 4, 5) * 10).to(dtype)
    for shifts, dims in [
        (1, 0),
        (-2, 1),
        (7, 2),
        ((1, -3), (0, 2)),
        ((2, 2, 9), (0, 1, 2)),
        ((1, 1), (1, 1)),
        (0, -1),
        (4, ()),
        (-13, None),
    ]:
        if dims is None:
            check(lambda x, s=shifts: torch.roll(x, s), a, kernels=device_kernels)
        else:
            check(lambda x, s=shifts, d=dims: torch.roll(x, s, d), a, kernels=device_kernels)
    # A strided input (Swin rolls permuted windows), and an empty one.
    check(lambda x: torch.roll(x.permute(2, 0, 1), (-1, 2), (1, 2)), a, kernels=device_kernels)
    check(lambda x: torch.roll(x[:, :0], 1, 0), a, kernels=device_kernels)


def test_roll_bad_arguments(device_kernels: bool) -> None:
    x = torch.arange(6, device="mpsrt")
    with pytest.raises(IndexError):
        torch.roll(x, 1, 3)
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        torch.roll(x.view(2, 3), (1, 2), (0,))
