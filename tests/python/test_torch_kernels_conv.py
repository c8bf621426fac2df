"""Convolutions on mpsrt's conv kernel (csrc/torch/ops/conv.cpp; csrc/kernels/conv/) against
torch's CPU results: 1-, 2- and 3-d convolutions with strides, paddings (also padding="same"
with an even kernel, which torch pads asymmetrically first), dilations, groups (depthwise too),
transposed ones with output_padding, with and without bias, channels-last inputs, float16 /
bfloat16, an empty batch; the forward and the three gradients through autograd (every
output_mask torch asks for), each checked to have run without the fallback."""

from __future__ import annotations

from typing import Any

import pytest
from kernel_check import check, torch

pytestmark = pytest.mark.usefixtures("kernels_only")

F = torch.nn.functional

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def run_conv(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None,
    grad: torch.Tensor | None,
    transposed: bool,
    needs: tuple[bool, bool, bool],
    **kw: Any,
) -> list[torch.Tensor | None]:
    """The convolution's output and, where `grad` is given, the gradients `needs` asks for
    (input, weight, bias) through autograd."""
    x = x.detach().requires_grad_(needs[0])
    w = w.detach().requires_grad_(needs[1])
    b = None if b is None else b.detach().requires_grad_(needs[2])
    dims = x.dim() - 2
    out = (CONV_T if transposed else CONV)[dims](x, w, b, **kw)
    if grad is None:
        return [out.detach()]
    out.backward(grad)
    return [out.detach(), x.grad, w.grad, None if b is None else b.grad]


def case(
    dims: int,
    cin: int,
    cout: int,
    k: int,
    size: int,
    dtype: torch.dtype = torch.float32,
    groups: int = 1,
    transposed: bool = False,
    bias: bool = True,
    batch: int = 2,
    **kw: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Random input, weight and bias of a `dims`-d convolution (transposed: its weight layout)."""
    x = torch.randn(batch, cin, *([size] * dims)).to(dtype)
    wshape = (cin, cout // groups) if transposed else (cout, cin // groups)
    w = (torch.randn(*wshape, *([k] * dims)) / (cin // groups * k**dims) ** 0.5).to(dtype)
    b = torch.randn(cout).to(dtype) if bias else None
    return x, w, b


def check_conv(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None,
    kernels: bool,
    transposed: bool = False,
    needs: tuple[bool, bool, bool] = (True, True, True),
    atol: float | None = None,
    rtol: float | None = None,
    **kw: Any,
) -> None:
    """Forward alone, then forward and backward, on the device against the CPU."""
    out = run_conv(x, w, b, None, transposed, needs, **kw)[0]
    grad = torch.randn_like(out)
    check(
        lambda *a: run_conv(*a, transposed, needs, **kw),
        x,
        w,
        b,
        None,
        kernels=kernels,
        atol=atol,
        rtol=rtol,
    )
    check(
        lambda *a: run_conv(*a, transposed, needs, **kw),
        x,
        w,
        b,
        grad,
        kernels=kernels,
        atol=atol,
        rtol=rtol,
    )


# (dims, cin, cout, k, size, keywords): strides, paddings, dilations, groups.
CASES = [
    (1, 3, 5, 3, 11, {}),
    (1, 4, 6, 5, 17, {"stride": 2, "padding": 2, "dilation": 2}),
    (1, 4, 4, 3, 9, {"groups": 4, "padding": 1}),
    (2, 3, 8, 3, 9, {"padding": 1}),
    (2, 4, 6, 3, 10, {"stride": 2}),
    (2, 6, 4, 3, 11, {"stride": (2, 1), "padding": (1, 2), "dilation": (1, 2), "groups": 2}),
    (2, 8, 8, 3, 8, {"groups": 8, "padding": 1}),  # depthwise
    (2, 4, 8, 3, 8, {"groups": 4, "stride": 2, "padding": 1}),  # depthwise, multiplier 2
    (2, 5, 70, 1, 6, {}),  # 1x1, more output channels than one tile
    (2, 40, 3, 2, 7, {"padding": 1}),
    (2, 24, 24, 3, 6, {"padding": 1}),  # the middle tile shape (17..32 rows)
    (3, 2, 4, 3, 6, {"padding": 1}),
    (3, 4, 4, 2, 7, {"stride": 2, "dilation": (1, 2, 1), "groups": 2}),
]


@pytest.mark.parametrize("dims,cin,cout,k,size,kw", CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv(
    device_kernels: bool, dims: int, cin: int, cout: int, k: int, size: int, kw: dict, bias: bool
) -> None:
    x, w, b = case(dims, cin, cout, k, size, groups=kw.get("groups", 1), bias=bias)
    check_conv(x, w, b, device_kernels, atol=2e-5, rtol=2e-5, **kw)


# (dims, cin, cout, k, size, keywords) of transposed convolutions.
CASES_T = [
    (1, 3, 5, 3, 7, {}),
    (1, 4, 6, 4, 6, {"stride": 3, "padding": 1, "output_padding": 2}),
    (2, 4, 6, 3, 5, {"stride": 2, "padding": 1, "output_padding": 1}),
    (2, 4, 4, 3, 5, {"stride": 2, "dilation": 2, "groups": 2}),
    (2, 6, 6, 3, 5, {"groups": 6, "padding": 1}),
    (3, 2, 3, 2, 4, {"stride": 2, "output_padding": (1, 0, 1)}),
]


@pytest.mark.parametrize("dims,cin,cout,k,size,kw", CASES_T)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose(
    device_kernels: bool, dims: int, cin: int, cout: int, k: int, size: int, kw: dict, bias: bool
) -> None:
    x, w, b = case(dims, cin, cout, k, size, groups=kw.get("groups", 1), transposed=True, bias=bias)
    check_conv(x, w, b, device_kernels, transposed=True, atol=2e-5, rtol=2e-5, **kw)


@pytest.mark.parametrize(
    "needs",
    [
        (True, False, False),
        (False, True, False),
        (False, False, True),
        (False, True, True),
        (True, True, False),
    ],
)
def test_output_mask(device_kernels: bool, needs: tuple[bool, bool, bool]) -> None:
    x, w, b = case(2, 4, 6, 3, 7)
    check_conv(x, w, b, device_kernels, needs=needs, atol=2e-5, rtol=2e-5, padding=1)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
def test_padding_same(device_kernels: bool) -> None:
    # An even kernel: torch pads the input asymmetrically, then convolves with padding 1.
    x, w, b = case(2, 3, 4, 4, 9)
    check_conv(x, w, b, device_kernels, atol=2e-5, rtol=2e-5, padding="same")
    x, w, b = case(1, 3, 4, 2, 9)
    check_conv(x, w, b, device_kernels, atol=2e-5, rtol=2e-5, padding="same", dilation=3)


def test_channels_last(device_kernels: bool) -> None:
    x, w, b = case(2, 6, 8, 3, 9)
    x = x.to(memory_format=torch.channels_last)
    got = check(
        lambda *a: run_conv(*a, False, (True, True, True), padding=1),
        x,
        w,
        b,
        None,
        kernels=device_kernels,
        atol=2e-5,
        rtol=2e-5,
    )[0]
    assert got.is_contiguous()  # torch's rule for an out-of-tree device's convolution outputs
    grad = torch.randn(2, 8, 9, 9)
    check(
        lambda *a: run_conv(*a, False, (True, True, True), padding=1),
        x,
        w.to(memory_format=torch.channels_last),
        b,
        grad,
        kernels=device_kernels,
        atol=2e-5,
        rtol=2e-5,
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("transposed", [False, True])
def test_half(device_kernels: bool, dtype: torch.dtype, transposed: bool) -> None:
    # CPU computes half precision convolutions in float32 too; sums of ~30 products.
    x, w, b = case(2, 4, 6, 3, 8, dtype=dtype, transposed=transposed)
    tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    check_conv(
        x,
        w,
        b,
        device_kernels,
        transposed=transposed,
        atol=tol,
        rtol=tol,
        padding=1,
        stride=2 if transposed else 1,
    )


def test_empty_batch(device_kernels: bool) -> None:
    x, w, b = case(2, 3, 4, 3, 6, batch=0)
    check_conv(x, w, b, device_kernels, padding=1)


def test_weight_grad_split(device_kernels: bool) -> None:
    # batch x positions (2 x 64 x 64) spans several splits of the weight gradient's K.
    x, w, b = case(2, 3, 4, 3, 64)
    check_conv(x, w, b, device_kernels, atol=1e-4, rtol=1e-4, padding=1)


def test_declines_to_fallback(device_kernels: bool) -> None:
    # A kernel wider than the kernel's packed geometry takes (255) runs through the fallback.
    x, w, b = case(1, 2, 2, 300, 310)
    torch.mpsrt.reset_fallback_counts()
    got = F.conv1d(x.to("mpsrt"), w.to("mpsrt"), b.to("mpsrt"))
    torch.testing.assert_close(got.cpu(), F.conv1d(x, w, b), atol=1e-4, rtol=1e-4)
    assert torch.mpsrt.fallback_counts().get("aten::convolution", 0) == 1


def _profiled(fn: Any) -> tuple[Any, list[str]]:
    """fn()'s result and the names of the aten ops it dispatched (torch's profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = fn()
    return out, [e.name for e in prof.events()]


def test_the_kernel_sits_at_convolution_itself(device_kernels: bool) -> None:
    # aten::convolution and aten::convolution_backward run the kernel without torch's generic
    # path to the overrideable ops (_convolution, convolution_overrideable), forward and backward.
    x, w, b = case(2, 3, 4, 3, 6)
    xd, wd, bd = (t.to("mpsrt").requires_grad_() for t in (x, w, b))
    torch.mpsrt.reset_fallback_counts()
    out, names = _profiled(lambda: F.conv2d(xd, wd, bd, padding=1))
    assert "aten::convolution" in names
    assert "aten::_convolution" not in names and "aten::convolution_overrideable" not in names
    _, names = _profiled(lambda: out.sum().backward())
    assert "aten::convolution_backward" in names
    assert "aten::convolution_backward_overrideable" not in names
    assert torch.mpsrt.fallback_counts() == {}
    xc, wc, bc = (t.clone().requires_grad_() for t in (x, w, b))
    F.conv2d(xc, wc, bc, padding=1).sum().backward()
    for got, want in ((out, F.conv2d(x, w, b, padding=1)), (xd.grad, xc.grad), (wd.grad, wc.grad)):
        torch.testing.assert_close(got.detach().cpu(), want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_without_autograd_conv_nd_runs_the_kernel_itself(device_kernels: bool, dims: int) -> None:
    # conv1d / conv2d / conv3d's entries above autograd: with nothing for autograd to do (grad
    # mode off, or inference mode), the kernel runs without torch's composition (no
    # aten::convolution dispatched), equal to torch CPU; unbatched inputs take the composition.
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[dims]
    x, w, b = case(dims, 3, 4, 3, 5)
    for ctx in (torch.no_grad, torch.inference_mode):
        with ctx():
            got, names = _profiled(
                lambda: fn(x.to("mpsrt"), w.to("mpsrt"), b.to("mpsrt"), padding=1)
            )
        assert f"aten::conv{dims}d" in names and "aten::convolution" not in names, names
        torch.testing.assert_close(got.cpu(), fn(x, w, b, padding=1), atol=1e-5, rtol=1e-4)
        with ctx():
            got, names = _profiled(lambda: fn(x[0].to("mpsrt"), w.to("mpsrt"), padding=1))
        assert "aten::convolution" in names
        torch.testing.assert_close(got.cpu(), fn(x[0], w, padding=1), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "bad",
    ["output_padding_too_big", "negative_output_padding", "channels", "bias"],
)
def test_bad_arguments_raise_torchs_errors(device_kernels: bool, bad: str) -> None:
    # What the kernel's entry at aten::convolution does not take goes down torch's own path,
    # which raises torch's error, the CPU's text, and leaves the device usable.
    x, w, b = case(2, 4, 4, 3, 6)
    kw: dict[str, Any] = {}
    fn = F.conv2d
    if bad in ("output_padding_too_big", "negative_output_padding"):
        fn = F.conv_transpose2d
        kw = {"stride": 2, "output_padding": 2 if bad == "output_padding_too_big" else -1}
    elif bad == "channels":
        x = x[:, :3]
    elif bad == "bias":
        b = b[:3]

    def run(on: str) -> str:
        args = [t.to(on) for t in (x, w, b)]
        with pytest.raises((RuntimeError, ValueError)) as e:
            fn(*args, **kw)
        return str(e.value)

    assert run("mpsrt") == run("cpu")
    x, w, b = case(2, 4, 4, 3, 6)  # the device still runs convolutions
    check(F.conv2d, x, w, b, kernels=device_kernels, atol=1e-5, rtol=1e-4)
