"""The model zoo: real model classes (torchvision's, Hugging Face transformers', and three
written here), random weights from a fixed seed, at two sizes: "test" (tiny: tests/python/
test_torch_zoo.py compares them with torch CPU on every backend) and "bench" (a forward of a few
to tens of ms on a CPU: the torch area's zoo rows, bench_torch.py).

Each family is a `Zoo`: the CPU model, the example input, the forward's output tensor and a
training loss. `build(name, size)` makes one (seeded: the same weights in every call) or raises
`Unavailable` (with the reason: the package is not installed) where it cannot.
"""

from __future__ import annotations

import functools
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
    torchvision::nms and torchvision::qnms, ops that only _C.so (0.29: _C_stable.so) defines.
    Where it does not load, their two schemas are defined here first (no kernel: the zoo never
    runs nms), so that the import goes through; where it loads, nothing is defined and
    torchvision is as shipped.
    """
    torch = _torch()
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        raise Unavailable("torchvision is not installed: pip install '.[zoo]'")
    if not hasattr(torch.ops.torchvision, "nms"):
        # _C.so up to torchvision 0.28, _C_stable.so from 0.29 (built on torch's stable ABI).
        root = pathlib.Path(spec.submodule_search_locations[0])
        libs = [p for p in sorted(root.glob("_C*")) if p.name.split(".")[0] in ("_C", "_C_stable")]
        try:
            if not libs:
                raise OSError("no torchvision/_C library")
            for lib in libs:  # as torchvision does; a no-op done twice
                try:
                    torch.ops.load_library(str(lib))
                    break
                except OSError:
                    if lib == libs[-1]:
                        raise
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
    # 96 x 96: at 64 x 64 the last stage is 2 x 2, so its BatchNorms normalise 8 values a channel,
    # where float32 rounding alone flips ReLUs between any two implementations (one flip changes
    # the gradients of every earlier layer); 3 x 3 there (18 values) keeps eager, the device's
    # kernels and inductor's code on one side of them.
    batch, side = (2, 96) if size == "test" else (2, 128)
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


def _efficientnet(size: str) -> Zoo:
    # MBConv blocks: depthwise convolutions, SiLU, squeeze-and-excitation (sigmoid gates),
    # BatchNorm; stochastic depth and dropout off so that a training step is deterministic.
    # "bench" is efficientnet_b0; "test" is its block table at a quarter of the width and a
    # third of the depth (b0's 81 convolutions of distinct shapes cost torch's CPU kernels
    # seconds of first-call set-up each run), at 64 pixels a side: the last stages' BatchNorm
    # then normalizes 2 x 2 x batch values per channel (at 32, only the batch's 2, whose
    # variance near 0 turns float32 rounding before it into differences of ~1e-3).
    tv = import_torchvision()
    options = dict(num_classes=10, dropout=0.0, stochastic_depth_prob=0.0)
    if size == "bench":
        model = tv.models.efficientnet_b0(**options)
        return _classifier("efficientnet_b0", model, _torch().randn(4, 3, 128, 128), 10, "sgd")
    mb = functools.partial(tv.models.efficientnet.MBConvConfig, width_mult=0.25, depth_mult=0.34)
    b0 = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3)]
    b0 += [(6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]
    model = tv.models.EfficientNet([mb(*row) for row in b0], **options)
    return _classifier("efficientnet_b0", model, _torch().randn(2, 3, 64, 64), 10, "sgd")


def _convnext(size: str) -> Zoo:
    # 7x7 depthwise convolutions, LayerNorm over channels (a permute each way), GELU, layer
    # scale; a small configuration of torchvision's ConvNeXt class (convnext_tiny's blocks).
    tv = import_torchvision()
    cfg = tv.models.convnext.CNBlockConfig
    if size == "test":
        blocks, batch, side = [cfg(16, 32, 1), cfg(32, None, 1)], 2, 32
    else:  # convnext_tiny's widths, one block per stage
        blocks = [cfg(96, 192, 1), cfg(192, 384, 1), cfg(384, 768, 1), cfg(768, None, 1)]
        batch, side = 2, 128
    # layer_scale 1 (torchvision's default 1e-6 scales each block's output to nothing, so the
    # comparison would not see the blocks)
    model = tv.models.ConvNeXt(blocks, stochastic_depth_prob=0.0, layer_scale=1.0, num_classes=10)
    return _classifier("convnext", model, _torch().randn(batch, 3, side, side), 10, "sgd")


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


def _language_model(name: str, model: Any, vocab: int, batch: int, seq: int) -> Zoo:
    """A token model whose inputs are their own labels (masked or causal LM), trained by AdamW."""
    return Zoo(
        name,
        model,
        _token_ids(vocab, batch, seq),
        lambda m, x: m(x).logits,
        lambda m, x: m(x, labels=x).loss,
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
    return _language_model("bert", model, vocab, batch, seq)


def _llama(size: str) -> Zoo:
    # RMSNorm, rotary position embeddings, a SiLU-gated MLP, grouped-query attention (2 key /
    # value heads shared by 4 query heads).
    tf = import_transformers()
    layers, width, vocab, batch, seq = (
        (2, 64, 128, 2, 16) if size == "test" else (4, 256, 1000, 4, 64)
    )
    cfg = tf.LlamaConfig(
        num_hidden_layers=layers,
        hidden_size=width,
        intermediate_size=2 * width,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab,
        max_position_embeddings=max(64, seq),
        attention_dropout=0.0,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    model = tf.LlamaForCausalLM(cfg)
    return _language_model("llama", model, vocab, batch, seq)


def _t5(size: str) -> Zoo:
    # An encoder-decoder: relative position buckets (a learnt bias per bucket), RMS-style
    # layer norm, ReLU feed-forward, cross-attention; the decoder reads the input shifted right.
    tf = import_transformers()
    layers, width, vocab, batch, seq = (
        (2, 64, 128, 2, 16) if size == "test" else (4, 256, 1000, 4, 64)
    )
    cfg = tf.T5Config(
        num_layers=layers,
        num_decoder_layers=layers,
        d_model=width,
        d_kv=width // 4,
        d_ff=2 * width,
        num_heads=4,
        vocab_size=vocab,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=32,
        dropout_rate=0.0,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    model = tf.T5ForConditionalGeneration(cfg)
    return Zoo(
        "t5",
        model,
        _token_ids(vocab, batch, seq),
        lambda m, x: m(input_ids=x, labels=x).logits,
        lambda m, x: m(input_ids=x, labels=x).loss,
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


def _diffusion_blocks() -> tuple[Any, Any, Any]:
    """A diffusion U-Net's blocks: the timestep's sinusoidal embedding, a residual block
    (GroupNorm, SiLU, convolutions, the timestep added per channel) and self-attention over the
    pixels (scaled_dot_product_attention)."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    def timestep_embedding(t: Any, dim: int) -> Any:
        freqs = torch.exp(-torch.arange(dim // 2, device=t.device) * (9.2 / (dim // 2)))
        angles = t.float()[:, None] * freqs[None, :]
        return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)

    class ResBlock(nn.Module):
        def __init__(self, cin: int, cout: int, tdim: int) -> None:
            super().__init__()
            self.norm1, self.conv1 = nn.GroupNorm(4, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.time = nn.Linear(tdim, cout)
            self.norm2, self.conv2 = nn.GroupNorm(4, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x: Any, temb: Any) -> Any:
            h = self.conv1(F.silu(self.norm1(x)))
            h = h + self.time(F.silu(temb))[:, :, None, None]
            return self.skip(x) + self.conv2(F.silu(self.norm2(h)))

    class Attention(nn.Module):
        def __init__(self, c: int, heads: int = 2) -> None:
            super().__init__()
            self.heads, self.norm = heads, nn.GroupNorm(4, c)
            self.qkv, self.out = nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

        def forward(self, x: Any) -> Any:
            b, c, h, w = x.shape
            qkv = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, h * w)
            q, k, v = qkv.transpose(-1, -2).unbind(1)  # [b, heads, pixels, c / heads] each
            y = F.scaled_dot_product_attention(q, k, v)
            return x + self.out(y.transpose(-1, -2).reshape(b, c, h, w))

    return timestep_embedding, ResBlock, Attention


def _diffusion_unet(size: str) -> Zoo:
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional
    c, batch, side = (16, 2, 16) if size == "test" else (64, 4, 32)
    embed, ResBlock, Attention = _diffusion_blocks()

    class DiffusionUNet(nn.Module):
        """A denoiser's shape at one level: down by a strided convolution, self-attention in
        the middle, up by nearest upsampling with the skip concatenated; the timestep's
        embedding enters every residual block."""

        def __init__(self) -> None:
            super().__init__()
            self.time = nn.Sequential(nn.Linear(c, 4 * c), nn.SiLU(), nn.Linear(4 * c, 4 * c))
            self.conv_in = nn.Conv2d(3, c, 3, padding=1)
            self.down = ResBlock(c, c, 4 * c)
            self.downsample = nn.Conv2d(c, c, 3, stride=2, padding=1)
            self.mid1, self.attn = ResBlock(c, 2 * c, 4 * c), Attention(2 * c)
            self.mid2 = ResBlock(2 * c, 2 * c, 4 * c)
            self.up = ResBlock(3 * c, c, 4 * c)
            self.norm_out, self.conv_out = nn.GroupNorm(4, c), nn.Conv2d(c, 3, 3, padding=1)

        def forward(self, x: Any, t: Any) -> Any:
            temb = self.time(embed(t, c))
            skip = self.down(self.conv_in(x), temb)
            h = self.mid1(self.downsample(skip), temb)
            h = self.mid2(self.attn(h), temb)
            h = F.interpolate(h, scale_factor=2.0, mode="nearest")
            h = self.up(torch.cat([h, skip], dim=1), temb)
            return self.conv_out(F.silu(self.norm_out(h)))

    x, t = torch.randn(batch, 3, side, side), torch.randint(0, 1000, (batch,))
    noise = torch.randn(batch, 3, side, side)

    def loss(m: Any, inp: Any) -> Any:  # predict the noise
        return F.mse_loss(m(inp, t.to(inp.device)), noise.to(inp.device))

    return Zoo(
        "diffusion_unet", DiffusionUNet(), x, lambda m, inp: m(inp, t.to(inp.device)), loss, "sgd"
    )


FAMILIES: dict[str, Callable[[str], Zoo]] = {
    "resnet18": _resnet18,
    "mobilenet_v3_small": _mobilenet,
    "vit": _vit,
    "swin": _swin,
    "gpt2": _gpt2,
    "bert": _bert,
    "lstm_lm": _lstm_lm,
    "unet": _unet,
    "efficientnet_b0": _efficientnet,
    "convnext": _convnext,
    "llama": _llama,
    "t5": _t5,
    "diffusion_unet": _diffusion_unet,
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
