"""PyTorch on the device "mpsrt" (`import mpsrt.torch`) beside torch's own CPU device, both
measured in this process with torch's default intra-op threads (the operators that mpsrt does
not run on its own kernels run torch's CPU kernels on the device memory, so both sides share
that thread pool):

- the seed workload: TransformerEncoder (512 wide, 8 heads, 6 layers), 10 forward passes of a
  1024 x 512 input under torch.no_grad(), the same weights on both devices (built once on the
  CPU, deep-copied to mpsrt); goal <= 1.05x torch cpu. Once as written (training mode: dropout
  draws its masks, mpsrt's from its Philox generator) and once in eval() (no dropout: the same
  CPU kernels on both devices, attention on torch's fused CPU flash kernel);
- one training step of a 3-layer MLP (512 wide, batch 256, SGD): forward, backward, step;
  goal <= 1.1x torch cpu;
- `t.add_(1)` on a 1-element tensor: the per-operator overhead; goal <= torch cpu + 100 ns;
- `torch.rand` of 16 Mi float32 (64 MiB), waited for; goal >= 10x torch cpu;
- `torch.empty(1 MiB, dtype=uint8)` + release; goal <= 1.0x torch cpu;
- the model zoo (bench/zoo_models.py), a row per family: torchvision's resnet18 and
  mobilenet_v3_small, a ViT (ViT-Tiny's width, 4 layers), transformers' GPT-2 and BERT (4 layers,
  256 wide), an LSTM language model, a U-Net block; the forward in eval() under torch.no_grad(),
  sizes where it takes a few to tens of ms on a CPU, goal <= 1.1x torch cpu, then at the tests'
  tiny sizes (--quick: those only), where the device's cost per operator weighs most, goal
  <= 1.05x torch cpu; the same weights on both devices, each sample as many passes as take about
  10 ms. Where torchvision or transformers is not installed (the `zoo` extra), their rows say
  so, without a figure.

Device work is waited for (torch.mpsrt.synchronize()) before each sample's clock stops; the
two devices are timed in alternating turns. The PyTorch device is registered once per process
and survives the runtime's re-creation between backends (every mpsrt tensor is freed before
the area returns), so the area runs on every backend whose device memory is host memory
(`unified_memory`) while its ops run as CPU kernels. Where they run on mpsrt's kernels (a GPU:
MPSRT_TORCH_KERNELS=auto; lavapipe with MPSRT_TORCH_KERNELS=device) the area measures the
rows of bench_torch_gpu.py beside the device's own peer instead (torch.cuda on NVIDIA). On a
discrete device whose ops run as CPU kernels (MPSRT_TORCH_KERNELS=cpu) the area is skipped with
one row that says why. Without torch it reports that torch is not installed.
"""

from __future__ import annotations

import copy
import gc
import importlib
import time
import warnings
from typing import Any, Callable

import mpsrt

from . import bench_torch_gpu
from .peers import Peers, cpu_goals, current
from .timing import Row, Stats, measure_interleaved, progress

AREA = "torch"
PEER = "torch cpu"
DEVICES = ("mpsrt", "cpu")
MiB = 1 << 20


def _unavailable(reason: str) -> list[Row]:
    return [Row(AREA, "PyTorch device 'mpsrt'", None, "", note=reason)]


def _sync(torch: Any, device: str) -> None:
    if device == "mpsrt":
        torch.mpsrt.synchronize()


def _per_call(
    torch: Any,
    make: Callable[[str], Callable[[], object]],
    calls: int,
    *,
    rounds: int,
    repeats: int,
    warmup: int = 1,
) -> dict[str, float]:
    """Median seconds per call of `make(device)()` on both devices: `warmup` untimed samples
    each, then `rounds` alternating turns of `repeats` samples each; a sample is `calls` calls
    followed by a synchronize of the device."""

    def sample(device: str) -> Callable[[], None]:
        fn = make(device)

        def run() -> None:
            for _ in range(calls):
                fn()
            _sync(torch, device)

        return run

    fns = {d: sample(d) for d in DEVICES}
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    stats: dict[str, Stats] = measure_interleaved(fns, rounds=rounds, warmup=0, repeats=repeats)
    return {d: st.median / calls for d, st in stats.items()}


def _row(case: str, sec: dict[str, float], unit: str, scale: float, factor: float) -> Row:
    """A row of mpsrt's time beside torch cpu's, goal: mpsrt <= factor x torch cpu."""
    mine, theirs = sec["mpsrt"] * scale, sec["cpu"] * scale
    return Row(
        AREA,
        case,
        mine,
        unit,
        PEER,
        theirs,
        goal=f"<= {factor:g}x {PEER}",
        goal_met=mine <= factor * theirs,
    )


def _seed_row(torch: Any, quick: bool, evaluate: bool = False) -> Row:
    layers, passes = (1, 3) if quick else (6, 10)
    case = f"seed: TransformerEncoder {layers}x512, {passes} passes of 1024x512, no_grad"
    if evaluate:
        case += ", eval()"
    progress(f"[{AREA}] {case}")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        # "enable_nested_tensor is True, but self.use_nested_tensor is False": the seed
        # workload is written without batch_first, so torch's nested-tensor path is off anyway.
        warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
        layer = torch.nn.TransformerEncoderLayer(512, 8, 2048)
        on_cpu = torch.nn.TransformerEncoder(layer, layers).train(not evaluate)
    models = {"cpu": on_cpu, "mpsrt": copy.deepcopy(on_cpu).to("mpsrt")}

    def make(device: str) -> Callable[[], object]:
        model = models[device]
        return lambda: model(torch.zeros(1024, 512).to(device))

    with torch.no_grad():
        # One pass per sample, `passes` samples per device in alternating turns (after one
        # warm-up pass each): the row is `passes` times the median pass.
        sec = _per_call(torch, make, 1, rounds=passes, repeats=1)
    row = _row(case, {d: s * passes for d, s in sec.items()}, "s", 1.0, 1.05)
    row.note = f"{passes} x the median pass"
    return row


def _seed_eval_row(torch: Any, quick: bool) -> Row:
    return _seed_row(torch, quick, evaluate=True)


def _mlp_row(torch: Any, quick: bool) -> Row:
    case = "train step: MLP 3 x Linear(512), batch 256, SGD"
    progress(f"[{AREA}] {case}")
    nn = torch.nn
    torch.manual_seed(0)
    on_cpu = nn.Sequential(
        nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512)
    )
    x, y = torch.randn(256, 512), torch.randn(256, 512)
    models = {"cpu": on_cpu, "mpsrt": copy.deepcopy(on_cpu).to("mpsrt")}

    def make(device: str) -> Callable[[], object]:
        model = models[device]
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        inp, target = x.to(device), y.to(device)

        def step() -> None:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(inp), target)
            loss.backward()
            opt.step()

        return step

    sec = _per_call(torch, make, 5, rounds=2 if quick else 5, repeats=2 if quick else 4)
    return _row(case, sec, "ms", 1e3, 1.1)


def _add_row(torch: Any, quick: bool) -> Row:
    case = "t.add_(1), 1 element"
    progress(f"[{AREA}] {case}")

    def make(device: str) -> Callable[[], object]:
        t = torch.zeros(1, device=device)
        return lambda: t.add_(1)

    sec = _per_call(torch, make, 1000, rounds=3 if quick else 10, repeats=3 if quick else 5)
    row = _row(case, sec, "ns", 1e9, 2.0)
    # The goal is the device's own cost per op: at most 100 ns over torch cpu's call.
    assert row.value is not None and row.peer_value is not None
    row.goal = f"<= {PEER} + 100 ns"
    row.goal_met = row.value <= row.peer_value + 100
    row.note = f"+{row.value - row.peer_value:.0f} ns per op"
    return row


def _rand_row(torch: Any, quick: bool) -> Row:
    n = 16 * MiB
    case = "torch.rand(16 Mi float32), waited for"
    progress(f"[{AREA}] {case}")

    def make(device: str) -> Callable[[], object]:
        return lambda: torch.rand(n, device=device)

    sec = _per_call(torch, make, 1, rounds=2 if quick else 5, repeats=2 if quick else 3)
    mine, theirs = 4 * n / sec["mpsrt"] / 1e9, 4 * n / sec["cpu"] / 1e9
    return Row(
        AREA,
        case,
        mine,
        "GB/s",
        PEER,
        theirs,
        goal=f">= 10x {PEER}",
        goal_met=mine >= 10 * theirs,
        note="each call allocates its 64 MiB output (mpsrt: its caching allocator; cpu: malloc)",
    )


def _empty_row(torch: Any, quick: bool) -> Row:
    case = "torch.empty(1 MiB, uint8) + release"
    progress(f"[{AREA}] {case}")

    def make(device: str) -> Callable[[], object]:
        return lambda: torch.empty(MiB, dtype=torch.uint8, device=device)

    sec = _per_call(torch, make, 5000, rounds=2 if quick else 6, repeats=5 if quick else 10)
    return _row(case, sec, "ns", 1e9, 1.0)


# A zoo row's sample: passes enough for about this many seconds (a tiny model's single pass,
# a fraction of a millisecond, is at the mercy of one timer tick or one interruption).
ZOO_SAMPLE_SECONDS = 0.01


def _zoo_row(torch: Any, quick: bool, name: str, size: str) -> Row:
    from . import zoo_models

    try:
        zoo = zoo_models.build(name, size)
    except zoo_models.Unavailable as e:
        return Row(AREA, f"zoo: {name} forward", None, "", note=f"skipped: {e}")
    shape = "x".join(str(n) for n in zoo.inputs.shape)
    case = f"zoo: {name} forward {shape}, eval(), no_grad"
    progress(f"[{AREA}] {case}")
    on_cpu = zoo.model.eval()
    models = {"cpu": on_cpu, "mpsrt": copy.deepcopy(on_cpu).to("mpsrt")}

    def make(device: str) -> Callable[[], object]:
        model, x = models[device], zoo.inputs.to(device)
        return lambda: zoo.output(model, x)

    with torch.no_grad():
        # Passes per sample from a warm pass on the CPU; alternating turns (after one warm-up
        # sample each): the median pass.
        run_cpu = make("cpu")
        run_cpu()
        t0 = time.perf_counter()
        run_cpu()
        one = time.perf_counter() - t0
        passes = max(1, min(100, round(ZOO_SAMPLE_SECONDS / max(one, 1e-6))))
        sec = _per_call(torch, make, passes, rounds=2 if quick else 8, repeats=2 if quick else 3)
    # The sizes the tests run (tiny: the per-op cost weighs most) have the tighter goal.
    return _row(case, sec, "ms", 1e3, 1.05 if size == "test" else 1.1)


def _zoo_rows(torch: Any, quick: bool) -> list[Row]:
    sizes = ("test",) if quick else ("bench", "test")
    return [_zoo_row(torch, quick, name, size) for size in sizes for name in ZOO]


# Every family of the zoo has a row.
ZOO = (
    "resnet18",
    "mobilenet_v3_small",
    "vit",
    "swin",
    "gpt2",
    "bert",
    "lstm_lm",
    "unet",
    "efficientnet_b0",
    "convnext",
    "llama",
    "t5",
    "diffusion_unet",
)

_CPU_ROWS = (_seed_row, _seed_eval_row, _mlp_row, _add_row, _rand_row, _empty_row, _zoo_rows)

SKIPPED_DISCRETE = (
    "skipped: the device's memory is not host memory (unified_memory=False) and its ops run as "
    "CPU kernels (MPSRT_TORCH_KERNELS=cpu, or a device without mpsrt's kernels): on host copies "
    "staged over the bus, with no device peer to stand beside"
)


def run(quick: bool, backend: str = "cpu", peers: Peers | None = None) -> list[Row]:
    try:
        import torch
    except ImportError:
        return _unavailable("torch is not installed: pip install torch (or '.[bench]')")
    peers = peers or current(backend)
    try:
        importlib.import_module("mpsrt.torch")  # registers device="mpsrt", once per process
    except (ImportError, RuntimeError, OSError) as e:
        return _unavailable(f"import mpsrt.torch failed: {e}")
    try:
        torch.empty(1, device="mpsrt")
    except RuntimeError as e:
        return _unavailable(f"backend {mpsrt.backend()}: {e}")
    on_kernels = torch.mpsrt._kernels_enabled()
    if not peers.unified and not on_kernels:
        return _unavailable(SKIPPED_DISCRETE)
    rows = []
    makers = [lambda t, q: bench_torch_gpu.rows(t, q, peers)] if on_kernels else _CPU_ROWS
    try:
        for make_row in makers:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("default")  # each distinct warning once
                row = make_row(torch, quick)
            rows.extend(row if isinstance(row, list) else [row])
            # A warning is reported beside the figure it came with, not raised mid-table.
            said = dict.fromkeys(str(w.message).split(". ")[0] for w in caught)
            last = rows[-1]
            last.note = "; ".join([last.note, *(f"warned: {m}" for m in said)]).lstrip("; ")
    finally:
        # The runtime is re-created for the next backend: no mpsrt tensor may outlive the area.
        gc.collect()
        torch.mpsrt.synchronize()
    if on_kernels:
        return rows
    threads = torch.get_num_threads()
    rows[0].note += f"; torch's intra-op threads: {threads} (its default, for both devices)"
    cpu_goals(rows, backend)  # the goals were set for the cpu backend
    return rows
