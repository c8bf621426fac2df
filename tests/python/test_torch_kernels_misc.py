"""The PyTorch device's indexing, loss and optimizer ops on mpsrt's kernels
(csrc/torch/ops/index.cpp, loss.cpp, optim.cpp; csrc/kernels/index/, loss/,
optim/) against torch's CPU results: index_select / embedding (forward and backward, with
repeated indices and padding_idx), gather, scatter_add, cross_entropy through nll_loss
(weights, ignore_index, reductions), mse_loss, the foreach and fused optimizer ops, SGD with
momentum and AdamW steps on a small model, and dropout's reproducibility under a seed."""

from __future__ import annotations

import pytest
from kernel_check import check, torch

# Where the device runs kernels (conftest.kernels_only says why not elsewhere).
pytestmark = pytest.mark.usefixtures("kernels_only")

F = torch.nn.functional

# log_softmax and its backward have their kernels elsewhere (or run through the fallback).
LOG_SOFTMAX = (
    "aten::_log_softmax",
    "aten::_log_softmax.out",
    "aten::_log_softmax_backward_data",
    "aten::_log_softmax_backward_data.out",
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
def test_index_select(device_kernels: bool, dtype: torch.dtype) -> None:
    a = (torch.randn(4, 5, 6) * 100).to(dtype)
    for dim, index in [(0, [3, 0, 3]), (1, [4, 4, 1, 0]), (2, [5]), (-1, [0, 2, 2, 5])]:
        for idt in (torch.int64, torch.int32):
            i = torch.tensor(index, dtype=idt)
            check(lambda x, j, d=dim: torch.index_select(x, d, j), a, i, kernels=device_kernels)
    # A strided source and a 0-dim index.
    check(
        lambda x, j: x.transpose(0, 2).index_select(1, j),
        a,
        torch.tensor([2, 1]),
        kernels=device_kernels,
    )
    check(lambda x, j: x.index_select(0, j), a, torch.tensor(1), kernels=device_kernels)


@pytest.mark.parametrize("idt", [torch.int64, torch.int32])
def test_embedding_forward_backward(device_kernels: bool, idt: torch.dtype) -> None:
    w = torch.randn(10, 7)
    idx = torch.tensor([[1, 2, 1, 9], [0, 9, 1, 1], [2, 2, 2, 5]], dtype=idt)
    g = torch.randn(3, 4, 7)

    def fwd_bwd(
        weight: torch.Tensor, i: torch.Tensor, grad: torch.Tensor, padding_idx: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        weight = weight.detach().requires_grad_()
        out = F.embedding(i, weight, padding_idx=padding_idx)
        out.backward(grad)
        return out.detach(), weight.grad

    check(fwd_bwd, w, idx, g, kernels=device_kernels, atol=1e-5)
    check(lambda *a: fwd_bwd(*a, padding_idx=2), w, idx, g, kernels=device_kernels, atol=1e-5)
    # Half-precision weights gather on the device too (their backward falls back).
    check(lambda x, i: F.embedding(i, x), w.half(), idx, kernels=device_kernels)


def test_gather(device_kernels: bool) -> None:
    a = torch.randn(5, 6, 3)
    i0 = torch.randint(0, 5, (3, 4, 2))
    i1 = torch.randint(0, 6, (5, 9, 3))
    i2 = torch.randint(0, 3, (2, 2, 7))
    check(lambda x, i: torch.gather(x, 0, i), a, i0, kernels=device_kernels)
    check(lambda x, i: torch.gather(x, 1, i), a, i1, kernels=device_kernels)
    check(lambda x, i: torch.gather(x, -1, i), a, i2, kernels=device_kernels)
    check(
        lambda x, i: torch.gather(x.transpose(0, 1), 1, i),
        a,
        torch.randint(0, 5, (6, 4, 3)),
        kernels=device_kernels,
    )
    check(lambda x, i: torch.gather(x.long(), 1, i), a * 1000, i1, kernels=device_kernels)

    def out_form(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        o = torch.empty(i.shape, device=x.device)
        torch.gather(x, 1, i, out=o)
        return o

    check(out_form, a, i1, kernels=device_kernels)


def test_scatter_add(device_kernels: bool) -> None:
    # Many repeated indices: every target row is added to by ~20 sources.
    self = torch.randn(3, 4)
    src = torch.randn(60, 5)
    index = torch.randint(0, 3, (60, 4))
    check(
        lambda s, i, x: s.scatter_add(0, i, x), self, index, src, kernels=device_kernels, atol=1e-5
    )

    def inplace(s: torch.Tensor, i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        s = s.clone()
        s.scatter_add_(1, i, x)
        return s

    check(
        inplace,
        torch.randn(6, 3),
        torch.randint(0, 3, (5, 40)),
        torch.randn(5, 40),
        kernels=device_kernels,
        atol=1e-5,
    )

    def strided(s: torch.Tensor, i: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        s = s.clone()
        s[:, ::2].scatter_add_(0, i, x)  # a view with strides (8, 2)
        return s

    check(
        strided,
        torch.randn(5, 8),
        torch.randint(0, 5, (30, 4)),
        torch.randn(30, 4),
        kernels=device_kernels,
        atol=1e-5,
    )
    ints = torch.randint(-50, 50, (4, 8), dtype=torch.int32)
    check(
        lambda s, i, x: torch.scatter_add(s, 1, i, x),
        ints,
        torch.randint(0, 8, (4, 30)),
        torch.randint(-9, 9, (4, 30), dtype=torch.int32),
        kernels=device_kernels,
    )


def cross_entropy_fwd_bwd(
    logits: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None,
    grad: torch.Tensor,
    **kw: object,
) -> tuple[torch.Tensor, ...]:
    """cross_entropy's loss and its gradient for the logits (grad: the loss's gradient)."""
    x = logits.detach().requires_grad_()
    loss = F.cross_entropy(x, target, weight=weight, **kw)
    loss.backward(grad.reshape(loss.shape))
    return loss.detach(), x.grad


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(device_kernels: bool, reduction: str) -> None:
    logits = torch.randn(9, 5) * 3
    target = torch.tensor([0, 1, 4, 2, -100, 3, 3, 1, 0])
    weight = torch.rand(5) + 0.5
    grad = torch.linspace(0.5, 1.5, 9) if reduction == "none" else torch.tensor(0.7)
    for w in (None, weight):
        check(
            lambda x, t, ww, g: cross_entropy_fwd_bwd(x, t, ww, g, reduction=reduction),
            logits,
            target,
            w,
            grad,
            kernels=device_kernels,
            fallbacks=LOG_SOFTMAX,
            atol=1e-5,
        )
    # A custom ignore_index, and an input without a batch dim.
    t2 = torch.tensor([0, 1, 4, 2, 2, 3, 2, 1, 0])
    check(
        lambda x, t, ww, g: cross_entropy_fwd_bwd(x, t, ww, g, reduction=reduction, ignore_index=2),
        logits,
        t2,
        weight,
        grad,
        kernels=device_kernels,
        fallbacks=LOG_SOFTMAX,
        atol=1e-5,
    )
    check(
        lambda x, t, g: cross_entropy_fwd_bwd(x, t, None, g, reduction=reduction),
        logits[0],
        torch.tensor(3),
        torch.tensor(0.7),
        kernels=device_kernels,
        fallbacks=LOG_SOFTMAX,
        atol=1e-5,
    )


def test_nll_loss_direct(device_kernels: bool) -> None:
    x = torch.randn(7, 4)
    t = torch.tensor([3, 0, 1, 1, 2, 0, 3])
    for reduction in ("mean", "sum", "none"):
        check(lambda a, b, r=reduction: F.nll_loss(a, b, reduction=r), x, t, kernels=device_kernels)
    # Strided input, every target ignored (mean: 0 / 0).
    check(
        lambda a, b: F.nll_loss(a.t(), b, ignore_index=1),
        x.t().contiguous(),
        torch.ones(7, dtype=torch.long),
        kernels=device_kernels,
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(device_kernels: bool, reduction: str) -> None:
    def fwd_bwd(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = a.detach().requires_grad_()
        loss = F.mse_loss(a, b, reduction=reduction)
        loss.backward(torch.full_like(loss, 0.7))
        return loss.detach(), a.grad

    torch.manual_seed(0)
    a, b = torch.randn(6, 5, 3), torch.randn(6, 5, 3)
    check(fwd_bwd, a, b, kernels=device_kernels, atol=1e-5)
    check(
        lambda x, y: fwd_bwd(x.transpose(0, 2), y.transpose(0, 2)),
        a,
        b,
        kernels=device_kernels,
        atol=1e-5,
    )
    # float16: torch's CPU kernel rounds a - b to half before squaring, the device rounds once
    # (2 ulps apart at most).
    check(
        lambda x, y: F.mse_loss(x, y, reduction=reduction),
        a.half(),
        b.half(),
        kernels=device_kernels,
        rtol=2e-3,
    )


def test_foreach_ops(device_kernels: bool) -> None:
    xs = [torch.randn(5, 3), torch.randn(17)]
    ys = [torch.randn(5, 3), torch.randn(17)]
    zs = [torch.rand(5, 3) + 0.5, torch.rand(17) + 0.5]

    def run(x: list, y: list, z: list) -> list:
        x = [t.clone() for t in x]
        torch._foreach_lerp_(x, y, 0.1)
        torch._foreach_lerp_(x, y, 0.8)
        torch._foreach_lerp_(x, y, z)
        torch._foreach_addcmul_(x, y, z, 0.3)
        torch._foreach_addcmul_(x, y, z, [0.5, -2.0])
        torch._foreach_addcdiv_(x, y, z, -0.25)
        torch._foreach_addcdiv_(x, y, z, [1.5, 0.5])
        torch._foreach_maximum_(x, y)
        roots = torch._foreach_sqrt(z)
        z = [t.clone() for t in z]
        torch._foreach_sqrt_(z)
        return [*x, *roots, *z]

    check(run, xs, ys, zs, kernels=device_kernels, atol=1e-5)


def train(device: str, make_opt, kernels: bool = False, steps: int = 3) -> list[torch.Tensor]:
    """`steps` optimizer steps on a small model on `device` (the same init everywhere); where
    the device runs kernels (`kernels`), asserts that the steps ran without the fallback (the
    forward and backward passes may use it)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(device)
    x = torch.randn(16, 8).to(device)
    y = torch.randn(16, 4).to(device)
    opt = make_opt(model.parameters())
    for _ in range(steps):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        torch.mpsrt.reset_fallback_counts()
        opt.step()
        if kernels:
            assert torch.mpsrt.fallback_counts() == {}, torch.mpsrt.fallback_counts()
    return [p.detach().cpu() for p in model.parameters()]


OPTIMIZERS = {
    "sgd": lambda p, **kw: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, **kw),
    "sgd-plain-maximize": lambda p, **kw: torch.optim.SGD(p, lr=0.1, maximize=True, **kw),
    "sgd-nesterov-wd": lambda p, **kw: torch.optim.SGD(
        p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, **kw
    ),
    "adamw": lambda p, **kw: torch.optim.AdamW(p, lr=0.01, **kw),
    "adamw-amsgrad": lambda p, **kw: torch.optim.AdamW(p, lr=0.01, amsgrad=True, **kw),
    "adam-wd-maximize": lambda p, **kw: torch.optim.Adam(
        p, lr=0.01, weight_decay=0.1, maximize=True, **kw
    ),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("fused", [False, True])
def test_optimizer_steps(device_kernels: bool, name: str, fused: bool) -> None:
    make = OPTIMIZERS[name]
    expected = train("cpu", make)
    got = train("mpsrt", lambda p: make(p, fused=True) if fused else make(p), device_kernels)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


def test_dropout_reproducible(device_kernels: bool) -> None:
    x = torch.randn(4000, device="mpsrt")
    torch.mpsrt.reset_fallback_counts()
    torch.mpsrt.manual_seed(123)
    a = F.dropout(x, 0.4, training=True)
    torch.mpsrt.manual_seed(123)
    b = F.dropout(x, 0.4, training=True)
    c = F.dropout(x, 0.4, training=True)
    if device_kernels:
        assert torch.mpsrt.fallback_counts() == {}
    a, b, c, xc = a.cpu(), b.cpu(), c.cpu(), x.cpu()
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    kept = a != 0
    assert 0.5 < kept.float().mean().item() < 0.7
    torch.testing.assert_close(a[kept], xc[kept] / 0.6)
