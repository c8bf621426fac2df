"""The seed workload on the PyTorch device "mpsrt", beside torch's CPU.

    python examples/torch_device.py [--out DIR]

TransformerEncoder (512 wide, 6 layers), 10 forward passes on a 1024 x 512 input, exactly as
written for "mps", on device="mpsrt" and on "cpu" with the same seed. The model is in training
mode (as written), so dropout runs: on mpsrt its masks come from mpsrt's Philox generator, and
the CPU run draws the same masks from it (mpsrt.torch.cpu_reference_rng), so the two outputs
agree. Then: mpsrt's memory summary (torch's allocations are mpsrt's), a Perfetto trace of one
forward pass (each aten operator an interval on the stream's track, beside the allocator's
counters) and a memory snapshot with the Python frames of each allocation, rendered by torch's
memory viewer.
"""

from __future__ import annotations

import argparse
import contextlib
import pickle
import time
from pathlib import Path

import mpsrt
import mpsrt.torch
import torch


def build(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048)
    return torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False).to(device)


def seed_workload(device: str) -> tuple[torch.Tensor, float]:
    model = build(device)
    # On cpu, dropout's masks come from mpsrt's generator, as they do on the mpsrt device.
    rng = mpsrt.torch.cpu_reference_rng() if device == "cpu" else contextlib.nullcontext()
    t0 = time.perf_counter()
    with rng:
        for _ in range(10):
            res = model(torch.zeros(1024, 512).to(device))
        out = res.detach().cpu()
    return out, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=".", help="where the trace and the snapshot go")
    out_dir = Path(p.parse_args().out)
    out_dir.mkdir(parents=True, exist_ok=True)

    on_cpu, t_cpu = seed_workload("cpu")
    on_dev, t_dev = seed_workload("mpsrt")
    diff = (on_dev - on_cpu).abs().max().item()
    print(f"seed workload: mpsrt {t_dev:.2f} s, torch cpu {t_cpu:.2f} s, max |diff| {diff:.3g}")
    assert diff <= 1e-4, diff
    device_module = torch.get_device_module("mpsrt")  # torch.mpsrt
    print(device_module.memory_summary())

    # One forward pass under the profiler and under the allocation history.
    model = build("mpsrt")
    mpsrt.memory._record_memory_history(max_entries=100_000)
    mpsrt.profiler.start(mode="interval")
    with torch.no_grad():
        model(torch.zeros(1024, 512).to("mpsrt"))
    device_module.synchronize()
    mpsrt.profiler.stop()
    snapshot = mpsrt.memory._snapshot()
    mpsrt.memory._record_memory_history(enabled=None)

    trace = out_dir / "torch_device_trace.json"
    mpsrt.profiler.export_trace(trace)
    print(f"trace: {trace} (open it in https://ui.perfetto.dev)")
    pickled = out_dir / "torch_device_snapshot.pickle"
    pickled.write_bytes(pickle.dumps(snapshot))
    from torch.cuda import _memory_viz

    html = out_dir / "torch_device_memory.html"
    html.write_text(_memory_viz.trace_plot(snapshot))  # type: ignore[no-untyped-call]
    print(f"memory snapshot: {pickled}, rendered by torch's viewer: {html}")


if __name__ == "__main__":
    main()
