"""Models on the PyTorch device's kernels, against torch CPU: the seed transformer's forward
(nn.TransformerEncoder in inference: torch's fused encoder-layer op, which runs on the device
as its composition of aten ops), nn.MultiheadAttention's inference path, and an MLP's training
step (forward, cross-entropy, backward, SGD with momentum). Where the device runs kernels, the
transformer's forward and the MLP's step run with no op through the fallback."""

from __future__ import annotations

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
