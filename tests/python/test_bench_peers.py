"""python -m bench on a GPU backend: which peers a device row stands beside (bench/peers.py),
goals set for a GPU, and the device-style rows run against a stand-in device peer (torch's CPU
device behind the interface of torch.cuda) on a device that says its memory is not host
memory, so that the path of a discrete GPU runs on any machine.

No timing is asserted: only which rows exist, beside which peers, and which goals are judged.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import threading
import time
from types import SimpleNamespace

import mpsrt
import pytest
from conftest import AVAILABLE, BACKENDS

ROOT = pathlib.Path(__file__).resolve().parents[2]
GiB = 1 << 30

NVIDIA = SimpleNamespace(
    name="NVIDIA H100 80GB HBM3",
    unified_memory=False,
    details="driver=NVIDIA 580.159.04, api=1.4.312, queues=8",
    recommended_max_memory=64 * GiB,
)
LAVAPIPE = SimpleNamespace(
    name="llvmpipe (LLVM 15.0.6, 256 bits)",
    unified_memory=True,
    details="driver=llvmpipe Mesa 22.3.6 (LLVM 15.0.6), api=1.3.230, queues=1",
    recommended_max_memory=GiB,
)
RADEON = SimpleNamespace(name="AMD Radeon RX 7900 XTX", unified_memory=False, details="")
APPLE = SimpleNamespace(name="Apple M3 Max", unified_memory=True, details="")
CPU = SimpleNamespace(name="AMD EPYC", unified_memory=True, details="kernels=avx512")

# CPU peers of today's rows: none of them may stand beside a device row of a discrete device.
CPU_PEERS = {
    "C memset", "C memcpy", "numpy fill", "numpy u32 fill", "numpy copyto", "torch fill_",
    "torch i32 fill_", "torch copy_", "numpy.empty", "torch.empty", "torch.cpu.Event",
    "torch CPU t.add_(1), 1 elem", "torch cpu",
}  # fmt: skip


@pytest.fixture
def peers_mod(monkeypatch: pytest.MonkeyPatch, backend: str):
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setenv("MPSRT_BACKEND", backend)
    from bench import peers

    return peers


def libs(peers_mod, *, cuda: bool | str = True, cupy: bool = False, mps: bool = False):
    L = peers_mod.Library
    out = {}
    if cuda is True:
        out["torch.cuda"] = L("torch.cuda", True, "torch 2.11, CUDA 13.0, NVIDIA H100", ("nvidia",))
    else:
        why = cuda or "not available (torch built without CUDA)"
        out["torch.cuda"] = L("torch.cuda", False, why)
    out["cupy"] = (
        L("cupy", True, "cupy 13", ("nvidia",)) if cupy else L("cupy", False, "not installed")
    )
    if mps:
        out["torch.mps"] = L("torch.mps", True, "torch 2.11", ("apple",))
        out["mlx"] = L("mlx", True, "mlx 0.30, GPU stream", ("apple",))
    return out


@pytest.mark.parametrize(
    ("backend_name", "props", "vendor"),
    [
        ("vulkan", NVIDIA, "nvidia"),
        ("vulkan", LAVAPIPE, "software"),
        ("vulkan", RADEON, "amd"),
        ("metal", APPLE, "apple"),
        ("cpu", CPU, "host"),  # "AMD" in a CPU's name is not a GPU
        ("vulkan", SimpleNamespace(name="Intel(R) Arc(tm) A770"), "intel"),
    ],
)
def test_vendor(peers_mod, backend_name: str, props: SimpleNamespace, vendor: str) -> None:
    assert peers_mod.vendor_of(backend_name, props.name, getattr(props, "details", "")) == vendor


def test_discrete_nvidia_with_torch_cuda_has_only_device_peers(peers_mod) -> None:
    p = peers_mod.choose_peers("vulkan", NVIDIA, libs(peers_mod, cupy=True))
    assert p.device_peers == ("torch.cuda", "cupy")
    assert not p.unified and not p.cpu_peers and p.device_style and p.gpu
    assert p.missing == {}
    header = p.describe()
    assert header["memory"].startswith("discrete")
    assert "torch.cuda (torch 2.11, CUDA 13.0, NVIDIA H100)" in header["device peers"]
    assert "no CPU peer" in header["device rows"] and header["gpu goals"] == "judged"


def test_torch_cuda_comes_first_whatever_the_probe_order(peers_mod) -> None:
    found = libs(peers_mod, cupy=True)
    reordered = {"cupy": found["cupy"], "torch.cuda": found["torch.cuda"]}
    assert peers_mod.choose_peers("vulkan", NVIDIA, reordered).device_peers == (
        "torch.cuda",
        "cupy",
    )


def test_lavapipe_unified_keeps_cpu_peers(peers_mod) -> None:
    p = peers_mod.choose_peers("vulkan", LAVAPIPE, libs(peers_mod, cuda=False))
    assert p.device_peers == ()
    assert p.unified and p.cpu_peers and not p.device_style and not p.gpu
    assert p.missing == {
        "torch.cuda": "not available (torch built without CUDA)",
        "cupy": "not installed",
    }
    header = p.describe()
    assert header["memory"].startswith("unified") and "CPU peers" in header["device rows"]
    assert header["not used"].startswith("torch.cuda: not available (torch built without CUDA)")
    assert header["gpu goals"].startswith("shown, not judged")


def test_lavapipe_is_not_torch_cudas_device(peers_mod) -> None:
    """torch.cuda works (an NVIDIA GPU is in the machine) but the device is lavapipe."""
    p = peers_mod.choose_peers("vulkan", LAVAPIPE, libs(peers_mod))
    assert p.device_peers == () and p.cpu_peers
    assert p.missing["torch.cuda"].startswith("not this device's peer (llvmpipe")


def test_lavapipe_forced_discrete_has_no_peer_at_all(peers_mod) -> None:
    """MPSRT_VULKAN_MEMORY=discrete on lavapipe: not host memory, not a GPU, no device peer."""
    props = SimpleNamespace(**vars(LAVAPIPE))
    props.unified_memory = False
    p = peers_mod.choose_peers("vulkan", props, libs(peers_mod, cuda=False))
    assert p.device_peers == () and not p.cpu_peers and p.device_style and not p.gpu
    note = p.no_peer_note()
    assert "torch built without CUDA" in note and "CPU peers do not touch device memory" in note


def test_discrete_without_a_device_peer_drops_cpu_peers(peers_mod) -> None:
    p = peers_mod.choose_peers("vulkan", RADEON, libs(peers_mod))  # a CUDA build of torch
    assert p.device_peers == () and not p.cpu_peers and p.device_style and p.gpu
    assert p.missing["torch.cuda"].startswith("not this device's peer (AMD Radeon")
    assert p.describe()["device rows"].startswith("mpsrt alone")


def test_a_peer_that_fails_to_start_is_not_used(peers_mod, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import gpu_peers

    def broken() -> None:
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device")

    monkeypatch.setitem(gpu_peers.FACTORIES, "torch.cuda", broken)
    p = peers_mod.choose_peers("vulkan", NVIDIA, libs(peers_mod))
    assert p.instances() == [] and p.device_peers == () and p.device_style
    assert p.missing["torch.cuda"].startswith("failed to start: RuntimeError: CUDA error")
    assert p.describe()["device peers"] == "none"
    assert "failed to start" in p.no_peer_note()


def test_amd_with_a_rocm_build_of_torch(peers_mod) -> None:
    rocm = {"torch.cuda": peers_mod.Library("torch.cuda", True, "torch, ROCm 6.4", ("amd",))}
    p = peers_mod.choose_peers("vulkan", RADEON, rocm)
    assert p.device_peers == ("torch.cuda",) and not p.cpu_peers and p.gpu
    assert peers_mod.choose_peers("vulkan", NVIDIA, rocm).device_peers == ()


def test_cpu_backend_has_no_device_peer(peers_mod) -> None:
    p = peers_mod.choose_peers("cpu", CPU, libs(peers_mod))
    assert p.device_peers == () and p.cpu_peers and not p.device_style and not p.gpu
    assert p.missing == {} and "gpu goals" not in p.describe()


def test_apple_unified_has_device_and_cpu_peers(peers_mod) -> None:
    p = peers_mod.choose_peers("metal", APPLE, libs(peers_mod, cuda=False, mps=True))
    assert p.device_peers == ("torch.mps", "mlx")
    assert p.cpu_peers and p.device_style and p.gpu
    assert peers_mod.goal_peer(p) == "torch.mps"


def test_gpu_goals_are_judged_only_on_a_gpu_against_a_real_peer(peers_mod) -> None:
    from bench.timing import Row

    gpu = peers_mod.choose_peers("vulkan", NVIDIA, libs(peers_mod))
    soft = peers_mod.choose_peers("vulkan", LAVAPIPE, libs(peers_mod, cuda=False))
    for peers, real, judged in ((gpu, True, True), (gpu, False, False), (soft, True, False)):
        row = Row("x", "case", 1.0, "GB/s", "torch.cuda", 2.0)
        peers_mod.gpu_goal(row, ">= 0.9x torch.cuda", False, peers, real)
        assert row.goal == ">= 0.9x torch.cuda (gpu)"
        assert row.goal_met is (False if judged else None)


def test_cpu_goals_are_tagged_once(peers_mod) -> None:
    from bench.timing import Row

    conditional = ">= 1.7x one stream (when the ceiling is >= 1.9x)"
    rows = [
        Row("x", "a", 1.0, "x", goal=conditional, goal_met=True),
        Row("x", "b", 1.0, "x", goal=">= 1x one stream (gpu)", goal_met=None),
    ]
    peers_mod.cpu_goals(rows, "vulkan")
    assert rows[0].goal.endswith("(when the ceiling is >= 1.9x) (cpu)") and rows[0].goal_met is None
    assert rows[1].goal == ">= 1x one stream (gpu)"


def test_big_rows_are_sized_down(peers_mod) -> None:
    p = peers_mod.choose_peers("vulkan", NVIDIA, libs(peers_mod, cuda=False))
    assert p.instances() == []
    assert peers_mod.big_size(p, quick=False) == (GiB, "")
    size, note = peers_mod.big_size(p, quick=True)
    assert size == 256 << 20 and "--quick" in note
    small = dataclasses.replace(p, memory_bytes=2 * GiB, _instances=[])
    size, note = peers_mod.big_size(small, quick=False)
    assert size == 256 << 20 and "2.0 GiB of device memory free" in note


# ------------------------------------------------------------------ simulated discrete device

STANDIN = "torch cpu (stand-in for torch.cuda)"
DEVICE_AREAS = ("memory", "fill_copy", "random", "dispatch", "streams", "torch")


@pytest.fixture
def discrete(peers_mod, monkeypatch: pytest.MonkeyPatch, backend: str):
    """The runner sees an NVIDIA device whose memory is not host memory, and torch.cuda's
    peer is torch's CPU device (not a GPU: goals shown, not judged). The device rows must not
    take host views of raw device memory: those calls fail here."""
    torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch")
    from mpsrt import _bench

    gpu_backends = [b for b in BACKENDS if b in AVAILABLE and b != "cpu"]
    if backend == "cpu" and gpu_backends:  # ~20 s a run: once, on the backend a GPU would use
        pytest.skip(f"simulated on {gpu_backends[0]}")

    import bench.__main__ as runner
    from bench import gpu_peers

    def current(name: str):
        p = peers_mod.choose_peers("vulkan", NVIDIA, libs(peers_mod))
        # Small sizes (a short device memory): the big rows come down to their floor.
        return dataclasses.replace(p, backend=name, gpu=False, memory_bytes=512 << 20)

    monkeypatch.setattr(runner, "current", current)
    monkeypatch.setitem(
        gpu_peers.FACTORIES, "torch.cuda", lambda: gpu_peers.TorchPeer("cpu", STANDIN, real=False)
    )

    def no_host_view(*args: object) -> None:
        raise AssertionError("a device row took a host view of device memory")

    for name in ("numpy", "c_memset", "c_memcpy_from"):
        monkeypatch.setattr(_bench.RawHeap, name, no_host_view)
    monkeypatch.setattr("bench.bench_random.CASES", [("uniform", "float32"), ("bits", "uint32")])
    # One sample per row: the rows' places are checked, not their figures (a normal fill of
    # 128 MiB takes ~0.8 s on lavapipe; --quick's 3 rounds of 3 took most of the run).
    monkeypatch.setattr(
        "bench.bench_fill_copy.device_timing",
        lambda quick: {"rounds": 1, "warmup": 0, "repeats": 1, "min_time": 0.0},
    )
    return torch


def test_discrete_device_rows_stand_beside_the_device_peer_only(
    discrete, backend: str, tmp_path: pathlib.Path
) -> None:
    from bench.__main__ import main

    out = tmp_path / "bench.json"
    # The areas' time guard is off: this test checks where rows stand, on machines of any speed.
    args = ["--quick", "--backend", backend, "--only", ",".join(DEVICE_AREAS), "--json", str(out)]
    assert main([*args, "--area-timeout", "0"]) == 0
    result = json.loads(out.read_text())
    (device,) = result["header"]["devices"]
    assert device["memory"].startswith("discrete") and device["device_peer_names"] == ["torch.cuda"]
    assert result["header"]["not_finished"] == []
    rows = result["rows"]
    assert {r["area"] for r in rows} == set(DEVICE_AREAS)
    assert not [
        r
        for r in rows
        if r["peer_name"] in CPU_PEERS
        or r["peer_name"].startswith(("numpy", "torch uniform_", "torch random_", "mlx random"))
    ], "a CPU peer on a device row"

    def named(area: str, prefix: str) -> list[dict]:
        return [r for r in rows if r["area"] == area and r["name"].startswith(prefix)]

    # The rows with a GPU goal against torch.cuda (here its stand-in), by area and case.
    # Buffer.numpy() copies where the runtime's memory really is discrete
    # (MPSRT_VULKAN_MEMORY=discrete); where it aliases, the device->host row says so instead.
    copies = not mpsrt.get_device_properties().unified_memory
    beside = [r for r in rows if r["peer_name"] == STANDIN and r["goal"]]
    assert sorted((r["area"], r["name"].split(" (")[0]) for r in beside) == sorted([
        ("dispatch", "1-element fill_ + synchronize"), ("fill_copy", "copy 64 MiB"),
        ("fill_copy", "fill_ float32 64 MiB"), ("fill_copy", "host→device 128 MiB"),
        ("memory", "empty(1 MiB) + release"), ("random", "bits uint32 128 MiB"),
        ("random", "bits uint32 64 MiB"), ("random", "normal float32 128 MiB"),
        ("random", "uniform float32 128 MiB"),
        ("random", "uniform float32 64 MiB"), ("streams", "Event.record() + query()"),
    ] + ([("fill_copy", "device→host 128 MiB")] if copies else []))  # fmt: skip
    for r in beside:
        assert r["value"] > 0 and r["peer_value"] > 0, r
        assert r["goal"].endswith("(gpu)") and STANDIN in r["goal"], r
    for r in rows:
        if r["goal"].endswith("(gpu)"):
            assert r["goal_met"] is None, r  # not a GPU (and a stand-in peer): not judged
    (d2h,) = named("fill_copy", "device→host")
    assert d2h["goal"].endswith("(gpu)")
    if not copies:
        assert d2h["value"] is None and "aliases" in d2h["note"]
    # the goal rows that have no peer: judged on a GPU only
    two = named("streams", "two streams, byte fills of 2 MiB")
    assert [r["peer_name"] for r in two] == ["one stream", f"{STANDIN}, two streams"]
    # host-side rows keep their peers
    hits = [r for r in named("memory", "C++ alloc+free") if "cache miss" not in r["name"]]
    assert hits and {r["peer_name"] for r in hits} == {"posix_memalign+free"}
    (torch_row,) = named("torch", "")
    assert torch_row["value"] is None and "not host memory" in torch_row["note"]


def test_unified_rows_stay_as_before(peers_mod, backend: str) -> None:
    """cpu and lavapipe (unified memory, no device peer): the device rows' peers are the CPU
    libraries, and no device-style row appears."""
    from bench import bench_fill_copy

    if not mpsrt.get_device_properties().unified_memory:
        pytest.skip("the runtime's memory is discrete here (MPSRT_VULKAN_MEMORY=discrete)")
    p = peers_mod.choose_peers(backend, CPU if backend == "cpu" else LAVAPIPE, {})
    assert not p.device_style
    rows = bench_fill_copy._at_size(True, 1 << 20)
    assert {"C memset", "numpy fill", "C memcpy"} <= {r.peer_name for r in rows}


def test_torch_area_skips_a_discrete_device_without_kernels(peers_mod, backend: str) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch")
    import mpsrt.torch  # noqa: F401

    from bench import bench_torch

    p = peers_mod.choose_peers(backend, NVIDIA, {})
    previous = torch.mpsrt._set_kernels("cpu")
    try:
        t0 = time.perf_counter()
        rows = bench_torch.run(True, backend=backend, peers=p)
    finally:
        torch.mpsrt._set_kernels(previous)
    assert time.perf_counter() - t0 < 30
    assert len(rows) == 1 and rows[0].value is None
    assert "its ops run as CPU kernels" in rows[0].note


def test_torch_area_on_kernels_measures_the_gpu_rows(
    peers_mod, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch")
    import mpsrt.torch  # noqa: F401

    from bench import bench_torch, bench_torch_gpu

    tiny = {"layers": 1, "batch": 1, "seq": 8, "width": 32, "mlp_batch": 8, "n": 64, "mib": 1}
    monkeypatch.setitem(bench_torch_gpu.SIZES, True, tiny)
    monkeypatch.setitem(bench_torch_gpu.TIMING, True, {"rounds": 1, "repeats": 1, "warmup": 0})

    p = peers_mod.choose_peers(backend, NVIDIA, {})  # a GPU whose peers are not in this process
    previous = torch.mpsrt._set_kernels("device")
    try:
        on_kernels = torch.mpsrt._kernels_enabled()
        rows = bench_torch.run(True, backend=backend, peers=p)
    finally:
        torch.mpsrt._set_kernels(previous)
    if not on_kernels:  # the cpu backend: no kernels, so a discrete device is skipped
        assert len(rows) == 1 and "its ops run as CPU kernels" in rows[0].note
        return
    cases = [r.name for r in rows]
    assert len(cases) == 9 and cases[0].startswith("TransformerEncoder")
    assert "float32 GEMM" in cases[3] and "float16 GEMM" in cases[4]
    host = rows[5:]  # the host cost of one op: torch CPU computing it beside (no torch.cuda here)
    assert [r.name.split(":")[0] for r in host] == ["host cost"] * 4, cases
    for r in host:
        assert r.unit == "ns" and r.value > 0 and r.peer_name == "torch cpu (computed)", r
        assert r.peer_value > 0 and r.goal in ("<= 1.5 us", "<= 3 us"), r
        # judged where the op ran on a kernel; a fallback says so instead
        assert (r.goal_met is None) == ("through the fallback" in r.note), r
    for r in rows[:5]:
        assert r.value is not None and r.value > 0 and not r.peer_name, r
        assert r.goal.endswith("(gpu)") and r.goal_met is None, r
        assert "no device peer" in r.note, r  # why no peer stands beside it


# ------------------------------------------------------------------ the runner's guards


def test_an_area_past_its_time_guard_is_reported(
    peers_mod, backend: str, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("the time guard works in the main thread only")
    from bench import bench_binding
    from bench.__main__ import main

    monkeypatch.setattr(bench_binding, "run", lambda quick: time.sleep(30))
    out = tmp_path / "bench.json"
    t0 = time.perf_counter()
    args = ["--quick", "--backend", backend, "--only", "binding", "--area-timeout", "0.5"]
    assert main([*args, "--json", str(out)]) == 3
    assert time.perf_counter() - t0 < 20
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert row["name"] == "binding: not finished" and "stopped after 0.5 s" in row["note"]
    assert result["header"]["not_finished"] == [
        f"{backend}/binding: stopped after 0.5 s (--area-timeout)"
    ]


def test_an_area_that_fails_is_reported(
    peers_mod, backend: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import bench_binding
    from bench.__main__ import main

    def broken(quick: bool) -> list:
        raise RuntimeError("[bench] broken on purpose")

    monkeypatch.setattr(bench_binding, "run", broken)
    assert main(["--quick", "--backend", backend, "--only", "binding"]) == 3
    out = capsys.readouterr().out
    assert "binding: not finished" in out and "RuntimeError: [bench] broken on purpose" in out


# ------------------------------------------------------------------ the settings sweep


def test_the_sweep_table_marks_each_rows_best_variant(backend: str) -> None:
    from bench import sweep

    def r(area: str, name: str, value: float, unit: str, peer: float | None = None) -> dict:
        peer_name = "torch.cuda" if peer else ""
        row = dict(area=area, name=name, value=value, unit=unit, peer_name=peer_name)
        return {**row, "peer_value": peer}

    results = {
        "default": {
            "rows": [
                r("fill_copy", "copy 1 GiB", 100.0, "GB/s", 150.0),
                r("dispatch", "hot, median", 9.0, "µs"),
            ]
        },
        "vector4": {"rows": [r("fill_copy", "copy 1 GiB", 120.0, "GB/s", 150.0)]},
        "spin0": {"rows": [r("dispatch", "hot, median", 7.5, "µs")]},
        "broken": {"error": "exit 1"},
    }
    lines = sweep.table(results).splitlines()
    copy = next(x for x in lines if "copy 1 GiB" in x)
    assert "120 GB/s *" in copy and "100 GB/s *" not in copy and "torch.cuda 150" in copy
    hot = next(x for x in lines if "hot, median" in x)
    assert "7.5 µs *" in hot and "9 µs *" not in hot  # a time: lower is better
    assert sweep.main(["--variants", "default,nonsense"]) == 2
