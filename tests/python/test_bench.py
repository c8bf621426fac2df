"""python -m bench (the benchmark runner in bench/): the `torch` area under --quick yields its
rows, each beside torch's CPU with a goal; without torch it says so in one row."""

from __future__ import annotations

import json
import pathlib
import sys

import mpsrt
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TORCH_ROWS = ("seed: ", "seed: ", "train step: ", "t.add_(1)", "torch.rand(", "torch.empty(")
# The model zoo's rows, one per family (bench_torch.ZOO); without torchvision or transformers (the
# `zoo` extra) those families' rows have no figure and say why.
ZOO_ROWS = (
    *("resnet18", "mobilenet_v3_small", "vit", "swin", "gpt2", "bert", "lstm_lm", "unet"),
    *("efficientnet_b0", "convnext", "llama", "t5", "diffusion_unet"),
)


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch, backend: str):
    """The bench package from the repository, with MPSRT_BACKEND restored afterwards (the
    runner sets it for the backend it runs on)."""
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setenv("MPSRT_BACKEND", backend)
    import bench

    return bench


def bench_zoo_families() -> list[str]:
    from bench import zoo_models

    return list(zoo_models.FAMILIES)


def test_torch_area_quick(bench, backend: str, tmp_path: pathlib.Path) -> None:
    pytest.importorskip("torch", reason="torch is not installed: pip install torch")
    from bench.__main__ import main

    out = tmp_path / "bench.json"
    assert main(["--only", "torch", "--quick", "--backend", backend, "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {r["area"] for r in rows} == {"torch"}
    assert {r["backend"] for r in rows} == {backend}
    if not mpsrt.get_device_properties().unified_memory:  # CI's discrete run, on vulkan
        assert len(rows) == 1 and rows[0]["value"] is None, rows
        assert "its ops run as CPU kernels" in rows[0]["note"]
        return
    prefixes = TORCH_ROWS + tuple(f"zoo: {name} forward" for name in ZOO_ROWS)
    assert [r["name"].startswith(p) for r, p in zip(rows, prefixes)] == [True] * len(prefixes)
    assert len(rows) == len(prefixes)
    assert set(ZOO_ROWS) == set(bench_zoo_families())  # every family of the zoo has a row
    zoo = rows[len(TORCH_ROWS) :]
    for r in zoo:
        if r["value"] is None:
            assert r["note"].startswith("skipped: ") and "not installed" in r["note"], r
    rows = rows[: len(TORCH_ROWS)] + [r for r in zoo if r["value"] is not None]
    for r in rows:
        assert r["peer_name"] == "torch cpu"
        assert r["value"] > 0 and r["peer_value"] > 0 and r["ratio"] > 0, r
        assert r["goal"].startswith(("<= ", ">= ")), r
        if backend == "cpu":
            assert isinstance(r["goal_met"], bool), r
        else:  # goals set for the cpu backend are shown, not judged
            assert r["goal"].endswith("(cpu)") and r["goal_met"] is None, r
    units = [r["unit"] for r in rows]
    assert units == ["s", "s", "ms", "ns", "GB/s", "ns"] + ["ms"] * (len(rows) - len(TORCH_ROWS))


def test_torch_area_without_torch(bench, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    from bench import bench_torch

    rows = bench_torch.run(True)
    assert len(rows) == 1 and rows[0].value is None
    assert "torch is not installed" in rows[0].note
