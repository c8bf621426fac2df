"""scaled_dot_product_attention on mpsrt's fused attention kernels (csrc/kernels/attention/,
csrc/torch/ops/attention.cpp) against torch CPU's math path: the forward and the gradients of
q, k, v and a float mask over lengths, head dims, causal masks, bool / float masks broadcast
over batch and heads, grouped-query heads and half dtypes; dropout (reproducible under a seed,
the backward using the forward's keep mask, the keep fraction); that the fused op ran on its
kernel (no fallback, no score-sized allocation)."""

from __future__ import annotations

from typing import Any

import pytest
from kernel_check import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Where the device runs kernels (conftest.kernels_only says why not elsewhere).
pytestmark = pytest.mark.usefixtures("kernels_only")

F = torch.nn.functional

FUSED = "ScaledDotProductFusedAttentionOverrideableBackward"
TOL = {
    torch.float32: {"atol": 2e-5, "rtol": 1e-4},
    torch.float16: {"atol": 2e-3, "rtol": 2e-3},
    torch.bfloat16: {"atol": 2e-2, "rtol": 1.6e-2},
}


class _Ops(TorchDispatchMode):
    """Records the aten ops called under it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


def _inputs(
    b: int, h: int, hkv: int, lq: int, lk: int, d: int, dv: int, dtype: torch.dtype
) -> list[torch.Tensor]:
    return [
        torch.randn(b, h, lq, d).to(dtype),
        torch.randn(b, hkv, lk, d).to(dtype),
        torch.randn(b, hkv, lk, dv).to(dtype),
    ]


def _attention(
    tensors: list[torch.Tensor], mask: torch.Tensor | None, grad: torch.Tensor, **kw: Any
) -> tuple[torch.Tensor, list[torch.Tensor | None], str]:
    """SDPA's output, the gradients of its tensors (q, k, v and a float mask) and the name of
    its backward node."""
    leaves = [t.detach().requires_grad_() for t in tensors]
    m = None
    if mask is not None:
        m = mask.detach().requires_grad_(mask.is_floating_point())
    out = F.scaled_dot_product_attention(*leaves, attn_mask=m, **kw)
    out.backward(grad)
    grads = [t.grad for t in leaves] + ([m.grad] if m is not None and m.requires_grad else [])
    # Newer torch runs 3-D inputs as 4-D (unsqueezed in, squeezed out): the op's node is below.
    node = out.grad_fn
    while type(node).__name__.startswith(("SqueezeBackward", "UnsqueezeBackward")):
        node = node.next_functions[0][0]
    return out.detach(), grads, type(node).__name__


def _check(
    tensors: list[torch.Tensor],
    mask: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
    **kw: Any,
) -> None:
    """The device's forward and gradients equal torch CPU's math path (in float32 for half
    dtypes, rounded), ran on the fused kernel, and nothing ran through the fallback."""
    lq, dv = tensors[0].shape[-2], tensors[2].shape[-1]
    grad = torch.randn(*tensors[0].shape[:-2], lq, dv).to(dtype)
    ref = [t.float() for t in tensors]
    rmask = mask.float() if mask is not None and mask.is_floating_point() else mask
    expected, expected_grads, _ = _attention(ref, rmask, grad.float(), **kw)
    torch.mpsrt.reset_fallback_counts()
    dev = [t.to("mpsrt") for t in tensors]
    dmask = None if mask is None else mask.to("mpsrt")
    got, grads, node = _attention(dev, dmask, grad.to("mpsrt"), **kw)
    assert torch.mpsrt.fallback_counts() == {}
    assert node.startswith(FUSED), f"scaled_dot_product_attention took {node}"
    tol = TOL[dtype]
    torch.testing.assert_close(got.cpu(), expected.to(dtype), **tol)
    assert len(grads) == len(expected_grads)
    for g, e in zip(grads, expected_grads):
        assert g is not None and e is not None
        assert g.dtype == e.to(g.dtype).dtype
        torch.testing.assert_close(g.cpu().float(), e.to(dtype).float(), **tol)


@pytest.mark.parametrize("d", [16, 64, 80, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_backward_head_dims(device_kernels: bool, d: int, causal: bool) -> None:
    # Lq != Lk both ways, lengths off the 16-row tiles.
    _check(_inputs(2, 3, 3, 21, 37, d, d, torch.float32), is_causal=causal)
    _check(_inputs(1, 2, 2, 40, 9, d, d, torch.float32), is_causal=causal)


def test_head_dims_large_odd_and_value_dims(device_kernels: bool) -> None:
    # 224: the widest head dim whose tiles fit 32 KiB of shared memory (wider: the math path)
    _check(_inputs(1, 2, 2, 9, 13, 224, 224, torch.float32), is_causal=True)
    _check(_inputs(1, 2, 2, 9, 13, 112, 112, torch.float32))  # the widest with 16 rows a group
    _check(_inputs(1, 2, 2, 11, 5, 6, 6, torch.float32))  # not a multiple of 4
    _check(_inputs(2, 1, 1, 17, 13, 64, 32, torch.float32))  # Dv != D
    _check(_inputs(2, 1, 1, 17, 13, 24, 200, torch.float32))
    _check(_inputs(1, 2, 2, 8, 8, 16, 16, torch.float32), scale=0.3)
    # 3-D inputs (heads, length, dim).
    _check([t[0] for t in _inputs(1, 2, 2, 12, 10, 32, 32, torch.float32)])


@pytest.mark.parametrize("shape", [(19, 23), (2, 1, 19, 23), (1, 3, 19, 23), (1, 3, 1, 23)])
def test_float_mask_broadcast(device_kernels: bool, shape: tuple[int, ...]) -> None:
    # The mask's gradient too, summed over its broadcast dims.
    _check(_inputs(2, 3, 3, 19, 23, 32, 32, torch.float32), torch.randn(shape))


@pytest.mark.parametrize("shape", [(19, 23), (2, 1, 19, 23), (19, 1)])
def test_bool_mask(device_kernels: bool, shape: tuple[int, ...]) -> None:
    mask = torch.rand(shape) > 0.3
    mask[..., 0] = True  # no row masked whole
    _check(_inputs(2, 3, 3, 19, 23, 64, 64, torch.float32), mask)


def test_fully_masked_rows(device_kernels: bool) -> None:
    # torch's math path gives such rows zero output and zero gradients.
    mask = torch.rand(12, 10) > 0.5
    mask[3] = False
    mask[7] = False
    _check(_inputs(1, 2, 2, 12, 10, 16, 16, torch.float32), mask)


@pytest.mark.parametrize(("h", "hkv"), [(4, 2), (6, 1), (8, 8)])
def test_grouped_query_attention(device_kernels: bool, h: int, hkv: int) -> None:
    _check(_inputs(2, h, hkv, 25, 18, 64, 64, torch.float32), enable_gqa=True)
    _check(_inputs(1, h, hkv, 25, 30, 32, 32, torch.float32), enable_gqa=True, is_causal=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes(device_kernels: bool, dtype: torch.dtype) -> None:
    _check(_inputs(2, 2, 2, 33, 20, 64, 64, dtype), dtype=dtype)
    _check(_inputs(1, 4, 2, 20, 33, 128, 128, dtype), dtype=dtype, is_causal=True, enable_gqa=True)
    _check(_inputs(1, 2, 2, 17, 19, 32, 32, dtype), torch.randn(17, 19).to(dtype), dtype=dtype)


def test_no_score_matrix_in_memory(device_kernels: bool) -> None:
    """The forward and backward allocate nothing of the score matrix's size (B H Lq Lk floats:
    16 MiB here; the inputs are 0.5 MiB each)."""
    q, k, v = (torch.randn(1, 4, 1024, 32, device="mpsrt", requires_grad=True) for _ in range(3))
    grad = torch.randn(1, 4, 1024, 32, device="mpsrt")
    torch.mpsrt.synchronize()
    torch.mpsrt.reset_peak_memory_stats()
    base = torch.mpsrt.memory_allocated()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.backward(grad)
    torch.mpsrt.synchronize()
    peak = torch.mpsrt.max_memory_allocated() - base
    assert type(out.grad_fn).__name__.startswith(FUSED)
    assert torch.mpsrt.fallback_counts() == {}
    assert peak < 4 * 2**20, f"peak {peak} bytes: a score-sized buffer was allocated"


def _dropout_run(
    seed: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: float, grad: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    torch.mpsrt.manual_seed(seed)
    leaves = [t.to("mpsrt").requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, dropout_p=p)
    assert type(out.grad_fn).__name__.startswith(FUSED)
    out.backward(grad.to("mpsrt"))
    return out.detach().cpu(), [t.grad.cpu() for t in leaves]


def _keep_mask(seed: int, q: torch.Tensor, k: torch.Tensor, p: float) -> torch.Tensor:
    """The keep mask times 1 / (1 - p) the kernel draws under `seed`: the output for v = the
    identity is the dropped attention weights."""
    torch.mpsrt.manual_seed(seed)
    lk = k.shape[-2]
    eye = torch.eye(lk).expand(*k.shape[:-1], lk).contiguous()
    out = F.scaled_dot_product_attention(q.to("mpsrt"), k.to("mpsrt"), eye.to("mpsrt"), dropout_p=p)
    weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, -1)
    return out.cpu() / weights


def test_dropout(device_kernels: bool) -> None:
    p = 0.3
    q, k, v = _inputs(2, 4, 4, 64, 48, 32, 32, torch.float32)
    grad = torch.randn(2, 4, 64, 32)
    out, grads = _dropout_run(7, q, k, v, p, grad)
    out2, grads2 = _dropout_run(7, q, k, v, p, grad)
    assert torch.equal(out, out2) and all(torch.equal(a, b) for a, b in zip(grads, grads2))
    out3, _ = _dropout_run(8, q, k, v, p, grad)
    assert not torch.equal(out, out3)
    # The mask the forward drew: factors 0 or 1 / (1 - p), kept at the rate 1 - p.
    z = _keep_mask(7, q, k, p)
    kept = z > 0.5
    torch.testing.assert_close(z[kept], torch.full_like(z[kept], 1 / (1 - p)), rtol=1e-4, atol=0)
    assert (z[~kept].abs() < 1e-4).all()
    rate = kept.float().mean().item()
    assert abs(rate - (1 - p)) < 0.015, f"kept {rate:.4f} of the weights, expected {1 - p}"
    # Forward and backward both used it: torch CPU's math with that mask.
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    weights = torch.softmax(leaves[0] @ leaves[1].transpose(-2, -1) / 32**0.5, -1)
    expected = (weights * kept.float() / (1 - p)) @ leaves[2]
    expected.backward(grad)
    torch.testing.assert_close(out, expected.detach(), **TOL[torch.float32])
    for g, leaf in zip(grads, leaves):
        torch.testing.assert_close(g, leaf.grad, **TOL[torch.float32])
    assert torch.mpsrt.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_opinfo_samples(device_kernels: bool, dtype: torch.dtype) -> None:
    """PyTorch's OpInfo samples of scaled_dot_product_attention without dropout (those with it
    draw from another generator than torch CPU's) run on the fused kernel and equal torch CPU;
    those whose query has another rank than key and value (broadcast over a batch: the kernel
    declines them) are left to the math path."""
    cmi = pytest.importorskip(
        "torch.testing._internal.common_methods_invocations",
        reason="torch's OpInfo database needs expecttest: pip install expecttest",
    )
    (op,) = [o for o in cmi.op_db if o.name == "nn.functional.scaled_dot_product_attention"]
    samples = [
        s
        for s in op.sample_inputs("cpu", dtype, requires_grad=False)
        if s.kwargs.get("dropout_p", 0.0) == 0.0 and s.input.dim() == s.args[0].dim()
    ]
    assert samples
    fused = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
    for s in samples:
        expected = op(s.input, *s.args, **s.kwargs)
        torch.mpsrt.reset_fallback_counts()
        args = [a.to("mpsrt") for a in s.args]
        kwargs = {k: v.to("mpsrt") if torch.is_tensor(v) else v for k, v in s.kwargs.items()}
        with _Ops() as ops:
            got = op(s.input.to("mpsrt"), *args, **kwargs)
        assert torch.mpsrt.fallback_counts() == {}
        assert fused in ops.seen, f"the sample ran {ops.seen}"
        torch.testing.assert_close(got.cpu(), expected, **TOL[dtype])


def test_fused_op_outputs(device_kernels: bool) -> None:
    """The fused op's outputs as torch's autograd formula uses them: out, the logsumexp per row
    (float32), max_q / max_k, and dropout's Philox seed and offset (the generator's, which
    then moves past a word per attention weight); the backward op recomputes the forward's
    dropout mask from them."""
    q, k, v = (t.to("mpsrt") for t in _inputs(2, 3, 3, 10, 14, 16, 16, torch.float32))
    fused = torch.ops.aten._scaled_dot_product_fused_attention_overrideable
    out, lse, _, _, max_q, max_k, seed, offset, _ = fused(q, k, v, None, is_causal=True)
    scores = (q.cpu() @ k.cpu().transpose(-2, -1)) / 4.0
    scores = scores.masked_fill(~torch.ones(10, 14, dtype=torch.bool).tril(), float("-inf"))
    assert lse.dtype == torch.float32 and lse.shape == (2, 3, 10)
    torch.testing.assert_close(lse.cpu(), torch.logsumexp(scores, -1), **TOL[torch.float32])
    torch.testing.assert_close(out.cpu(), torch.softmax(scores, -1) @ v.cpu(), **TOL[torch.float32])
    assert (max_q, max_k) == (10, 14)
    assert seed.shape == offset.shape == ()  # as torch's meta function makes them
    torch.mpsrt.manual_seed(123)
    before = torch.mpsrt._get_rng_state_offset()
    outs = fused(q, k, v, None, dropout_p=0.2)
    assert int(outs[6]) == 123 and int(outs[7]) == before
    assert torch.mpsrt._get_rng_state_offset() == before + (2 * 3 * 10 * 14 + 3) // 4
    grad = torch.randn(2, 3, 10, 16, device="mpsrt")
    backward = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward

    def grads(seed_t: torch.Tensor) -> list[torch.Tensor]:
        g = backward(
            grad,
            q,
            k,
            v,
            None,
            [True] * 4,
            outs[0],
            outs[1],
            outs[2],
            outs[3],
            10,
            14,
            0.2,
            False,
            seed_t,
            outs[7],
        )
        return [t.cpu() for t in g[:3]]

    same, other = grads(outs[6]), grads(torch.tensor(124))
    # A second call with the same seed gives the same gradients, another seed others.
    assert all(torch.equal(a, b) for a, b in zip(same, grads(outs[6])))
    assert not torch.equal(same[2], other[2])
    assert torch.mpsrt.fallback_counts() == {}


@pytest.mark.parametrize("how", ["no_grad", "nothing_requires_grad", "inference_mode"])
def test_without_autograd_the_entry_runs_the_forward_kernel_itself(
    device_kernels: bool, how: str
) -> None:
    # Where autograd has nothing to do (and no mask, no dropout), scaled_dot_product_attention's
    # own entry runs the forward kernel: torch's composition (the backend choice, the fused op)
    # is not dispatched, and the result equals torch CPU's, causal or not, grouped-query too.
    q, k, v = _inputs(2, 4, 2, 9, 7, 16, 16, torch.float32)
    for causal in (False, True):
        want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        qd, kd, vd = (t.to("mpsrt").requires_grad_(how == "no_grad") for t in (q, k, v))
        ctx = torch.inference_mode() if how == "inference_mode" else torch.no_grad()
        with ctx, torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
            got = F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal, enable_gqa=True)
        names = [e.name for e in p.events()]
        assert "aten::scaled_dot_product_attention" in names, names
        assert not [n for n in names if "fused_attention" in n or "_fused_sdp_choice" in n], names
        torch.testing.assert_close(got.cpu(), want, **TOL[torch.float32])
    # A gradient wanted: torch's composition, through the fused op.
    qd, kd, vd = (t.to("mpsrt").requires_grad_() for t in (q, k, v))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        F.scaled_dot_product_attention(qd, kd, vd, enable_gqa=True)
    assert "aten::_scaled_dot_product_fused_attention_overrideable" in [e.name for e in p.events()]
