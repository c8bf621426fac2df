"""The PyTorch device's scans, sorts, sampling and indexed reads and writes on mpsrt's kernels
(csrc/torch/ops/scan.cpp, sort.cpp, index.cpp; csrc/kernels/scan/, sort/, index/) against
torch's CPU results: cumsum / cumprod along any dim (float and integer dtypes, rows longer than
one segment), sort / argsort / topk (stable order of ties, NaN, descending, rows short enough
for shared memory and vocabulary-sized rows merged in global memory), multinomial's draws
(chi-square against the probabilities, reproducible under a seed), a top-k / top-p sampling
step, scatter and scatter_reduce, advanced indexing (index.Tensor, index_put_ with and without
accumulation, bool masks), masked_scatter and embedding_bag (forward and backward). The suite
runs on every backend the machine has; run it also with MPSRT_VULKAN_MEMORY=discrete for the
discrete memory model."""

from __future__ import annotations

import pytest
from kernel_check import check, torch

# Where the device runs kernels (conftest.kernels_only says why not elsewhere).
pytestmark = pytest.mark.usefixtures("kernels_only")

F = torch.nn.functional
FLOATS = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", [*FLOATS, torch.int64, torch.int32, torch.bool])
def test_cumsum(device_kernels: bool, dtype: torch.dtype) -> None:
    a = (torch.randn(3, 5, 7) * 4).to(dtype)
    tol = {"atol": 2e-5, "rtol": 1e-5} if dtype == torch.float32 else {}
    for dim in (0, 1, 2, -1):
        check(lambda x, d=dim: torch.cumsum(x, d), a, kernels=device_kernels, **tol)
    # A strided input, an explicit dtype, and the in-place and out= forms.
    check(lambda x: x.transpose(0, 2).cumsum(1), a, kernels=device_kernels, **tol)
    if dtype.is_floating_point:
        check(lambda x: x.cumsum(1, dtype=torch.float32), a, kernels=device_kernels, atol=1e-4)
        check(lambda x: x.clone().cumsum_(2), a, kernels=device_kernels, **tol)
    check(
        lambda x: torch.cumsum(x, 0, out=torch.empty(x.shape, dtype=torch.int64, device=x.device)),
        a.long(),
        kernels=device_kernels,
    )


def test_cumsum_long_rows(device_kernels: bool) -> None:
    # Rows of several segments (2048 elements each): the totals pass, then the scan.
    a = torch.randn(3, 5000)
    check(lambda x: torch.cumsum(x, 1), a, kernels=device_kernels, atol=2e-4, rtol=1e-4)
    i = torch.randint(-1000, 1000, (7000, 2))
    check(lambda x: torch.cumsum(x, 0), i, kernels=device_kernels)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_cumprod(device_kernels: bool, dtype: torch.dtype) -> None:
    a = (
        (torch.rand(4, 6, 5) + 0.5).to(dtype)
        if dtype.is_floating_point
        else torch.randint(-3, 4, (4, 6, 5))
    )
    for dim in (0, 1, -1):
        check(
            lambda x, d=dim: torch.cumprod(x, d),
            a,
            kernels=device_kernels,
            rtol=2e-3 if dtype == torch.float16 else 1e-5,
        )


def test_cumsum_grad(device_kernels: bool) -> None:
    a = torch.randn(4, 9)

    def fwd_bwd(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.detach().requires_grad_()
        y = x.cumsum(1)
        (y * w).sum().backward()
        return y.detach(), x.grad

    check(
        fwd_bwd, a, torch.arange(9.0), kernels=device_kernels, atol=1e-4, fallbacks=("aten::flip",)
    )


def with_ties(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Values with many ties (small integers), a NaN and -0.0 / +0.0 where floats."""
    a = torch.randint(-5, 6, shape).to(dtype)
    if dtype.is_floating_point:
        flat = a.view(-1)
        flat[1] = float("nan")
        flat[2] = -0.0
    return a


@pytest.mark.parametrize("dtype", [*FLOATS, torch.int64, torch.int32, torch.uint8, torch.bool])
def test_sort(device_kernels: bool, dtype: torch.dtype) -> None:
    a = with_ties((4, 37, 6), dtype) if dtype != torch.bool else torch.rand(4, 37, 6) > 0.5
    for dim in (0, 1, -1):
        for desc in (False, True):
            check(
                lambda x, d=dim, s=desc: torch.sort(x, dim=d, descending=s, stable=True),
                a,
                kernels=device_kernels,
            )
            check(
                lambda x, d=dim, s=desc: torch.argsort(x, dim=d, descending=s, stable=True),
                a,
                kernels=device_kernels,
            )
    check(lambda x: x.transpose(0, 1).sort(dim=1).values, a, kernels=device_kernels)


@pytest.mark.parametrize("n", [1024, 1500, 50257])
def test_sort_long_rows(device_kernels: bool, n: int) -> None:
    # Rows past one shared-memory block: bitonic steps in global memory.
    a = torch.randn(2, n)
    a[0, 5] = float("nan")
    a[1, :100] = 0.5  # ties keep their order
    check(lambda x: torch.sort(x, dim=1, stable=True), a, kernels=device_kernels)
    check(lambda x: torch.sort(x, dim=1, descending=True, stable=True), a, kernels=device_kernels)
    check(lambda x: torch.topk(x, 50, dim=1), a, kernels=device_kernels)


def test_sort_out_and_grad(device_kernels: bool) -> None:
    a = torch.randn(5, 8)

    def out_form(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v, i = torch.empty_like(x), torch.empty(x.shape, dtype=torch.long, device=x.device)
        torch.sort(x, 1, out=(v, i))
        return v, i

    check(out_form, a, kernels=device_kernels)

    def fwd_bwd(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.detach().requires_grad_()
        v = x.sort(1).values
        t = x.topk(3, 1).values
        (v * w).sum().add(t.sum()).backward()
        return v.detach(), x.grad

    check(fwd_bwd, a, torch.arange(8.0), kernels=device_kernels, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_topk(device_kernels: bool, dtype: torch.dtype) -> None:
    a = torch.randperm(6 * 40).reshape(6, 40).to(dtype)  # distinct values: one right answer
    for k, dim, largest in [
        (5, 1, True),
        (5, 1, False),
        (3, 0, True),
        (40, -1, True),
        (0, 1, True),
    ]:
        check(lambda x, k=k, d=dim, g=largest: torch.topk(x, k, d, g), a, kernels=device_kernels)
    with pytest.raises(RuntimeError, match="k out of range"):
        torch.topk(a.to("mpsrt"), 41, 1)


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs / probs.sum() * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def test_multinomial_with_replacement(device_kernels: bool) -> None:
    probs = torch.tensor([[0.1, 0.0, 0.2, 0.3, 0.4], [5.0, 1.0, 0.0, 1.0, 3.0]])
    torch.mpsrt.manual_seed(1)
    torch.mpsrt.reset_fallback_counts()
    s = torch.multinomial(probs.to("mpsrt"), 20000, replacement=True)
    assert torch.mpsrt.fallback_counts() == {}, torch.mpsrt.fallback_counts()
    assert s.shape == (2, 20000) and s.dtype == torch.int64
    torch.mpsrt.manual_seed(1)
    assert torch.equal(s.cpu(), torch.multinomial(probs.to("mpsrt"), 20000, True).cpu())
    for r in range(2):
        counts = torch.bincount(s[r].cpu(), minlength=5).double()
        assert counts[probs[r] == 0].sum() == 0  # never a category of probability 0
        nz = probs[r] > 0
        # 3 degrees of freedom: chi-square below 16.27 with probability 0.999.
        assert chi_square(counts[nz], probs[r][nz].double()) < 16.27


def test_multinomial_without_replacement(device_kernels: bool) -> None:
    probs = torch.tensor([0.5, 0.25, 0.0, 0.125, 0.125])
    torch.mpsrt.manual_seed(3)
    torch.mpsrt.reset_fallback_counts()
    firsts = torch.multinomial(probs.to("mpsrt").expand(4000, 5), 4, replacement=False).cpu()
    assert torch.mpsrt.fallback_counts() == {}, torch.mpsrt.fallback_counts()
    # Each row's draws are distinct categories of nonzero probability.
    assert (firsts != 2).all()
    assert (firsts.sort(1).values == torch.tensor([0, 1, 3, 4])).all()
    counts = torch.bincount(firsts[:, 0], minlength=5).double()[[0, 1, 3, 4]]
    assert chi_square(counts, torch.tensor([0.5, 0.25, 0.125, 0.125]).double()) < 16.27
    one = torch.multinomial(probs.to("mpsrt"), 1)
    assert one.shape == (1,) and int(one) != 2


def test_multinomial_bad_input(device_kernels: bool) -> None:
    d = torch.tensor([0.5, -0.1, 0.6], device="mpsrt")
    with pytest.raises(RuntimeError, match="element < 0"):
        torch.multinomial(d, 2)
    with pytest.raises(RuntimeError, match="without replacement"):
        torch.multinomial(d.abs(), 4)
    with pytest.raises(RuntimeError, match="sum of probabilities"):
        torch.multinomial(torch.zeros(3, device="mpsrt"), 1)
    with pytest.raises(RuntimeError, match="not enough"):
        torch.multinomial(torch.tensor([0.5, 0.0, 0.5], device="mpsrt"), 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_scatter(device_kernels: bool, dtype: torch.dtype) -> None:
    a = (torch.randn(4, 6, 3) * 10).to(dtype)
    src = (torch.randn(4, 6, 3) * 10).to(dtype)
    # Distinct positions per scatter (repeated ones leave one write unspecified).
    i1 = torch.stack([torch.randperm(6)[:4] for _ in range(12)]).reshape(4, 3, 4).transpose(1, 2)
    check(lambda x, i, s: torch.scatter(x, 1, i, s), a, i1, src, kernels=device_kernels)
    check(lambda x, i: x.clone().scatter_(1, i, 2.5), a, i1, kernels=device_kernels)
    i0 = torch.randperm(4)[:3].reshape(3, 1, 1).expand(3, 2, 3).contiguous()
    check(lambda x, i, s: x.scatter(0, i, s), a, i0, src, kernels=device_kernels)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_index_tensor(device_kernels: bool, dtype: torch.dtype) -> None:
    a = (torch.randn(5, 6, 7) * 10).to(dtype)
    i = torch.tensor([[4, 0], [-1, 2]])
    j = torch.tensor([1, 5])
    check(lambda x, i: x[i], a, i, kernels=device_kernels)
    check(lambda x, i, j: x[:, i, j], a, i, j, kernels=device_kernels)  # adjacent
    check(lambda x, i, j: x[i, :, j], a, i, j, kernels=device_kernels)  # apart: index dims first
    check(lambda x, j: x.transpose(0, 2)[..., j - 1], a, j, kernels=device_kernels)
    # Swin's relative position bias: a table gathered by a [N*N] index, then viewed.
    table = torch.randn(49, 3).to(dtype)
    rel = torch.randint(0, 49, (16, 16))
    check(lambda t, r: t[r.view(-1)].view(16, 16, -1), table, rel, kernels=device_kernels)
    # A bool mask (its nonzero positions, read on the host) and an index out of range.
    mask = torch.rand(5, 6) > 0.5
    check(lambda x, m: x[m], a, mask, kernels=device_kernels, fallbacks=("aten::nonzero",))
    with pytest.raises(IndexError, match="out of range"):
        a.to("mpsrt")[torch.tensor([5], device="mpsrt")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
def test_index_put(device_kernels: bool, dtype: torch.dtype) -> None:
    a = (torch.randn(5, 6, 4) * 10).to(dtype)
    v = (torch.randn(3, 4) * 10).to(dtype)
    i = torch.tensor([4, 0, 2])
    j = torch.tensor([1, 5, 1])
    check(lambda x, i, j, v: x.index_put((i, j), v), a, i, j, v, kernels=device_kernels)

    def put_slice(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[:, i] = v[0]
        return y

    check(put_slice, a, i, v, kernels=device_kernels)
    check(
        lambda x, i: x.index_put((i,), torch.ones((), dtype=x.dtype, device=x.device)),
        a,
        i,
        kernels=device_kernels,
        fallbacks=("aten::ones",),
    )
    if dtype != torch.float16:
        # Repeated positions add up where accumulate.
        r = torch.tensor([1, 1, 3])
        check(
            lambda x, i, j, v: x.index_put((i, j), v, accumulate=True),
            a,
            r,
            j,
            v,
            kernels=device_kernels,
            atol=1e-5,
        )
    mask = torch.rand(5, 6) > 0.5
    check(
        lambda x, m: x.masked_fill(m.unsqueeze(-1), 0).index_put((m,), x[m] * 2),
        a,
        mask,
        kernels=device_kernels,
        fallbacks=("aten::nonzero",),
    )


def test_index_put_grad(device_kernels: bool) -> None:
    def fwd_bwd(x: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.detach().requires_grad_()
        y = x[i] * 3
        y.sum().backward()
        return y.detach(), x.grad

    check(
        fwd_bwd,
        torch.randn(6, 4),
        torch.tensor([0, 3, 3, 5]),
        kernels=device_kernels,
        fallbacks=("aten::new_zeros", "aten::zeros_like"),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_masked_scatter(device_kernels: bool, dtype: torch.dtype) -> None:
    a = (torch.randn(4, 5) * 10).to(dtype)
    src = (torch.randn(30) * 10).to(dtype)
    mask = torch.rand(4, 5) > 0.4
    check(lambda x, m, s: x.masked_scatter(m, s), a, mask, src, kernels=device_kernels)
    check(lambda x, m, s: x.masked_scatter(m[0], s), a, mask, src, kernels=device_kernels)
    with pytest.raises(RuntimeError, match="at least as many"):
        a.to("mpsrt").masked_scatter(mask.to("mpsrt"), src[:2].to("mpsrt"))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(device_kernels: bool, mode: str) -> None:
    w = torch.randn(10, 5)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 0])
    off = torch.tensor([0, 3, 3, 7])  # bag 1 is empty

    def fwd_bwd(
        weight: torch.Tensor, i: torch.Tensor, o: torch.Tensor, g: torch.Tensor, **kw: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        weight = weight.detach().requires_grad_()
        out = F.embedding_bag(i, weight, o, mode=mode, **kw)
        out.backward(g)
        return out.detach(), weight.grad

    g = torch.randn(4, 5)
    check(fwd_bwd, w, idx, off, g, kernels=device_kernels, atol=1e-5)
    check(lambda *a: fwd_bwd(*a, padding_idx=4), w, idx, off, g, kernels=device_kernels, atol=1e-5)
    check(
        lambda *a: fwd_bwd(*a, include_last_offset=True),
        w,
        idx,
        torch.tensor([0, 3, 3, 7, 10]),
        g,
        kernels=device_kernels,
        atol=1e-5,
    )
    # 2-D input: bags of equal size (their offsets from arange, not an op here); half-precision
    # weights (forward only).
    check(
        lambda x, i: F.embedding_bag(i, x, mode=mode),
        w.half(),
        idx.view(2, 5),
        kernels=device_kernels,
        fallbacks=("aten::arange.start_out",),
    )
    # Strided indices and offsets (every other element).
    check(
        lambda x, i, o: F.embedding_bag(i[::2], x, o[::2], mode=mode),
        w,
        idx.repeat_interleave(2),
        torch.tensor([0, 9, 3, 9, 3, 9, 7, 9]),
        kernels=device_kernels,
    )
    if mode == "sum":
        psw = torch.rand(10)
        check(
            lambda x, i, o, p: F.embedding_bag(i, x, o, mode="sum", per_sample_weights=p),
            w,
            idx,
            off,
            psw,
            kernels=device_kernels,
            atol=1e-5,
        )


def test_top_k_top_p_sampling(device_kernels: bool) -> None:
    # A generation step's filtering and draw on vocabulary-sized rows, all on kernels.
    logits = torch.randn(2, 50257, device="mpsrt")
    torch.mpsrt.reset_fallback_counts()
    kth = torch.topk(logits, 50)[0][..., -1, None]
    scores = logits.masked_fill(logits < kth, -float("inf"))
    sorted_logits, sorted_indices = torch.sort(scores, descending=False)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cum <= 1 - 0.9
    remove[..., -1:] = 0
    remove = remove.scatter(1, sorted_indices, remove)
    probs = scores.masked_fill(remove, -float("inf")).softmax(dim=-1)
    token = torch.multinomial(probs, num_samples=1)
    assert torch.mpsrt.fallback_counts() == {}, torch.mpsrt.fallback_counts()
    # The token is among the top 50 and was kept by the top-p filter.
    assert (probs.gather(1, token) > 0).all()
    cpu_scores = logits.cpu()
    assert (cpu_scores.gather(1, token.cpu()) >= kth.cpu()).all()


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("reduce", ["sum", "prod", "amax", "amin", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(device_kernels: bool, reduce: str, include_self: bool) -> None:
    a = torch.randn(5, 4)
    src = torch.randn(6, 4)
    idx = torch.tensor(
        [[0, 1, 1, 4], [0, 0, 2, 2], [3, 1, 1, 4], [0, 4, 2, 0], [1, 1, 1, 1], [0, 3, 3, 0]]
    )
    check(
        lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self),
        a,
        idx,
        src,
        kernels=device_kernels,
        atol=1e-5,
    )
    check(
        lambda x, i, s: x.clone().scatter_reduce_(1, i, s, reduce, include_self=include_self),
        a,
        idx[:5, :3] % 4,
        src,
        kernels=device_kernels,
        atol=1e-5,
    )
    if reduce in ("sum", "prod") and include_self:
        old = {"sum": "add", "prod": "multiply"}[reduce]
        check(
            lambda x, i, s: x.scatter(0, i, s, reduce=old),
            a,
            idx,
            src,
            kernels=device_kernels,
            atol=1e-5,
        )
