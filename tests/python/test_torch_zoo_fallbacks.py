"""The model zoo on mpsrt's kernels with nothing falling back beyond what is accepted.

Each zoo family (bench/zoo_models.py) runs its forward (eval, no_grad) and one training step
(train: loss, backward, its optimizer's step) on the device's kernels
(torch.mpsrt._set_kernels("device")) on the vulkan backend, in both memory models (host-visible,
lavapipe's default, and MPSRT_VULKAN_MEMORY=discrete, a real GPU's); the ops that ran as CPU
kernels instead (torch.mpsrt.fallback_counts()) must be exactly the family's accepted list in
ACCEPTED: an op outside it fails (give it a kernel, or accept it here with the reason), and so
does an accepted op that no longer falls back (remove it: the list stays true, and shrinks to
empty as the kernels land). The zoo's run takes about 2 minutes on lavapipe: it runs where
MPSRT_TEST_ZOO_FALLBACKS=1 (CI's step "extended: the model zoo on the device's kernels").

model.generate() of the decoders (GPT-2, the Llama-style model; tiny, random weights, seed 0) on
the device's kernels: greedy decoding yields torch CPU's tokens; sampling (top-k, top-p, a fixed
seed) yields valid tokens; the fallbacks of each are checked against GENERATE_ACCEPTED in the
same way. These run in every test run (seconds), on the memory model of the run.
"""

from __future__ import annotations

import copy
import gc
import os
import pathlib
import sys
from typing import Any

import mpsrt
import pytest
from kernel_check import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench import zoo_models  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*has no kernel:UserWarning")

# family -> the aten ops accepted to fall back in its forward and training step (each with its
# reason where one is added): none today. An op outside it fails the test; so does an accepted
# op that no longer falls back.
ACCEPTED: dict[str, set[str]] = {name: set() for name in zoo_models.FAMILIES}

# "<family>-<greedy|sample>" -> the aten ops accepted to fall back in its generate(): none today
# (the bookkeeping of finished sequences: isin, bitwise ops; positions: cumsum; top-k / top-p:
# topk, sort, scatter; multinomial all run on the device's kernels).
GENERATE_ACCEPTED: dict[str, set[str]] = {
    f"{name}-{mode}": set() for name in ("gpt2", "llama") for mode in ("greedy", "sample")
}

MEMORY = {"host-visible": "auto", "discrete": "discrete"}
ZOO_FALLBACKS = os.environ.get("MPSRT_TEST_ZOO_FALLBACKS") == "1"


def check_fallbacks(what: str, accepted: set[str], seen: dict[str, int]) -> None:
    """Fails unless the ops in `seen` (fallback_counts()) are exactly `accepted`."""
    unexpected = sorted(set(seen) - accepted)
    unseen = sorted(accepted - set(seen))
    problems = []
    if unexpected:
        calls = ", ".join(f"{op} ({seen[op]} calls)" for op in unexpected)
        problems.append(f"fell back and is not accepted (give it a kernel): {calls}")
    if unseen:
        problems.append(f"accepted but no longer falls back (remove it from the list): {unseen}")
    assert not problems, f"{what}: " + "; ".join(problems)


def _vulkan_kernels(backend: str, device_kernels: bool) -> None:
    if backend != "vulkan" or not device_kernels:
        pytest.skip("the fallback lists are lavapipe's (vulkan) with the device's kernels")


def _build(name: str) -> zoo_models.Zoo:
    try:
        return zoo_models.build(name, "test")
    except zoo_models.Unavailable as e:
        pytest.skip(str(e))


def _forward_and_step(zoo: zoo_models.Zoo) -> dict[str, int]:
    """The family's forward and one training step on the device; what fell back."""
    torch.mpsrt.reset_fallback_counts()
    dev = copy.deepcopy(zoo.model).to("mpsrt")
    x = zoo.inputs.to("mpsrt")
    with torch.no_grad():
        zoo.output(dev.eval(), x)
    opt = zoo_models.make_optimizer(zoo, dev.train())
    zoo.loss(dev, x).backward()
    opt.step()
    mpsrt.synchronize()
    return torch.mpsrt.fallback_counts()


@pytest.mark.skipif(not ZOO_FALLBACKS, reason="set MPSRT_TEST_ZOO_FALLBACKS=1 (~2 min on lavapipe)")
@pytest.mark.parametrize("memory", list(MEMORY))
@pytest.mark.parametrize("name", list(zoo_models.FAMILIES))
def test_zoo_falls_back_only_as_accepted(
    backend: str, device_kernels: bool, runtime_env: Any, memory: str, name: str
) -> None:
    _vulkan_kernels(backend, device_kernels)
    zoo = _build(name)
    with runtime_env(MPSRT_VULKAN_MEMORY=MEMORY[memory]):
        unified = mpsrt.get_device_properties().unified_memory
        if memory == "host-visible" and not unified:
            pytest.skip("this device's memory is discrete (MPSRT_VULKAN_MEMORY=auto)")
        assert unified == (memory == "host-visible")
        torch.mpsrt._set_kernels("device")  # the re-created runtime starts in its default mode
        assert torch.mpsrt._kernels_enabled()
        seen = _forward_and_step(zoo)
        gc.collect()  # the device model's autograd cycles, before the runtime is re-created
    check_fallbacks(f"{name} on {memory} memory", ACCEPTED[name], seen)


# ------------------------------------------------------------------------------- generate()


def _decoder(name: str) -> zoo_models.Zoo:
    zoo = _build(name)
    zoo.model.eval()
    return zoo


def _generate(model: Any, prompt: Any, **options: Any) -> Any:
    return model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=8,
        pad_token_id=0,
        **options,
    )


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_generate_matches_cpu(kernels_only: None, backend: str, name: str) -> None:
    zoo = _decoder(name)
    prompt = zoo.inputs[:, :4]
    with torch.no_grad():
        expected = _generate(zoo.model, prompt, do_sample=False)
        dev = copy.deepcopy(zoo.model).to("mpsrt")
        torch.mpsrt.reset_fallback_counts()
        got = _generate(dev, prompt.to("mpsrt"), do_sample=False)
        seen = torch.mpsrt.fallback_counts()
    on_device, got = got.device.type == "mpsrt", got.cpu()
    del dev  # no device memory held by a failure's traceback
    assert on_device
    assert expected.shape[1] > prompt.shape[1]  # tokens were generated
    assert torch.equal(got, expected)
    check_fallbacks(f"{name} greedy generate()", GENERATE_ACCEPTED[f"{name}-greedy"], seen)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_sampling_generate_yields_valid_tokens(kernels_only: None, name: str) -> None:
    zoo = _decoder(name)
    prompt = zoo.inputs[:, :4]
    vocab = zoo.model.config.vocab_size
    dev = copy.deepcopy(zoo.model).to("mpsrt")
    runs = []
    for _ in range(2):  # the same seed, the same tokens
        torch.mpsrt.manual_seed(7)
        torch.manual_seed(7)
        torch.mpsrt.reset_fallback_counts()
        with torch.no_grad():
            out = _generate(dev, prompt.to("mpsrt"), do_sample=True, top_k=20, top_p=0.9)
        runs.append(out.cpu())
    seen = torch.mpsrt.fallback_counts()
    del dev  # no device memory held by a failure's traceback
    out = runs[0]
    assert out.shape[0] == prompt.shape[0] and out.shape[1] > prompt.shape[1]
    assert torch.equal(out[:, : prompt.shape[1]], prompt)
    assert out.dtype == torch.int64 and 0 <= out.min() and out.max() < vocab
    assert torch.equal(runs[1], runs[0])
    # Each new token is among the top k of torch CPU's logits for the tokens before it.
    with torch.no_grad():
        logits = zoo.model(out).logits[:, prompt.shape[1] - 1 : -1]
    top = logits.topk(20, dim=-1).indices
    new = out[:, prompt.shape[1] :]
    assert (top == new.unsqueeze(-1)).any(-1).all(), (new, top[..., :5])
    check_fallbacks(f"{name} sampling generate()", GENERATE_ACCEPTED[f"{name}-sample"], seen)
