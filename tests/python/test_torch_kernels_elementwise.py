"""The PyTorch device's element-wise ops on mpsrt's kernels (csrc/torch/elementwise_ops.cpp,
csrc/kernels/elementwise.comp), against torch's CPU results: broadcasting, strides, scalars,
type promotion, in-place and out= forms."""

from __future__ import annotations

import pytest
from kernel_check import check, torch

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


def test_unary(device_kernels: bool) -> None:
    a = torch.randn(33, 17)
    check(lambda x: -x, a, kernels=device_kernels)
    check(torch.relu, a, kernels=device_kernels)
