"""The PyTorch device's pooling and resampling ops on mpsrt's pool kernels
(csrc/torch/ops/pool.cpp; csrc/kernels/pool/) against torch's CPU results: max pool 1/2/3-d
with indices (padding, stride, dilation, ceil_mode, NaN), average pool (count_include_pad,
divisor_override, ceil_mode), adaptive average and max pool, and upsampling (nearest,
nearest-exact, linear, bilinear, trilinear, bicubic; align_corners both ways, explicit
scales), forward and the input's gradient through autograd, in float32 / float16 / bfloat16,
contiguous and channels-last, each checked to have run without the fallback."""

from __future__ import annotations

from functools import partial

import pytest
from kernel_check import assert_close, check, torch

# Where the device runs kernels (conftest.kernels_only says why not elsewhere).
pytestmark = pytest.mark.usefixtures("kernels_only")

F = torch.nn.functional
FLOATS = [torch.float32, torch.float16, torch.bfloat16]


def fwd_bwd(fn, x: torch.Tensor, g: torch.Tensor | None = None):
    """fn(x) and the gradient of x for grad_output g (random, fixed by the seed) or of
    fn(x)[0] where fn returns (values, indices)."""
    x = x.detach().requires_grad_()
    out = fn(x)
    values = out[0] if isinstance(out, tuple) else out
    grad = torch.linspace(-1, 1, values.numel(), dtype=torch.float32).reshape(values.shape)
    values.backward(grad.to(values.dtype).to(values.device))
    return out, x.grad


def check_grad(fn, x: torch.Tensor, kernels: bool, atol: float | None = None) -> None:
    """fn(x) and x's gradient on the device equal torch CPU's (and ran on kernels)."""
    check(lambda t: fwd_bwd(fn, t), x, kernels=kernels, atol=atol)


def check_upcast(fn, x: torch.Tensor, kernels: bool) -> None:
    """fn on x's mpsrt copy against fn on x in float32 on the CPU, rounded to x's dtype (for
    ops torch's CPU kernels lack in float16 / bfloat16)."""
    out, grad = fwd_bwd(fn, x.float())
    torch.mpsrt.reset_fallback_counts()
    got = fwd_bwd(fn, x.to("mpsrt"))
    if kernels:
        assert torch.mpsrt.fallback_counts() == {}
    assert_close(got, (out.to(x.dtype), grad.to(x.dtype)))


def channels_last(x: torch.Tensor, nd: int) -> torch.Tensor:
    """x in channels-last order where it is batched [N, C, H, W] or [N, C, D, H, W]."""
    if x.dim() != nd + 2:
        return x
    if x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    if x.dim() == 5:
        return x.contiguous(memory_format=torch.channels_last_3d)
    return x


def data(shape, dtype, layout, nd):
    x = torch.randn(*shape).to(dtype)
    return channels_last(x, nd) if layout == "channels_last" else x


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_max_pool(device_kernels: bool, dtype: torch.dtype, layout: str) -> None:
    cases = [
        (1, (2, 3, 11), dict(kernel_size=3, stride=2, padding=1)),
        (1, (3, 9), dict(kernel_size=2, dilation=2, ceil_mode=True)),
        (2, (2, 3, 9, 8), dict(kernel_size=3, stride=2, padding=1)),
        (
            2,
            (2, 3, 10, 7),
            dict(kernel_size=(3, 2), stride=(2, 1), dilation=(2, 1), ceil_mode=True),
        ),
        (2, (3, 7, 7), dict(kernel_size=2)),
        (3, (2, 2, 5, 6, 7), dict(kernel_size=2, stride=(1, 2, 2), padding=1, ceil_mode=True)),
        (3, (2, 5, 6, 6), dict(kernel_size=3, stride=2, dilation=(1, 2, 1))),
    ]
    for nd, shape, kw in cases:
        fn = getattr(F, f"max_pool{nd}d")
        x = data(shape, dtype, layout, nd)
        check_grad(partial(fn, return_indices=True, **kw), x, device_kernels)


def test_max_pool_nan_and_ties(device_kernels: bool) -> None:
    # NaN wins (its index, the last NaN's), equal values keep the first; -inf windows index
    # their first element.
    x = torch.tensor(
        [
            [
                [
                    [1.0, float("nan"), 3.0, 3.0],
                    [float("nan"), 0.0, 3.0, 2.0],
                    [-float("inf"), -float("inf"), 5.0, 5.0],
                ]
            ]
        ]
    )
    out = check(
        lambda t: fwd_bwd(lambda u: F.max_pool2d(u, 2, 1, return_indices=True), t),
        x,
        kernels=device_kernels,
    )
    assert out[0][1].dtype == torch.int64
    check_grad(
        partial(F.adaptive_max_pool2d, output_size=(2, 3), return_indices=True), x, device_kernels
    )
    check_grad(
        partial(F.max_pool2d, kernel_size=2, padding=1, return_indices=True), x, device_kernels
    )


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_avg_pool(device_kernels: bool, dtype: torch.dtype, layout: str) -> None:
    cases = [
        (1, (2, 3, 11), dict(kernel_size=3, stride=2, padding=1)),
        (
            1,
            (3, 10),
            dict(kernel_size=4, stride=3, padding=2, ceil_mode=True, count_include_pad=False),
        ),
        (2, (2, 3, 9, 8), dict(kernel_size=3, stride=2, padding=1)),
        (
            2,
            (2, 3, 9, 8),
            dict(kernel_size=3, stride=2, padding=1, count_include_pad=False, ceil_mode=True),
        ),
        (2, (3, 7, 7), dict(kernel_size=(2, 3), divisor_override=5)),
        (3, (2, 2, 5, 6, 7), dict(kernel_size=2, stride=(1, 2, 2), padding=1, ceil_mode=True)),
        (
            3,
            (2, 5, 6, 6),
            dict(kernel_size=3, stride=2, padding=1, count_include_pad=False, divisor_override=7),
        ),
    ]
    for nd, shape, kw in cases:
        fn = getattr(F, f"avg_pool{nd}d")
        x = data(shape, dtype, layout, nd)
        if nd == 3 and dtype != torch.float32:  # no float16 / bfloat16 avg_pool3d on CPU
            check_upcast(partial(fn, **kw), x, device_kernels)
            continue
        check_grad(partial(fn, **kw), x, device_kernels)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_adaptive_pool(device_kernels: bool, dtype: torch.dtype, layout: str) -> None:
    cases = [
        (1, (2, 3, 11), 4),
        (1, (3, 5), 7),
        (2, (2, 3, 9, 8), (4, 3)),
        (2, (3, 5, 7), (7, 10)),
        (3, (2, 2, 5, 6, 7), (3, 2, 4)),
        (3, (2, 3, 4, 5), (5, 2, 3)),
    ]
    for nd, shape, size in cases:
        x = data(shape, dtype, layout, nd)
        avg = getattr(F, f"adaptive_avg_pool{nd}d")
        mx = getattr(F, f"adaptive_max_pool{nd}d")
        check_grad(partial(avg, output_size=size), x, device_kernels)
        check_grad(partial(mx, output_size=size, return_indices=True), x, device_kernels)


INTERPOLATIONS = [
    ("nearest", (2, 3, 7), dict(size=12)),
    ("nearest", (2, 3, 5, 6), dict(scale_factor=(2, 1.5))),
    ("nearest", (2, 3, 8, 9), dict(size=(3, 4))),
    ("nearest", (1, 2, 3, 4, 5), dict(scale_factor=(1.5, 2, 0.5))),
    ("nearest-exact", (2, 3, 7), dict(scale_factor=1.7)),
    ("nearest-exact", (2, 3, 5, 6), dict(size=(9, 4))),
    ("nearest-exact", (1, 2, 3, 4, 5), dict(size=(5, 3, 8))),
    ("linear", (2, 3, 7), dict(size=12)),
    ("linear", (2, 3, 9), dict(scale_factor=0.6)),
    ("bilinear", (2, 3, 5, 6), dict(size=(9, 4))),
    ("bilinear", (2, 3, 5, 6), dict(scale_factor=(2.5, 1.5))),
    ("bilinear", (2, 3, 8, 9), dict(scale_factor=0.5, recompute_scale_factor=True)),
    ("trilinear", (1, 2, 3, 4, 5), dict(size=(5, 3, 8))),
    ("trilinear", (1, 2, 3, 4, 5), dict(scale_factor=(1.5, 2, 0.5))),
    ("bicubic", (2, 3, 5, 6), dict(size=(9, 4))),
    ("bicubic", (2, 3, 5, 6), dict(scale_factor=(2.5, 1.5))),
    ("bicubic", (1, 2, 9, 8), dict(size=(4, 3))),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_interpolate(device_kernels: bool, dtype: torch.dtype, layout: str) -> None:
    for mode, shape, kw in INTERPOLATIONS:
        x = data(shape, dtype, layout, len(shape) - 2)
        aligns = [False, True] if mode in ("linear", "bilinear", "trilinear", "bicubic") else [None]
        for align in aligns:
            args = dict(kw, mode=mode, align_corners=align)
            # float32 gradients sum many weighted terms in another order than torch CPU's.
            atol = 1e-5 if dtype == torch.float32 else None
            check_grad(partial(F.interpolate, **args), x, device_kernels, atol=atol)


@pytest.mark.filterwarnings("ignore:.*upsample_nearest.*is deprecated")
def test_upsample_nearest_and_strided(device_kernels: bool) -> None:
    # F.upsample_nearest, a strided (transposed) input, and grad_output with zero strides.
    x = torch.randn(2, 3, 4, 5)
    check(
        lambda t: fwd_bwd(lambda u: F.upsample_nearest(u, scale_factor=2), t),
        x,
        kernels=device_kernels,
    )
    check(
        lambda t: F.interpolate(t.transpose(2, 3), size=(7, 3), mode="bilinear"),
        x,
        kernels=device_kernels,
    )

    def summed(t: torch.Tensor) -> torch.Tensor:
        t = t.detach().requires_grad_()
        F.max_pool2d(t, 2).sum().backward()
        F.avg_pool2d(t, 3, 1, 1).sum().backward()
        return t.grad

    check(summed, x, kernels=device_kernels)


def test_declines_to_the_fallback(device_kernels: bool) -> None:
    # float64 is not a kernel dtype: the op runs through the fallback and still agrees.
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64)
    check(lambda t: F.max_pool2d(t, 2), x, kernels=False)
    torch.mpsrt.reset_fallback_counts()
    F.max_pool2d(x.to("mpsrt"), 2)
    assert "aten::max_pool2d_with_indices" in torch.mpsrt.fallback_counts()
    # Bad arguments raise torch's errors.
    with pytest.raises(RuntimeError, match="pad should be"):
        F.max_pool2d(torch.randn(1, 1, 4, 4, device="mpsrt"), 2, padding=2)


def test_long_windows_decline(device_kernels: bool) -> None:
    # A window (or, backward, the outputs reaching an element) longer than one invocation may
    # loop declines to the fallback, which agrees with torch CPU.
    x = torch.randn(1, 2, 200, 100)
    check(lambda t: F.adaptive_avg_pool2d(t, (1, 2)), x, kernels=False)
    assert "aten::_adaptive_avg_pool2d" in torch.mpsrt.fallback_counts()
    small = torch.randn(1, 1, 2, 2)
    check_grad(partial(F.interpolate, size=(300, 300)), small, kernels=False)
    counts = torch.mpsrt.fallback_counts()
    assert "aten::upsample_nearest2d_backward" in counts
    assert "aten::upsample_nearest2d" not in counts
