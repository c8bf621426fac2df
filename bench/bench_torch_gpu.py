"""The torch area on a device whose ops run on mpsrt's kernels (a GPU; lavapipe with
MPSRT_TORCH_KERNELS=device): the PyTorch device "mpsrt" beside torch on the device's own peer
(torch.cuda on NVIDIA and AMD, torch.mps on Apple), one process, alternating turns, each side
waiting for its own device:

- the issue's transformer: TransformerEncoder (d_model 256, 8 heads, 4 layers, FFN 1024, batch
  first) forward of 8 x 128 under torch.no_grad(); goal <= 3x the peer's time;
- one training step of an MLP (3 x Linear(1024), batch 512, cross-entropy, SGD momentum);
  goal <= 3x;
- float32 GEMM 4096^3 (TF32 off on the peer); goal >= 0.5x the peer's TFLOP/s;
- float16 GEMM 4096^3; goal >= 0.5x (tensor cores on both sides where the device has them);
- add of two 256 MiB float32 tensors into a third; goal >= 0.9x the peer's GB/s;
- the host cost of one op (bench_torch_host): what the CPU spends to enqueue a 1-element add_,
  a small convolution, a batch norm and an attention call; goals <= 1.5 us / 3 us.

--quick shrinks every size. Where the device has no peer in this process (lavapipe, a GPU
without torch.cuda), mpsrt's figures stand alone with the reason; goals are judged only on a
real GPU beside a real peer (peers.gpu_goal).
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from . import bench_torch_host
from .peers import Goal, Peers, versus
from .timing import Row, progress

AREA = "torch"
# Sizes and timing per mode (--quick: True); the tests shrink the quick ones further.
SIZES: dict[bool, dict[str, int]] = {
    False: {
        "layers": 4,
        "batch": 8,
        "seq": 128,
        "width": 1024,
        "mlp_batch": 512,
        "n": 4096,
        "mib": 256,
    },
    True: {"layers": 1, "batch": 2, "seq": 32, "width": 256, "mlp_batch": 64, "n": 1024, "mib": 16},
}
TIMING: dict[bool, dict[str, int]] = {False: {}, True: {"rounds": 2, "repeats": 3, "warmup": 1}}


def _on(peer: Any) -> str | None:
    """The torch device of a device peer (torch.cuda -> "cuda"), None for other libraries."""
    return getattr(peer, "device", None) if hasattr(peer, "torch") else None


def _transformer(torch: Any, quick: bool, peers: Peers) -> list[Row]:
    z = SIZES[quick]
    layers, batch, seq = z["layers"], z["batch"], z["seq"]
    case = f"TransformerEncoder 256 wide, {layers} layers, forward {batch}x{seq}, no_grad"
    progress(f"[{AREA}] {case}")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True)
    base = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()
    x = torch.randn(batch, seq, 256)

    def on(device: str) -> Callable[[], object]:
        model, inp = copy.deepcopy(base).to(device), x.to(device)

        def run() -> object:
            with torch.no_grad():
                return model(inp)

        return run

    return versus(
        peers,
        AREA,
        case,
        on("mpsrt"),
        lambda p: on(_on(p)) if _on(p) else None,
        unit="ms",
        goal=Goal("<= 3x {peer}", 1 / 3),
    )


def _mlp(torch: Any, quick: bool, peers: Peers) -> list[Row]:
    width, batch = SIZES[quick]["width"], SIZES[quick]["mlp_batch"]
    case = f"train step: MLP 3 x Linear({width}), batch {batch}, cross-entropy, SGD momentum"
    progress(f"[{AREA}] {case}")
    nn = torch.nn
    torch.manual_seed(0)
    base = nn.Sequential(
        nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)
    )
    x, y = torch.randn(batch, width), torch.randint(0, 10, (batch,))

    def on(device: str) -> Callable[[], object]:
        model = copy.deepcopy(base).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        inp, target = x.to(device), y.to(device)

        def step() -> None:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(inp), target).backward()
            opt.step()

        step()  # the momentum buffers exist before timing
        return step

    return versus(
        peers,
        AREA,
        case,
        on("mpsrt"),
        lambda p: on(_on(p)) if _on(p) else None,
        unit="ms",
        goal=Goal("<= 3x {peer}", 1 / 3),
    )


def _gemm(torch: Any, quick: bool, peers: Peers, dtype: str) -> list[Row]:
    n = SIZES[quick]["n"]
    case = f"{dtype} GEMM {n}^3 (mm), TFLOP/s as GB/s of 2n^3/1000 flops"
    progress(f"[{AREA}] {case}")
    t = getattr(torch, dtype)

    def on(device: str) -> Callable[[], object]:
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
        a = torch.randn(n, n, dtype=t).to(device)
        b = torch.randn(n, n, dtype=t).to(device)
        out = torch.empty(n, n, dtype=t, device=device)
        return lambda: torch.mm(a, b, out=out)

    # versus() reports nbytes / time in GB/s: 2 n^3 / 1000 "bytes" reads as TFLOP/s.
    return versus(
        peers,
        AREA,
        case,
        on("mpsrt"),
        lambda p: on(_on(p)) if _on(p) else None,
        unit="GB/s",
        nbytes=2 * n**3 // 1000,
        goal=Goal(">= 0.5x {peer}", 0.5),
    )


def _add(torch: Any, quick: bool, peers: Peers) -> list[Row]:
    mib = SIZES[quick]["mib"]
    case = f"add of two {mib} MiB float32 tensors (torch.add out=)"
    progress(f"[{AREA}] {case}")
    n = max(mib * (1 << 20) // 4, 1)

    def on(device: str) -> Callable[[], object]:
        a = torch.ones(n, device=device)
        b = torch.ones(n, device=device)
        out = torch.empty(n, device=device)
        return lambda: torch.add(a, b, out=out)

    return versus(
        peers,
        AREA,
        case,
        on("mpsrt"),
        lambda p: on(_on(p)) if _on(p) else None,
        unit="GB/s",
        nbytes=3 * 4 * n,
        goal=Goal(">= 0.9x {peer}", 0.9),
    )


def rows(torch: Any, quick: bool, peers: Peers) -> list[Row]:
    out: list[Row] = []
    for make in (_transformer, _mlp, _add):
        out += make(torch, quick, peers)
    out += _gemm(torch, quick, peers, "float32")
    out += _gemm(torch, quick, peers, "float16")
    out += bench_torch_host.rows(torch, quick, peers)
    return out
