"""A model zoo on the PyTorch device, against torch CPU: real model classes that nobody here
wrote -- torchvision's resnet18, mobilenet_v3_small (depthwise convolutions, hardswish,
squeeze-and-excitation), VisionTransformer, SwinTransformer, EfficientNet (b0's blocks) and
ConvNeXt; Hugging Face transformers' GPT2LMHeadModel, BertForMaskedLM, LlamaForCausalLM (RMSNorm,
rotary embeddings, grouped-query attention) and T5ForConditionalGeneration (relative position
buckets), with their default attention implementation -- and three written in
bench/zoo_models.py (an LSTM language model; a U-Net block: convolutions, BatchNorm, ReLU,
max-pooling, transposed convolutions, skips concatenated; a diffusion U-Net: GroupNorm, SiLU,
self-attention, nearest upsampling, a timestep embedding). Tiny configurations, random weights
(seed 0), float32.

For each: the forward in eval() equals the CPU model's (the same weights), and one training step
in train() (dropout probabilities 0, so that it is deterministic; BatchNorm in batch statistics)
-- loss, backward, an SGD-with-momentum or AdamW step -- leaves every parameter and buffer equal
to the CPU's. Tolerance: atol 1e-4, rtol 1e-4 (torch.testing.assert_close: |got - expected| <=
1e-4 + 1e-4 |expected|), the issue's 1e-4 in float32. Each runs in the device's default mode
and, where the device has mpsrt's kernels (vulkan), on them (MPSRT_TORCH_KERNELS=device).
torchvision and transformers are the `zoo` extra; without them the tests skip with the reason.
"""

from __future__ import annotations

import copy
import gc
import os
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import mpsrt
import pytest
from kernel_check import assert_close, torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the zoo's models live in the bench package (its rows time them)
    sys.path.insert(0, str(ROOT))
from bench import zoo_models  # noqa: E402

TOL = {"atol": 1e-4, "rtol": 1e-4}
MODELS = list(zoo_models.FAMILIES)


@pytest.fixture(params=["auto", "device"])
def kernels(request: pytest.FixtureRequest) -> Iterator[str]:
    """The device's default mode, and its kernels where it has them (skipped where it has
    none: there "device" is the default mode again)."""
    if request.param == "device":
        if not request.getfixturevalue("device_kernels"):
            pytest.skip("this device runs no kernels: the default mode already ran the zoo")
        yield "device"
        return
    previous = torch.mpsrt._set_kernels("auto")
    try:
        yield "auto"
    finally:
        torch.mpsrt._set_kernels(previous)
        gc.collect()  # autograd's reference cycles hold device tensors
        mpsrt.synchronize()


def _build(name: str) -> zoo_models.Zoo:
    try:
        return zoo_models.build(name, "test")
    except zoo_models.Unavailable as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("name", MODELS)
def test_forward_matches_cpu(kernels: str, name: str) -> None:
    zoo = _build(name)
    model = zoo.model.eval()
    dev = copy.deepcopy(model).to("mpsrt")
    with torch.no_grad():
        expected = zoo.output(model, zoo.inputs)
        got = zoo.output(dev, zoo.inputs.to("mpsrt"))
    assert_close(got, expected, **TOL)


def _state(model: Any) -> dict[str, Any]:
    """Every parameter and buffer (BatchNorm's running statistics, its batch count)."""
    return {k: v.detach() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name", MODELS)
def test_training_step_matches_cpu(kernels: str, name: str) -> None:
    zoo = _build(name)
    model = zoo.model.train()
    before = {k: v.clone() for k, v in _state(model).items()}
    dev = copy.deepcopy(model).to("mpsrt")
    losses = []
    for m, x in ((model, zoo.inputs), (dev, zoo.inputs.to("mpsrt"))):
        opt = zoo_models.make_optimizer(zoo, m)
        loss = zoo.loss(m, x)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    assert_close(losses[1], losses[0], **TOL)
    expected, got = _state(model), _state(dev)
    assert list(got) == list(expected)
    for k in expected:
        assert_close(got[k], expected[k], **TOL)
    # The step moved the weights by far more than the tolerance: the comparison means something.
    moved = max((expected[k] - before[k]).abs().max().item() for k in expected)
    assert moved >= 10 * TOL["atol"], moved


# torch.compile (inductor, the default backend) of real models on host-visible memory: the
# forward of a transformer encoder and of a convolutional net, and the CNN's training step (its
# pooling gradients, BatchNorm's statistics): inductor's C++ code on the device's memory
# (test_torch_compile.py checks the mechanism in the README's test command; here real models go
# through it). Compiling them takes inductor ~2 minutes the first time (its caches cold, as in
# CI): they run where MPSRT_TEST_COMPILE_ZOO=1 (CI's step "extended: the model zoo under
# torch.compile").
COMPILE_ZOO = os.environ.get("MPSRT_TEST_COMPILE_ZOO") == "1"
needs_compile_zoo = pytest.mark.skipif(
    not COMPILE_ZOO, reason="set MPSRT_TEST_COMPILE_ZOO=1 to compile zoo models (~2 min cold)"
)


def _compiled(model: Any) -> Any:
    torch._dynamo.reset()
    return torch.compile(model)


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    yield
    torch._dynamo.reset()  # its caches hold the device's tensors (the model's weights)
    gc.collect()


@pytest.mark.needs_compiler
@pytest.mark.filterwarnings("ignore:`torch.jit.script:DeprecationWarning")
@needs_compile_zoo
@pytest.mark.parametrize("name", ["bert", "resnet18"])
def test_compiled_forward_matches_cpu(unified_memory: None, fresh_dynamo: None, name: str) -> None:
    from torch._inductor import metrics as inductor_metrics

    zoo = _build(name)
    model = zoo.model.eval()
    dev = copy.deepcopy(model).to("mpsrt")
    with torch.no_grad():
        expected = zoo.output(model, zoo.inputs)
        before = inductor_metrics.generated_kernel_count
        got = zoo.output(_compiled(dev), zoo.inputs.to("mpsrt"))
    assert inductor_metrics.generated_kernel_count > before
    assert_close(got, expected, **TOL)


@pytest.mark.needs_compiler
@pytest.mark.filterwarnings("ignore:`torch.jit.script:DeprecationWarning")
@needs_compile_zoo
def test_compiled_training_step_matches_cpu(unified_memory: None, fresh_dynamo: None) -> None:
    zoo = _build("resnet18")
    model = zoo.model.train()
    dev = copy.deepcopy(model).to("mpsrt")
    for m, x in ((model, zoo.inputs), (_compiled(dev), zoo.inputs.to("mpsrt"))):
        opt = zoo_models.make_optimizer(zoo, m)
        zoo.loss(m, x).backward()
        opt.step()
    expected, got = _state(model), _state(dev)
    for k in expected:
        assert_close(got[k], expected[k], **TOL)
