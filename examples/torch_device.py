"""The issue-17 seed workload on the PyTorch device "mpsrt", beside torch's CPU.

    python examples/torch_device.py

TransformerEncoder (512 wide, 6 layers), 10 forward passes on a 1024 x 512 input, exactly as
written for "mps", on device="mpsrt" and on "cpu" with the same seed; prints both times, the
largest difference and mpsrt's memory summary (torch's allocations are mpsrt's).
"""

from __future__ import annotations

import time

import mpsrt.torch  # noqa: F401  (registers device="mpsrt")
import torch


def seed_workload(device: str) -> tuple[torch.Tensor, float]:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048)
    model = torch.nn.TransformerEncoder(layer, 6).to(device)
    t0 = time.perf_counter()
    for _ in range(10):
        res = model(torch.zeros(1024, 512).to(device))
    out = res.detach().cpu()
    return out, time.perf_counter() - t0


def main() -> None:
    on_cpu, t_cpu = seed_workload("cpu")
    on_dev, t_dev = seed_workload("mpsrt")
    diff = (on_dev - on_cpu).abs().max().item()
    print(f"seed workload: mpsrt {t_dev:.2f} s, torch cpu {t_cpu:.2f} s, max |diff| {diff:.3g}")
    assert diff <= 1e-4, diff
    print(torch.mpsrt.memory_summary())


if __name__ == "__main__":
    main()
