"""Models on the PyTorch device's kernels, against torch CPU: the seed transformer's forward
(nn.TransformerEncoder in inference: torch's fused encoder-layer op, which runs on the device
as its composition of aten ops), nn.MultiheadAttention's inference path, and an MLP's training
step (forward, cross-entropy, backward, SGD with momentum). Where the device runs kernels, the
transformer's forward and the MLP's step run with no op through the fallback."""

from __future__ import annotations

import warnings

import pytest
from kernel_check import assert_close, torch

# Ops that may still run through the fallback in these models (none: the goal).
ALLOWED: tuple[str, ...] = ()


def _fallbacks() -> dict[str, int]:
    return {k: v for k, v in torch.mpsrt.fallback_counts().items() if k not in ALLOWED}


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_forward(
    device_kernels: bool, norm_first: bool, activation: str
) -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        d_model=32,
        nhead=4,
        dim_feedforward=64,
        batch_first=True,
        norm_first=norm_first,
        activation=activation,
    )
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    x = torch.randn(2, 10, 32)
    with torch.no_grad():
        expected = model(x)
        model.to("mpsrt")
        torch.mpsrt.reset_fallback_counts()
        got = model(x.to("mpsrt"))
    if device_kernels:
        assert _fallbacks() == {}
    assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("average", [True, False])
def test_multi_head_attention_inference(device_kernels: bool, average: bool) -> None:
    torch.manual_seed(1)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    q, kv = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    with torch.no_grad():
        expected = mha(q, kv, kv, need_weights=True, average_attn_weights=average)
        mha.to("mpsrt")
        got = mha(
            q.to("mpsrt"),
            kv.to("mpsrt"),
            kv.to("mpsrt"),
            need_weights=True,
            average_attn_weights=average,
        )
        got_no_weights = mha(q.to("mpsrt"), kv.to("mpsrt"), kv.to("mpsrt"), need_weights=False)
    assert_close(list(got), list(expected), atol=1e-5, rtol=1e-4)
    assert_close(got_no_weights[0], expected[0], atol=1e-5, rtol=1e-4)


def test_mlp_training_step(device_kernels: bool) -> None:
    torch.manual_seed(2)
    cpu = torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.ReLU(), torch.nn.Linear(48, 10))
    dev = torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.ReLU(), torch.nn.Linear(48, 10))
    dev.load_state_dict(cpu.state_dict())
    dev.to("mpsrt")
    x, y = torch.randn(16, 24), torch.randint(0, 10, (16,))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (cpu, dev)]
    for step in range(3):
        for model, opt, xs, ys in (
            (cpu, opts[0], x, y),
            (dev, opts[1], x.to("mpsrt"), y.to("mpsrt")),
        ):
            torch.mpsrt.reset_fallback_counts()
            loss = torch.nn.functional.cross_entropy(model(xs), ys)
            loss.backward()
            opt.step()
            opt.zero_grad()
            if model is dev and device_kernels and step > 0:  # step 0 makes the momentum buffers
                assert _fallbacks() == {}
    for p, q in zip(cpu.parameters(), dev.parameters()):
        assert_close(q, p.detach(), atol=1e-5, rtol=1e-4)


F = torch.nn.functional
_IDX = torch.tensor([2, 0, 3, 3])
_TARGET = torch.tensor([1, 0, 2, 1])

# Differentiable functions of float32 inputs on the device: the backward kernels against the
# forward kernels' finite differences (gradcheck in float32: eps 1e-3, tolerances 2e-2).
GRAD_CASES = {
    "gelu": (lambda x: F.gelu(x), [(3, 4)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [(3, 4)]),
    "silu": (F.silu, [(3, 4)]),
    "sigmoid_tanh": (lambda x: torch.sigmoid(x) * torch.tanh(x), [(3, 4)]),
    "relu_mul": (lambda x, y: F.relu(x) * y + x / (y * y + 1), [(3, 4), (3, 4)]),
    "softmax": (lambda x: F.softmax(x, -1), [(3, 5)]),
    "log_softmax": (lambda x: F.log_softmax(x, 0), [(4, 3)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (5,), w, b), [(3, 5), (5,), (5,)]),
    "linear": (F.linear, [(3, 4), (2, 4), (2,)]),
    "bmm": (torch.bmm, [(2, 3, 4), (2, 4, 2)]),
    "var_mean": (lambda x: torch.var(x, 1) + x.mean(0).sum(), [(3, 4)]),
    "cross_entropy": (lambda x: F.cross_entropy(x, _TARGET.to(x.device)), [(4, 3)]),
    "mse_loss": (lambda x, y: F.mse_loss(x, y), [(3, 4), (3, 4)]),
    "embedding": (lambda w: F.embedding(_IDX.to(w.device), w), [(5, 3)]),
}


@pytest.mark.parametrize("case", list(GRAD_CASES))
def test_gradcheck_small_shapes(device_kernels: bool, case: str) -> None:
    fn, shapes = GRAD_CASES[case]
    inputs = tuple(torch.randn(s).to("mpsrt").requires_grad_() for s in shapes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "... is not a double precision ..."
        assert torch.autograd.gradcheck(fn, inputs, eps=1e-3, atol=2e-2, rtol=2e-2)
    # The forward and backward themselves (gradcheck's own comparisons aside) run on kernels.
    torch.mpsrt.reset_fallback_counts()
    out = fn(*inputs)
    torch.autograd.grad(out, inputs, torch.ones_like(out))
    if device_kernels:
        assert _fallbacks() == {}
