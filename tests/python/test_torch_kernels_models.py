"""Models on the PyTorch device's kernels, against torch CPU: the seed transformer's forward
(nn.TransformerEncoder in inference: torch's fused encoder-layer op, which runs on the device
as its composition of aten ops), nn.MultiheadAttention's inference path, and an MLP's training
step (forward, cross-entropy, backward, SGD with momentum); nn.LSTM / nn.GRU and their cells
forward and backward (torch's fused cells, ops it dispatches to a device only, as compositions of
aten ops), in the default mode and on the device's kernels. Where the device runs kernels, the
transformer's forward, the MLP's step and the RNNs run with no op through the fallback."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest
from conftest import is_unified
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


# (layers, bidirectional, batch_first, bias): every option in both states, with few cases
_RNN_CONFIGS = [(1, False, False, True), (2, True, True, True), (2, False, True, False)]
_RNN_CONFIGS += [(1, True, False, False)]


def _weighted_sum(outputs: list[torch.Tensor]) -> torch.Tensor:
    """A loss that weighs each output element differently (so that a wrong gate's gradient
    cannot hide in a symmetric sum)."""
    total = 0
    for t in outputs:
        w = torch.linspace(0.5, 1.5, t.numel()).reshape(t.shape).to(t.device)
        total = total + (t * w).sum()
    return total


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for item in out for t in _flat(item)]


def _rnn_matches_cpu(module: torch.nn.Module, x: torch.Tensor, state: Any, device: bool) -> None:
    """module on mpsrt (the same weights) against CPU: outputs, the input's, the state's and
    every parameter's gradient; with device kernels, nothing through the fallback."""
    dev = copy.deepcopy(module).to("mpsrt")
    xc, xd = x.clone().requires_grad_(), x.to("mpsrt").requires_grad_()
    args_c, args_d = [xc], [xd]
    if state is not None:
        sc = [t.clone().requires_grad_() for t in state]
        sd = [t.to("mpsrt").requires_grad_() for t in state]
        args_c.append(sc[0] if len(sc) == 1 else tuple(sc))
        args_d.append(sd[0] if len(sd) == 1 else tuple(sd))
    expected = _flat(module(*args_c))
    _weighted_sum(expected).backward()
    torch.mpsrt.reset_fallback_counts()
    got = _flat(dev(*args_d))
    _weighted_sum(got).backward()
    if device:
        assert _fallbacks() == {}
    assert_close(got, [t.detach() for t in expected], atol=1e-5, rtol=1e-4)
    assert_close(xd.grad, xc.grad, atol=1e-5, rtol=1e-4)
    if state is not None:
        assert_close([t.grad for t in sd], [t.grad for t in sc], atol=1e-5, rtol=1e-4)
    for (name, p), q in zip(module.named_parameters(), dev.parameters()):
        assert q.grad is not None, name
        assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4)


@pytest.fixture(params=["auto", "device"])
def rnn_kernels(request: pytest.FixtureRequest) -> bool:
    """The RNN tests run in the default mode and with the device's kernels (device_kernels);
    True where every op must then run on kernels."""
    if request.param == "auto":
        return False
    return request.getfixturevalue("device_kernels")


@pytest.mark.parametrize("config", _RNN_CONFIGS, ids=lambda c: "l{}-bi{:d}-bf{:d}-b{:d}".format(*c))
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_lstm_gru_forward_backward_match_cpu(rnn_kernels: bool, kind: str, config: tuple) -> None:
    # torch runs these on a device through its fused cells (_thnn_fused_lstm_cell, ...), which
    # the CPU has no kernel for: the device's compositions, against the CPU's unfused cells.
    layers, bidirectional, batch_first, bias = config
    torch.manual_seed(3)
    module = getattr(torch.nn, kind)(
        5, 7, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias
    )
    x = torch.randn(3, 4, 5)
    state = None
    if layers == 2:  # an initial state, whose gradient is checked too
        h0 = torch.randn(layers * (2 if bidirectional else 1), 3 if batch_first else 4, 7)
        state = [h0, torch.randn_like(h0)] if kind == "LSTM" else [h0]
    _rnn_matches_cpu(module, x, state, rnn_kernels)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
def test_rnn_cells_forward_backward_match_cpu(rnn_kernels: bool, kind: str, bias: bool) -> None:
    torch.manual_seed(4)
    module = getattr(torch.nn, kind)(5, 7, bias=bias)
    state = [torch.randn(3, 7)] + ([torch.randn(3, 7)] if kind == "LSTMCell" else [])
    _rnn_matches_cpu(module, torch.randn(3, 5), state if bias else None, rnn_kernels)


_WHOLE_NETS = {"LSTM": "lstm", "GRU": "gru", "RNN-tanh": "rnn_tanh", "RNN-relu": "rnn_relu"}


def _rnn_outputs(out: Any) -> list[torch.Tensor]:
    """An RNN's output (a tensor or a PackedSequence's data) and its last state(s)."""
    y, state = out
    return _flat(y.data) + _flat(state)


def _rnn_module(kind: str, **options: Any) -> torch.nn.Module:
    cls = kind.split("-")[0]
    if cls == "RNN":
        options["nonlinearity"] = kind.split("-")[1]
    return getattr(torch.nn, cls)(5, 7, **options)


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("kind", list(_WHOLE_NETS))
def test_rnn_inference_runs_whole_net(device_kernels: bool, kind: str, packed: bool) -> None:
    # With no gradient to take, where the device runs no kernels of its own and its memory is
    # host-visible, torch's whole recurrent op (aten::lstm, gru, rnn_tanh, rnn_relu) runs as
    # the CPU's through the fallback: one op instead of about ten a step. Elsewhere the
    # composition of cells. Equal to CPU either way, in no_grad and in inference mode.
    torch.manual_seed(5)
    module = _rnn_module(kind, num_layers=2, bidirectional=True, batch_first=True).eval()
    h0 = torch.randn(4, 3, 7)
    state: Any = (h0, torch.randn_like(h0)) if kind == "LSTM" else h0
    x = torch.randn(3, 4, 5)
    pack = torch.nn.utils.rnn.pack_padded_sequence
    with torch.no_grad():
        expected = _rnn_outputs(
            module(pack(x, [4, 3, 2], batch_first=True) if packed else x, state)
        )
    dev = copy.deepcopy(module).to("mpsrt")
    xd, sd = x.to("mpsrt"), tuple(t.to("mpsrt") for t in _flat(state))
    arg = pack(xd, [4, 3, 2], batch_first=True) if packed else xd
    op = f"aten::{_WHOLE_NETS[kind]}.{'data' if packed else 'input'}"
    whole = not device_kernels and is_unified()
    for mode in (torch.no_grad, torch.inference_mode):
        torch.mpsrt.reset_fallback_counts()
        with mode():
            got = _rnn_outputs(dev(arg, sd if kind == "LSTM" else sd[0]))
        assert torch.mpsrt.fallback_counts().get(op, 0) == (1 if whole else 0), mode
        assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_rnn_whole_net_not_with_gradient_or_dropout(device_kernels: bool) -> None:
    # A gradient to take (autograd differentiates the composition) or dropout drawing random
    # numbers in training (from the device's generator, not the CPU's): the composition runs.
    module = torch.nn.LSTM(5, 7, num_layers=2, dropout=0.5).to("mpsrt")
    x = torch.randn(4, 3, 5, device="mpsrt")
    module(x)[0].sum().backward()
    with torch.no_grad():
        module(x)
    assert "aten::lstm.input" not in torch.mpsrt.fallback_counts()
    assert module.weight_hh_l0.grad is not None


def test_fused_cells_refuse_bad_sizes(device_kernels: bool) -> None:
    # torch's CUDA checks, with what was expected; the device stays usable.
    gates = torch.randn(2, 8, device="mpsrt")
    with pytest.raises(RuntimeError, match=r"hidden_gates must have input_gates' size"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates[:, :4], torch.randn(2, 2, device="mpsrt"))
    with pytest.raises(RuntimeError, match=r"previous state must be 2-D \[batch, hidden_size\]"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, torch.randn(2, 3, device="mpsrt"))
    with pytest.raises(RuntimeError, match=r"input_bias must be 1-D of 9 elements"):
        g = torch.randn(2, 9, device="mpsrt")
        torch.ops.aten._thnn_fused_gru_cell(g, g, torch.randn(2, 3, device="mpsrt"), g, g)
    hy, ws = torch.ops.aten._thnn_fused_gru_cell(
        torch.randn(2, 9, device="mpsrt"),
        torch.randn(2, 9, device="mpsrt"),
        torch.randn(2, 3, device="mpsrt"),
    )
    assert hy.shape == (2, 3) and ws.shape == (2, 15)


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
