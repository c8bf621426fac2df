"""Where the PyTorch device's ops run (MPSRT_TORCH_KERNELS, torch.mpsrt._set_kernels): mpsrt's
kernels on a GPU, CPU kernels on the cpu backend and CPU-type devices unless asked, and ops
without a kernel through the fallback, counted."""

from __future__ import annotations

import mpsrt
import pytest
from conftest import AVAILABLE, reset_runtime, run_python
from kernel_check import torch


def test_modes_choose_where_ops_run(backend: str) -> None:
    has_kernels = backend != "cpu"  # vulkan (lavapipe here) and metal devices have them
    previous = torch.mpsrt._set_kernels("device")
    try:
        assert torch.mpsrt._kernels_enabled() == has_kernels
        assert torch.mpsrt._set_kernels("cpu") == "device"
        assert torch.mpsrt._kernels_enabled() is False
        assert torch.mpsrt._set_kernels("auto") == "cpu"
        # auto: not on the cpu backend nor on a CPU-type device (lavapipe is one).
        cpu_type = backend == "cpu" or "llvmpipe" in mpsrt.get_device_name(0)
        assert torch.mpsrt._kernels_enabled() == (has_kernels and not cpu_type)
    finally:
        torch.mpsrt._set_kernels(previous)


def test_the_glue_asks_a_recreated_runtime_again(backend: str) -> None:
    """What the glue caches of the runtime (the devices' kernel facts, the mode _set_kernels
    chose) belongs to one runtime: a re-created one (a fork's child, the tests' reset onto
    another backend) is asked again, without the glue being told."""
    if "vulkan" not in AVAILABLE:
        pytest.skip("needs the vulkan backend (a device with kernels) beside cpu")
    try:
        reset_runtime("vulkan", MPSRT_TORCH_KERNELS="device")
        assert torch.mpsrt._kernels_enabled() is True
        assert torch.mpsrt._set_kernels("cpu") == "device"
        assert torch.mpsrt._kernels_enabled() is False
        reset_runtime("vulkan", MPSRT_TORCH_KERNELS="device")
        # The mode set for the old runtime is gone with it: the new one's option holds.
        assert torch.mpsrt._kernels_enabled() is True
        reset_runtime("cpu", MPSRT_TORCH_KERNELS="device")
        assert torch.mpsrt._kernels_enabled() is False  # the cpu backend has no kernels
        doubled = (torch.arange(6.0, device="mpsrt") * 2).cpu()
        assert doubled.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    finally:
        reset_runtime(backend)


def test_a_bad_mode_is_refused_and_changes_nothing() -> None:
    before = torch.mpsrt._set_kernels("cpu")
    try:
        with pytest.raises(ValueError, match="expected auto, device or cpu"):
            torch.mpsrt._set_kernels("gpu")
        with pytest.raises(TypeError, match="must be a str"):
            torch.mpsrt._set_kernels(1)  # type: ignore[arg-type]
        assert torch.mpsrt._set_kernels("cpu") == "cpu"
    finally:
        torch.mpsrt._set_kernels(before)


def test_the_variable_sets_the_mode(backend: str) -> None:
    code = (
        "import torch, mpsrt.torch\n"
        "print(torch.mpsrt._set_kernels('device'), torch.mpsrt._kernels_enabled())\n"
    )
    r = run_python(code, backend, MPSRT_TORCH_KERNELS="device")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["device", "False" if backend == "cpu" else "True"]
    r = run_python(
        "import torch, mpsrt.torch\ntorch.ones(2, device='mpsrt')",
        backend,
        MPSRT_TORCH_KERNELS="gpu",
    )
    assert r.returncode != 0
    assert "MPSRT_TORCH_KERNELS='gpu' is not valid: expected auto, device or cpu" in r.stderr


def test_kernels_leave_no_fallback_and_ops_without_one_fall_back(device_kernels: bool) -> None:
    x = torch.randn(8, 8, device="mpsrt")
    torch.mpsrt.reset_fallback_counts()
    y = x * 2 + 1
    counts = torch.mpsrt.fallback_counts()
    if device_kernels:
        assert counts == {}
    else:
        assert counts == {"aten::mul.Tensor": 1, "aten::add.Tensor": 1}
    # An op without a kernel (kthvalue) runs as a CPU kernel, counted, with the right result.
    v, _ = torch.kthvalue(y, 3, dim=1)
    assert (
        torch.mpsrt.fallback_counts().get("aten::kthvalue.values", 0)
        + torch.mpsrt.fallback_counts().get("aten::kthvalue", 0)
        >= 1
    )
    torch.testing.assert_close(v.cpu(), torch.kthvalue(y.cpu(), 3, dim=1)[0])


def test_the_kernel_ops_are_listed() -> None:
    ops = torch.mpsrt._kernel_ops()
    assert ops == sorted(ops) and len(ops) == len(set(ops))
    for name in (
        "aten::add.Tensor",
        "aten::mm",
        "aten::_softmax",
        "aten::native_layer_norm",
        "aten::index_select",
        "aten::nll_loss_forward",
        "aten::_fused_adamw_",
    ):
        assert name in ops
    assert "aten::atan" not in ops and "aten::kthvalue" not in ops


def test_cpu_kernels_on_device_memory_give_torch_cpus_results(backend: str) -> None:
    """With the device's kernels off, ops run as torch's CPU kernels on the device tensors'
    memory (the typed host path where it is host-visible, else the fallback): indexing with
    lists of optional indices (device, CPU and absent ones), writes whose other operands share
    the written tensor's memory, out= forms that resize, and ops with several results."""

    def run(device: str) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(4, 5, 6, generator=g).to(device)
        mask = (x[:, 0, 0] > 0).to(device)
        rows = torch.tensor([3, 0, 3]).to(device)
        out = [
            x[rows],
            x[:, torch.tensor([1, 4])],  # a CPU index of a device tensor
            x[mask],
            x[rows, :, rows],
            x[None, ..., torch.tensor([5, 0]).to(device)],
        ]
        y = x.clone()
        y.index_put_((rows,), torch.ones(3, 5, 6).to(device), accumulate=True)
        y[1] = y[2]  # the value shares y's memory
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            y.index_put_((torch.tensor([0, 2]).to(device),), y[3], accumulate=True)
        out.append(y)
        z = x.clone()
        z.clamp_(min=z[0, 0, 0].item(), max=2.0).add_(z)  # self as the other operand too
        z.lt_(z.flip(0))
        out.append(z)
        values, indices = x.max(dim=1)
        out += [values, indices, x.amax((0, 2)), x.sum(-1), torch.gather(x, 2, indices[:, None])]
        r = torch.empty(0, dtype=torch.int64, device=device)
        torch.arange(3, 30, 4, out=r)
        s = torch.empty(2, 3, device=device)
        torch.arange(6, out=s)  # the range's size: torch keeps the shape
        out += [r, s, torch.arange(0.5, 2.0, 0.25, device=device)]
        w = x.clone().requires_grad_()
        torch.nn.functional.layer_norm(w, (6,)).clamp(-1, 1).pow(2).sum().backward()
        out.append(w.grad)
        return [t.cpu() for t in out]

    previous = torch.mpsrt._set_kernels("cpu")
    try:
        torch.mpsrt.reset_fallback_counts()
        got = run("mpsrt")
        counts = torch.mpsrt.fallback_counts()
    finally:
        torch.mpsrt._set_kernels(previous)
    expected = run("cpu")
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected)):
        assert a.dtype == b.dtype and a.shape == b.shape, i
        torch.testing.assert_close(a, b, msg=lambda m, i=i: f"result {i}: {m}")
    for op in ("aten::index.Tensor", "aten::_index_put_impl_", "aten::arange.start_out"):
        assert counts.get(op, 0) > 0, (op, counts)


def test_a_cpu_tensor_beside_device_tensors_raises_torchs_error(device_kernels: bool) -> None:
    """As on torch.cuda: an op given a CPU tensor with dims beside device tensors raises torch's
    error for two devices, in either order, where the device runs kernels or CPU kernels; a CPU
    scalar (a 0-dim tensor), CPU indices and a packed sequence's CPU batch sizes are taken."""
    x = torch.arange(6.0).view(2, 3).to("mpsrt")
    c = torch.ones(2, 3)
    message = (
        "Expected all tensors to be on the same device, but found at least two devices, "
        "mpsrt:0 and cpu!"
    )
    for op in (
        lambda: x + c,
        lambda: c * x,
        lambda: x.add_(c),
        lambda: torch.mm(x, c.t()),
        lambda: torch.cat([x, c]),
        lambda: torch.where(c > 0, x, x),
        lambda: torch.nn.functional.layer_norm(x, (3,), torch.ones(3)),
        lambda: torch.gather(x, 1, torch.zeros(2, 1, dtype=torch.int64)),
    ):
        with pytest.raises(RuntimeError) as raised:
            op()
        assert str(raised.value).startswith(message), str(raised.value)
    torch.testing.assert_close(x.cpu(), torch.arange(6.0).view(2, 3))  # nothing was written
    torch.testing.assert_close((x * torch.tensor(2.0)).cpu(), torch.arange(6.0).view(2, 3) * 2)
    torch.testing.assert_close(x[torch.tensor([1, 0])].cpu(), torch.arange(6.0).view(2, 3)[[1, 0]])
    lstm = torch.nn.LSTM(3, 4)
    seq = torch.randn(5, 2, 3)
    lengths = torch.tensor([5, 3])  # a packed sequence's lengths are a CPU tensor
    expected = lstm(torch.nn.utils.rnn.pack_padded_sequence(seq, lengths))[0].data
    packed = torch.nn.utils.rnn.pack_padded_sequence(seq.to("mpsrt"), lengths)
    got = lstm.to("mpsrt")(packed)[0].data
    torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-4)
