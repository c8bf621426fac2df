"""The model zoo: real model classes (torchvision's, Hugging Face transformers', and two written
here), random weights from a fixed seed, at two sizes: "test" (tiny: tests/python/
test_torch_zoo.py compares them with torch CPU on every backend) and "bench" (a forward of a few
to tens of ms on a CPU: the torch area's zoo rows, bench_torch.py).

Each family is a `Zoo`: the CPU model, the example input, the forward's output tensor and a
training loss. `build(name, size)` makes one (seeded: the same weights in every call) or raises
`Unavailable` (with the reason: the package is not installed) where it cannot.
"""

from __future__ import annotations

import importlib
import importlib.util
import pathlib
from dataclasses import dataclass
from typing import Any, Callable

SIZES = ("test", "bench")


class Unavailable(Exception):
    """The family's package is not installed (or does not import); the message says which."""


@dataclass
class Zoo:
    """One model family, built on the CPU in train() mode (the caller picks eval()/train())."""

    name: str
    model: Any  # torch.nn.Module
    inputs: Any  # a tensor, the model's one positional argument
    # output(model, inputs): the forward's result as one tensor (logits, feature map)
    output: Callable[[Any, Any], Any]
    # loss(model, inputs): a scalar to back-propagate (the inputs' own targets, fixed by seed)
    loss: Callable[[Any, Any], Any]
    optimizer: str  # "sgd" (momentum 0.9) or "adamw"


def _torch() -> Any:
    import torch

    return torch


def import_torchvision() -> Any:
    """torchvision, whose model classes are pure Python, importable with any torch build.

    Its C++ ops (torchvision/_C.so) load only with the torch build they were compiled against:
    PyPI's Linux wheels are built against CUDA torch, so with torch's CPU build _C.so does not
    load (an undefined symbol), which torchvision tolerates -- but torchvision 0.28 then fails at
    import, in torchvision/_meta_registrations.py, on two unguarded register_fake calls for
    torchvision::nms and torchvision::qnms, ops that only _C.so defines. Where _C.so does not
    load, their two schemas are defined here first (no kernel: the zoo never runs nms), so that
    the import goes through; where it loads, nothing is defined and torchvision is as shipped.
    """
    torch = _torch()
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        raise Unavailable("torchvision is not installed: pip install '.[zoo]'")
    if not hasattr(torch.ops.torchvision, "nms"):
        libs = sorted(pathlib.Path(spec.submodule_search_locations[0]).glob("_C.*"))
        try:
            if not libs:
                raise OSError("no torchvision/_C library")
            torch.ops.load_library(str(libs[0]))  # as torchvision does; a no-op done twice
        except OSError:
            global _TORCHVISION_SCHEMAS
            _TORCHVISION_SCHEMAS = torch.library.Library("torchvision", "DEF")
            for op in ("nms", "qnms"):
                _TORCHVISION_SCHEMAS.define(
                    f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
                )
    try:
        return importlib.import_module("torchvision")
    except (ImportError, RuntimeError) as e:
        raise Unavailable(f"import torchvision failed: {type(e).__name__}: {e}") from e


# The library object that holds the two schemas (they live as long as it does).
_TORCHVISION_SCHEMAS: Any = None


def import_transformers() -> Any:
    if importlib.util.find_spec("transformers") is None:
        raise Unavailable("transformers is not installed: pip install '.[zoo]'")
    # Where torchvision is installed, transformers imports it (its lazy model modules check
    # for it): through the same door, or GPT2LMHeadModel's import fails as torchvision's does.
    try:
        import_torchvision()
    except Unavailable:
        pass
    try:
        return importlib.import_module("transformers")
    except (ImportError, RuntimeError) as e:
        raise Unavailable(f"import transformers failed: {type(e).__name__}: {e}") from e


def _classifier(name: str, model: Any, inputs: Any, classes: int, optimizer: str) -> Zoo:
    """An image classifier (logits [batch, classes]) trained with cross-entropy."""
    torch = _torch()
    target = torch.randint(0, classes, (inputs.shape[0],))

    def loss(m: Any, x: Any) -> Any:
        return torch.nn.functional.cross_entropy(m(x), target.to(x.device))

    return Zoo(name, model, inputs, lambda m, x: m(x), loss, optimizer)


def _resnet18(size: str) -> Zoo:
    tv = import_torchvision()
    batch, side = (2, 64) if size == "test" else (2, 128)
    model = tv.models.resnet18(num_classes=10)
    return _classifier("resnet18", model, _torch().randn(batch, 3, side, side), 10, "sgd")


def _mobilenet(size: str) -> Zoo:
    # Grouped (depthwise) convolutions, hardswish, squeeze-and-excitation; dropout off so that
    # a training step is deterministic.
    tv = import_torchvision()
    batch, side = (2, 64) if size == "test" else (8, 128)
    model = tv.models.mobilenet_v3_small(num_classes=10, dropout=0.0)
    x = _torch().randn(batch, 3, side, side)
    return _classifier("mobilenet_v3_small", model, x, 10, "sgd")


def _vit(size: str) -> Zoo:
    tv = import_torchvision()
    if size == "test":
        cfg = dict(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64)
        cfg.update(mlp_dim=128)
        batch = 2
    else:  # ViT-Tiny's width, 4 of its 12 layers
        cfg = dict(image_size=224, patch_size=16, num_layers=4, num_heads=3, hidden_dim=192)
        cfg.update(mlp_dim=768)
        batch = 2
    model = tv.models.VisionTransformer(**cfg, num_classes=10)
    x = _torch().randn(batch, 3, cfg["image_size"], cfg["image_size"])
    return _classifier("vit", model, x, 10, "sgd")


def _swin(size: str) -> Zoo:
    # Shifted windows: roll, a relative-position bias gathered by index, masked attention.
    tv = import_torchvision()
    depths, heads, side = ([2, 2], [2, 4], 32) if size == "test" else ([2, 2, 2], [2, 4, 8], 128)
    model = tv.models.SwinTransformer(
        patch_size=[4, 4],
        embed_dim=32,
        depths=depths,
        num_heads=heads,
        window_size=[4, 4],
        stochastic_depth_prob=0.0,
        num_classes=10,
    )
    return _classifier("swin", model, _torch().randn(2, 3, side, side), 10, "sgd")


def _token_ids(vocab: int, batch: int, seq: int) -> Any:
    return _torch().randint(0, vocab, (batch, seq))


def _gpt2(size: str) -> Zoo:
    tf = import_transformers()
    layers, width, vocab, batch, seq = (
        (2, 64, 128, 2, 16) if size == "test" else (4, 256, 1000, 4, 64)
    )
    cfg = tf.GPT2Config(
        n_layer=layers,
        n_embd=width,
        n_head=4,
        vocab_size=vocab,
        n_positions=max(64, seq),
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,  # GPT-2's own (50256) lies outside the small vocabulary
        eos_token_id=0,
    )
    model = tf.GPT2LMHeadModel(cfg)  # the default attention implementation
    return Zoo(
        "gpt2",
        model,
        _token_ids(vocab, batch, seq),
        lambda m, x: m(x).logits,
        lambda m, x: m(x, labels=x).loss,  # next-token prediction on the input itself
        "adamw",
    )


def _bert(size: str) -> Zoo:
    tf = import_transformers()
    layers, width, vocab, batch, seq = (
        (2, 64, 128, 2, 16) if size == "test" else (4, 256, 1000, 4, 64)
    )
    cfg = tf.BertConfig(
        num_hidden_layers=layers,
        hidden_size=width,
        num_attention_heads=4,
        intermediate_size=2 * width,
        vocab_size=vocab,
        max_position_embeddings=max(64, seq),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = tf.BertForMaskedLM(cfg)
    return Zoo(
        "bert",
        model,
        _token_ids(vocab, batch, seq),
        lambda m, x: m(x).logits,
        lambda m, x: m(x, labels=x).loss,
        "adamw",
    )


def _lstm_lm(size: str) -> Zoo:
    torch = _torch()
    nn = torch.nn
    vocab, width, batch, seq = (50, 32, 2, 12) if size == "test" else (1000, 256, 8, 64)

    class LSTMLanguageModel(nn.Module):
        """Embedding, a 2-layer LSTM, a linear head over the vocabulary."""

        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.lstm = nn.LSTM(width, width, num_layers=2, batch_first=True)
            self.head = nn.Linear(width, vocab)

        def forward(self, ids: Any) -> Any:
            return self.head(self.lstm(self.embed(ids))[0])

    def loss(m: Any, x: Any) -> Any:  # each position predicts the next token
        logits = m(x[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, vocab), x[:, 1:].reshape(-1))

    ids = _token_ids(vocab, batch, seq)
    return Zoo("lstm_lm", LSTMLanguageModel(), ids, lambda m, x: m(x), loss, "sgd")


def _unet(size: str) -> Zoo:
    torch = _torch()
    nn = torch.nn
    width, batch, side = (8, 2, 32) if size == "test" else (16, 4, 64)

    def double_conv(cin: int, cout: int) -> Any:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )

    class UNet(nn.Module):
        """Two levels down (max-pooling), up by transposed convolutions, the skips
        concatenated: U-Net's shape at a small depth."""

        def __init__(self) -> None:
            super().__init__()
            c = width
            self.down1, self.down2, self.mid = (
                double_conv(3, c),
                double_conv(c, 2 * c),
                double_conv(2 * c, 4 * c),
            )
            self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
            self.dec2 = double_conv(4 * c, 2 * c)
            self.up1 = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
            self.dec1 = double_conv(2 * c, c)
            self.head = nn.Conv2d(c, 2, 1)

        def forward(self, x: Any) -> Any:
            s1 = self.down1(x)
            s2 = self.down2(nn.functional.max_pool2d(s1, 2))
            y = self.mid(nn.functional.max_pool2d(s2, 2))
            y = self.dec2(torch.cat([self.up2(y), s2], dim=1))
            y = self.dec1(torch.cat([self.up1(y), s1], dim=1))
            return self.head(y)

    x = torch.randn(batch, 3, side, side)
    target = torch.randn(batch, 2, side, side)

    def loss(m: Any, inp: Any) -> Any:
        return nn.functional.mse_loss(m(inp), target.to(inp.device))

    return Zoo("unet", UNet(), x, lambda m, inp: m(inp), loss, "sgd")


FAMILIES: dict[str, Callable[[str], Zoo]] = {
    "resnet18": _resnet18,
    "mobilenet_v3_small": _mobilenet,
    "vit": _vit,
    "swin": _swin,
    "gpt2": _gpt2,
    "bert": _bert,
    "lstm_lm": _lstm_lm,
    "unet": _unet,
}


def build(name: str, size: str = "test") -> Zoo:
    """The family `name` at `size` ("test" or "bench"), its weights and inputs drawn from
    torch's CPU generator seeded with 0 (the same in every call)."""
    if name not in FAMILIES:
        raise ValueError(f"unknown model {name!r}; expected one of {', '.join(FAMILIES)}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; expected one of {', '.join(SIZES)}")
    _torch().manual_seed(0)
    return FAMILIES[name](size)


def make_optimizer(zoo: Zoo, model: Any) -> Any:
    """The family's optimizer over `model`'s parameters: SGD with momentum (lr 0.1), or AdamW
    (lr 1e-3, eps 1e-6). AdamW's first step moves each weight by lr * g / (|g| + eps): about lr
    wherever |g| >> eps, but a gradient near 0 is its float32 rounding, whose sign is chance
    (one of GPT-2's position-embedding gradients: -7.5e-9 on torch CPU, 5.6e-9 on the device's
    kernels): with torch's eps (1e-8) that weight steps by ~lr one way or the other. The step
    changes by at most lr * dg / eps for a change dg of a gradient: with eps 1e-6 and dg ~5e-8
    (these models' rounding), by 5e-5 at most."""
    torch = _torch()
    if zoo.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-6)
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
