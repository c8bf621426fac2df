"""The PyTorch device "mpsrt" (import mpsrt.torch): registration, one allocator shared with
mpsrt, copies, operators through the CPU-kernel fallback, the seed workload vs CPU, bad input.

Skipped (visibly) when torch is not installed. Every test runs on both memory models (CI runs
the suite again with MPSRT_VULKAN_MEMORY=discrete): on discrete memory the ops without an mpsrt
kernel run as CPU kernels on staged host copies of their tensors. The glue is compiled at the first
`import mpsrt.torch` (a file lock makes xdist workers wait for one build).
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mpsrt
import pytest
from conftest import run_python

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch")
import mpsrt.torch  # noqa: E402  (after the importorskip)


@pytest.fixture(autouse=True)
def _free_tensors() -> Iterator[None]:
    # conftest re-creates the runtime between backends, which needs every Buffer freed:
    # tensors in reference cycles (autograd graphs, modules) go here.
    yield
    gc.collect()
    mpsrt.synchronize()


def test_registration() -> None:
    assert torch.device("mpsrt").type == "mpsrt"
    assert torch._C._get_privateuse1_backend_name() == "mpsrt"
    assert torch.accelerator.current_accelerator() == torch.device("mpsrt")
    assert torch.mpsrt.is_available()
    assert torch.mpsrt.device_count() == mpsrt.device_count()
    assert torch.accelerator.device_count() == mpsrt.device_count()
    assert torch.mpsrt.current_device() == mpsrt.current_device()


def test_import_again_is_a_no_op() -> None:
    import importlib

    importlib.reload(mpsrt.torch)
    assert torch._C._get_privateuse1_backend_name() == "mpsrt"


def test_allocation_is_shared_with_mpsrt() -> None:
    gc.collect()
    before = mpsrt.memory_allocated()
    t = torch.empty(64 << 20, dtype=torch.uint8, device="mpsrt")
    assert t.device == torch.device("mpsrt", 0)
    assert t.is_mpsrt
    grown = 64 << 20
    assert mpsrt.memory_allocated() - before == grown
    assert torch.mpsrt.memory_allocated() - before == grown
    assert torch.accelerator.memory_allocated() - before == grown
    assert (
        torch.accelerator.memory_stats()["allocated_bytes.all.current"]
        == (mpsrt.memory_stats()["allocated_bytes.all.current"])
    )
    assert torch.mpsrt.max_memory_allocated() >= before + grown
    del t
    mpsrt.synchronize()
    assert mpsrt.memory_allocated() == before


def test_small_host_tensors_come_from_a_per_thread_cache_of_aligned_blocks() -> None:
    # The glue's CPU allocator keeps freed blocks of up to 64 bytes per thread (torch makes a CPU
    # tensor of each Python number an op is called with): a freed block is handed out again, every
    # block is 64-byte aligned as torch's CPU allocations are, larger ones are not cached, and a
    # block freed on another thread (or by a thread that exits) is safe to use and free.
    import threading

    gc.collect()
    gc.disable()  # no collection may free a small block in between
    try:
        a = torch.empty(2, dtype=torch.float64)
        p = a.data_ptr()
        del a
        b = torch.empty(64, dtype=torch.uint8)  # another size: torch's allocator would not reuse
    finally:
        gc.enable()
    assert b.data_ptr() == p
    assert all(torch.empty(n, dtype=torch.uint8).data_ptr() % 64 == 0 for n in (1, 8, 63, 64))
    made = [torch.full((16,), float(i)) for i in range(200)]  # 64 bytes each: past the cache
    assert len({t.data_ptr() for t in made}) == 200
    assert all(t.sum().item() == 16 * i for i, t in enumerate(made))
    out: list[Any] = []

    def other_thread() -> None:
        out.extend(torch.full((4,), 7.0) for _ in range(100))
        del made[:100]  # blocks made here, freed there

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert all(x.sum().item() == 28.0 for x in out)  # made by a thread that has exited
    del out[:], made[:]
    c = torch.ones(3) + 1  # the cache still serves after all that
    assert c.tolist() == [2.0, 2.0, 2.0]
    big = torch.empty(65, dtype=torch.uint8)  # not a small block
    assert big.data_ptr() % 64 == 0


def test_copies_round_trip() -> None:
    for dtype in (torch.float32, torch.float64, torch.int64, torch.uint8, torch.bfloat16):
        a = (torch.arange(24) * 3 - 7).to(dtype).reshape(2, 3, 4)
        d = a.to("mpsrt")
        assert d.device.type == "mpsrt" and d.dtype == dtype
        assert torch.equal(d.cpu(), a)
        # non-contiguous source and destination, device to device, dtype conversion
        assert torch.equal(d.transpose(0, 2).cpu(), a.transpose(0, 2))
        assert torch.equal(d.clone().cpu(), a)
        assert torch.equal(d.to(torch.float32).cpu(), a.to(torch.float32))
    x = torch.randn(5, 6)
    assert torch.equal(x.mpsrt().cpu(), x)
    y = torch.empty(5, 6, device="mpsrt")
    y.copy_(x.t().contiguous().t())
    assert torch.equal(y.cpu(), x)


@pytest.mark.parametrize("memory", ["auto", "discrete"])
def test_an_out_argument_of_another_size_is_resized_as_torch_does(
    backend: str, runtime_env, memory: str
) -> None:
    """Through the fallback (CPU kernels), in both memory models: an out= argument with elements
    but of another size is resized, with torch's warning, keeping its offset into its storage
    (a view of a bigger tensor), as torch's CPU device does."""

    def run(device: str) -> tuple[list[torch.Tensor], list[str]]:
        out = torch.full((3,), 7.0, device=device)
        base = torch.zeros(10, device=device)
        view = base[2:5]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.add(torch.arange(5.0, device=device), 1, out=out)
            torch.mul(torch.arange(4.0, device=device), 2, out=view)
        said = [str(w.message).split(" This behavior")[0] for w in caught]
        return [out.cpu(), view.cpu(), base.cpu(), torch.tensor(view.storage_offset())], [
            m for m in said if "resized" in m
        ]

    with runtime_env(MPSRT_VULKAN_MEMORY=memory):
        previous = torch.mpsrt._set_kernels("cpu")
        try:
            got, got_said = run("mpsrt")
        finally:
            torch.mpsrt._set_kernels(previous)
    expected, expected_said = run("cpu")
    assert got_said == expected_said and len(expected_said) == 2
    for a, b in zip(got, expected):
        assert torch.equal(a, b), (a, b)


def test_host_copies_and_the_fallback_on_discrete_memory(backend: str, runtime_env) -> None:
    """With MPSRT_VULKAN_MEMORY=discrete (in every run: the discrete model on vulkan; cpu ignores
    it) and a staging pool smaller than the tensors: host copies of dense and strided tensors in
    both directions, fills and item() through host copies, and the fallback's error."""
    with runtime_env(MPSRT_VULKAN_MEMORY="discrete", MPSRT_STAGING_BYTES="65536"):
        discrete = not mpsrt.get_device_properties().unified_memory
        assert discrete == (backend == "vulkan")
        copies = mpsrt.memory_stats()["num_staged_copies"]
        a = torch.arange(40000, dtype=torch.float32).reshape(200, 200)  # 160 KB: > the pool
        d = a.to("mpsrt")
        assert torch.equal(d.cpu(), a)
        assert torch.equal(d.t().cpu(), a.t())  # a strided source
        assert torch.equal(d[::3, 1::2].cpu(), a[::3, 1::2])  # with gaps
        assert torch.equal(d.to(torch.float64).cpu(), a.double())  # on device, converted
        e = torch.zeros(200, 200, device="mpsrt")
        e.t().copy_(a)  # a strided destination
        e[::2, 5:].fill_(1.5)  # a strided fill
        want = a.t().clone()
        want[::2, 5:] = 1.5
        assert torch.equal(e.cpu(), want)
        assert d[3, 4].item() == a[3, 4].item()
        assert torch.equal(torch.arange(7, device="mpsrt").cpu(), torch.arange(7))  # factory op
        staged = mpsrt.memory_stats()["num_staged_copies"] - copies
        if discrete:
            assert staged > 0
            assert mpsrt.memory_stats()["staging_bytes.peak"] <= 65536
        else:
            assert staged == 0
        # Ops without an mpsrt kernel: CPU kernels on aliases (unified) or on staged host copies
        # (discrete), whose written arguments are written back and whose views stay views.
        before = _fallback_counts()
        assert torch.equal((d + 1).cpu(), a + 1)
        f = d.clone()
        f.mul_(2)
        f.add_(f)  # one tensor passed twice: one host copy
        assert torch.equal(f.cpu(), a * 4)
        g = torch.empty(0, device="mpsrt")
        torch.sub(d[::3, 1::2], 1, out=g)  # a strided input; an out= argument resized
        assert g.shape == (67, 100) and torch.equal(g.cpu(), a[::3, 1::2] - 1)
        h = d[10:20].clone()
        h.t_()  # an in-place view op: the geometry is mirrored
        assert h.shape == (200, 10) and torch.equal(h.cpu(), a[10:20].t())
        diag = torch.diagonal(d[5:], offset=1)  # a view op that falls back: a view of d
        assert diag.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
        assert torch.equal(diag.cpu(), torch.diagonal(a[5:], offset=1))
        # Tensors on one storage share its host copy: interleaved views written by one op keep
        # each other's results, and overlaps are the CPU kernel's to see (and refuse).
        k = torch.zeros(10, device="mpsrt")
        torch._foreach_add_([k[::2], k[1::2]], [1.0, 2.0])
        assert k.cpu().tolist() == [1.0, 2.0] * 5
        with pytest.raises(RuntimeError, match="single memory location"):
            k[1:].add_(k[:-1])
        assert k.cpu().tolist() == [1.0, 2.0] * 5  # untouched, and the device usable
        after = _fallback_counts()
        assert (after[3] > before[3]) == discrete  # storages staged
        del a, d, e, f, g, h, k, diag, want
        gc.collect()


def test_batch_norm_updates_its_running_statistics_on_both_memory_models(runtime_env) -> None:
    """native_batch_norm writes running_mean and running_var in training though its schema does
    not mark them written: the fallback writes their staged copies back on discrete memory too."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5)
    for memory in ("auto", "discrete"):  # auto: unified on lavapipe
        with runtime_env(MPSRT_VULKAN_MEMORY=memory):
            cpu = torch.nn.BatchNorm2d(3, momentum=0.5).train()
            dev = torch.nn.BatchNorm2d(3, momentum=0.5).train().to("mpsrt")
            for _ in range(2):
                expected, got = cpu(x), dev(x.to("mpsrt"))
            torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-5)
            for name, buf in cpu.named_buffers():
                torch.testing.assert_close(getattr(dev, name).cpu(), buf, atol=1e-6, rtol=1e-5)
            assert dev.running_mean.abs().max().item() > 1e-3  # moved from its zeros
            del dev, got
            gc.collect()


def test_fallback_counts_name_each_op() -> None:
    x = torch.randn(64, 32).to("mpsrt")
    torch.mpsrt.reset_fallback_counts()
    assert torch.mpsrt.fallback_counts() == {}
    # Ops without a kernel of mpsrt's (atan, asinh): torch's generic path for structured ops
    # runs their meta function and sends the out= form.
    y = x.atan()
    for _ in range(3):
        y = torch.asinh(y)
    x.copy_(y)  # copies have an mpsrt kernel: not counted
    counts = torch.mpsrt.fallback_counts()
    assert counts == {"aten::atan.out": 1, "aten::asinh.out": 3}, counts
    assert torch.allclose(x.cpu(), y.cpu())
    torch.mpsrt.reset_fallback_counts()
    assert torch.mpsrt.fallback_counts() == {}


_WARNS_ONCE = """\
import warnings

import torch
import mpsrt.torch

warnings.simplefilter("always")
x = torch.ones(4, 4, device="mpsrt")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(3):
        y = x.atan() + x
print(torch.equal(y.cpu(), torch.ones(4, 4).atan() + 1))
print(mpsrt.get_device_properties().unified_memory)
for w in caught:
    print("WARNING", w.category.__name__, w.message)
"""


def test_accelerator_only_ops_run_as_their_decomposition() -> None:
    # _fused_rms_norm_backward has kernels for accelerators only (none on the CPU, whose kernel
    # the fallback would run): rms_norm's backward runs as torch._decomp's decomposition.
    from mpsrt.torch import _decomp

    assert "aten::_fused_rms_norm_backward" in _decomp.REGISTERED
    assert not any("thnn_fused" in name for name in _decomp.REGISTERED)  # rnn_ops.cpp's own
    torch.manual_seed(5)
    x, w = torch.randn(4, 6, requires_grad=True), torch.randn(6, requires_grad=True)
    xd = x.detach().to("mpsrt").requires_grad_()
    wd = w.detach().to("mpsrt").requires_grad_()
    y = torch.nn.functional.rms_norm(x, (6,), w, 1e-5)
    yd = torch.nn.functional.rms_norm(xd, (6,), wd, 1e-5)
    (y * y).sum().backward()
    (yd * yd).sum().backward()
    torch.testing.assert_close(yd.cpu(), y.detach(), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(wd.grad.cpu(), w.grad, atol=1e-6, rtol=1e-5)


def test_an_accelerator_only_op_without_decomposition_says_so() -> None:
    # linear_backward has an MPS kernel only and no decomposition: the error names the op and
    # why, not a "CPU backend" the caller never used; the device stays usable.
    x = torch.randn(4, 6, device="mpsrt")
    with pytest.raises(NotImplementedError, match=r"aten::linear_backward has no kernel on the "):
        torch.ops.aten.linear_backward(
            x, torch.ones(4, 3, device="mpsrt"), torch.ones(3, 6, device="mpsrt"), [True] * 3
        )
    assert (x + 1).sum().item() == pytest.approx((x.cpu() + 1).sum().item(), rel=1e-5)


def test_a_staged_fallback_warns_once_per_op(backend: str) -> None:
    # In a fresh interpreter: each op warns once per process. Discrete memory (vulkan, forced):
    # atan and add each warn once, naming the op and how to silence it; unified memory: none.
    for memory in ("discrete", "auto"):
        out = run_python(_WARNS_ONCE, backend, MPSRT_VULKAN_MEMORY=memory)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0] == "True"
        warned = [line for line in lines if line.startswith("WARNING")]
        if lines[1] == "False":
            assert len(warned) == 2, warned
            # atan has no kernel of mpsrt's: torch's generic path for structured ops runs its meta
            # function and sends atan.out; add has one (off on lavapipe unless
            # MPSRT_TORCH_KERNELS=device), which hands add.Tensor itself to the fallback.
            for op, line in zip(("aten::atan.out", "aten::add.Tensor"), warned):
                assert line.startswith(f"WARNING UserWarning [torch] {op} has no kernel"), line
                assert "torch.mpsrt.fallback_counts()" in line
                assert 'warnings.filterwarnings("ignore"' in line
        else:
            assert warned == []


def test_fill_zero_and_views() -> None:
    z = torch.zeros(1000, device="mpsrt")
    assert torch.equal(z.cpu(), torch.zeros(1000))
    f = torch.full((7, 9), 2.5, dtype=torch.float16, device="mpsrt")
    assert torch.equal(f.cpu(), torch.full((7, 9), 2.5, dtype=torch.float16))
    f[1:3, ::2] = -1
    expect = torch.full((7, 9), 2.5, dtype=torch.float16)
    expect[1:3, ::2] = -1
    assert torch.equal(f.cpu(), expect)
    v = f.view(63)  # a view shares the device storage
    v[0] = 42
    assert f[0, 0].item() == 42
    assert v.untyped_storage().data_ptr() == f.untyped_storage().data_ptr()


def test_fill_with_a_device_scalar_tensor() -> None:
    # fill_ with a 0-dim mpsrt tensor reads its value after the queued work that wrote it (a
    # fill on the stream), into dense and strided destinations.
    f = torch.zeros(4, 5, device="mpsrt")
    value = torch.full((), 2.5, device="mpsrt")
    f[1:3, ::2].fill_(value)
    f[3].fill_(value * 2)
    expect = torch.zeros(4, 5)
    expect[1:3, ::2] = 2.5
    expect[3] = 5.0
    assert torch.equal(f.cpu(), expect)
    with pytest.raises(RuntimeError, match="0-dimension value tensor"):
        f.fill_(torch.ones(2, device="mpsrt"))


def test_ops_match_cpu() -> None:
    a = torch.randn(33, 17)
    b = torch.randn(17, 9)
    da, db = a.to("mpsrt"), b.to("mpsrt")
    out = (da @ db).softmax(-1)
    assert out.device.type == "mpsrt"
    assert torch.equal(out.cpu(), (a @ b).softmax(-1))
    assert torch.equal(da.sum(0).cpu(), a.sum(0))
    vals, idx = da.max(1)
    assert vals.device.type == "mpsrt" and idx.device.type == "mpsrt"
    assert torch.equal(idx.cpu(), a.max(1).indices)
    # out= that resizes the device tensor
    o = torch.empty(0, device="mpsrt")
    torch.add(da, 1, out=o)
    assert o.shape == (33, 17) and torch.equal(o.cpu(), a + 1)
    # in place returns the same tensor
    c = da.clone()
    assert c.add_(1) is c
    assert torch.equal(c.cpu(), a + 1)
    # factory ops on the device
    r = torch.arange(10, device="mpsrt")
    assert r.device.type == "mpsrt" and torch.equal(r.cpu(), torch.arange(10))


def test_ops_follow_a_tensor_whose_memory_or_geometry_changed_in_place() -> None:
    # A tensor's CPU kernels run on a stand-in kept with it after its first op; every change of
    # its memory or geometry in place must reach the next op as it reaches torch's CPU tensors.
    def steps(device: str) -> list[torch.Tensor]:
        out = []
        t = torch.zeros(2, 3, device=device)  # not a view: its stand-in is kept
        t.copy_(torch.arange(6.0).reshape(2, 3))
        t.add_(1)
        out.append(t.mul(2))
        t.t_()  # new strides, same memory
        out.append(t.add(torch.arange(2.0, device=device)))
        t.resize_(4, 8)  # new memory
        t.fill_(3)
        t.add_(1)
        out.append(t.clone())
        t.as_strided_((3,), (2,), 1)  # a new offset
        out.append(t.mul(5))
        t.set_(torch.full((5,), 7.0, device=device))  # another storage
        t.sub_(2)
        out.append(t.clone())
        d = t.detach()  # shares what t keeps
        d.unsqueeze_(0)
        out.append(d.add(1))
        out.append(t.add(1))
        t.data = torch.ones(2, 2, dtype=torch.float64, device=device)  # a new dtype too
        out.append(t.mul(3))
        r = t.relu()  # an output handed over from its CPU kernel
        r.resize_(0)
        r.resize_(6)
        r.fill_(2)
        out.append(r.add(r))
        return out

    for got, want in zip(steps("mpsrt"), steps("cpu"), strict=True):
        assert got.device.type == "mpsrt"
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want), (got, want)


def test_autograd_and_optimizer() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    ref.load_state_dict(model.state_dict())
    model.to("mpsrt")
    x = torch.randn(32, 8)
    for m, xx in ((model, x.to("mpsrt")), (ref, x)):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            m(xx).square().mean().backward()
            opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.device.type == "mpsrt"
        torch.testing.assert_close(p.cpu(), q, rtol=0, atol=1e-6)


def _encoder_run(device: str, train: bool, mpsrt_rng: bool = False) -> torch.Tensor:
    # The seed workload (TransformerEncoder, 10 forward passes), scaled down in width so
    # that the suite stays fast; examples/torch_device.py runs it at full size. mpsrt_rng: the
    # forward passes (not the weights' initialisation, done on cpu for both devices) draw
    # dropout's masks from mpsrt's generator on cpu too.
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(device)
    model.train(train)
    with mpsrt.torch.cpu_reference_rng() if mpsrt_rng else contextlib.nullcontext():
        for _ in range(10):
            res = model(torch.zeros(32, 64).to(device))
    return res.detach().cpu()


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_seed_workload_matches_cpu(train: bool) -> None:
    # train: dropout's masks come from mpsrt's Philox generator on the device; the CPU run
    # draws the same masks from it under cpu_reference_rng(), so the outputs still agree.
    gc.collect()
    mpsrt.reset_peak_memory_stats()
    allocs = mpsrt.memory_stats()["allocation.all.allocated"]
    with torch.no_grad() if not train else torch.enable_grad():
        on_dev = _encoder_run("mpsrt", train)
        on_cpu = _encoder_run("cpu", train, mpsrt_rng=True)
        if train:  # without mpsrt's masks the CPU run differs: the masks are really mpsrt's
            assert not torch.allclose(_encoder_run("cpu", train), on_dev, atol=1e-2)
    torch.testing.assert_close(on_dev, on_cpu, rtol=0, atol=1e-4)
    stats = mpsrt.memory_stats()
    assert stats["allocation.all.allocated"] - allocs > 50
    assert stats["allocated_bytes.all.peak"] > 64 * 128 * 4


def test_streams_and_events() -> None:
    s = torch.Stream(device="mpsrt")
    assert s.device.type == "mpsrt"
    cur = torch.accelerator.current_stream()
    assert cur.device.type == "mpsrt"
    assert mpsrt.current_stream() == mpsrt.default_stream()
    with s:
        # torch's current stream is mpsrt's current stream: one set of streams
        assert torch.accelerator.current_stream() == s
        assert mpsrt.current_stream() != mpsrt.default_stream()
        x = torch.ones(1 << 16, device="mpsrt")
        e = torch.Event(enable_timing=True)
        e.record()
    cur.wait_event(e)
    e.synchronize()
    assert e.query()
    assert torch.equal(x.cpu().sum(), torch.tensor(float(1 << 16)))
    torch.accelerator.synchronize()
    assert mpsrt.current_stream() == mpsrt.default_stream()
    t0, t1 = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    t0.record()
    torch.ones(1 << 20, device="mpsrt").fill_(2)
    t1.record()
    t1.synchronize()
    assert t0.elapsed_time(t1) >= 0


def test_rng_state_and_seed() -> None:
    torch.manual_seed(1234)  # also seeds the mpsrt device (torch calls manual_seed_all)
    assert mpsrt.initial_seed() == 1234
    state = torch.mpsrt.get_rng_state()
    assert state.dtype == torch.uint8 and state.shape == (44,)
    mpsrt.rand(10)
    assert not torch.equal(torch.mpsrt.get_rng_state(), state)
    torch.mpsrt.set_rng_state(state)
    assert torch.equal(torch.mpsrt.get_rng_state(), state)


def test_bad_input() -> None:
    with pytest.raises(RuntimeError, match="negative dimension"):
        torch.empty(-1, device="mpsrt")
    n = mpsrt.device_count()
    # Out-of-range indices and invalid device strings raise what torch raises for CUDA.
    with pytest.raises(RuntimeError, match="The device index is out of range"):
        torch.empty(2, device=f"mpsrt:{n}")
    with pytest.raises(RuntimeError, match="The device index is out of range"):
        torch.mpsrt.set_device(n)
    for bad in ("mpsrt:x", "mpsrt:1:2", "mpsrt:-"):
        with pytest.raises(RuntimeError, match=f"Invalid device string: '{bad}'"):
            torch.mpsrt.synchronize(bad)
    with pytest.raises(ValueError, match="expected an mpsrt device"):
        torch.mpsrt.memory_allocated("cpu")


def test_without_torch_import_error_says_how() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import mpsrt\n"
        "try:\n"
        "    import mpsrt.torch\n"
        "except ImportError as e:\n"
        "    print('ERR', e)\n"
        "print('ok', mpsrt.empty(4).nbytes)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install torch" in out.stdout
    assert "ok 4" in out.stdout


def test_storages() -> None:
    t = torch.arange(8, dtype=torch.float32, device="mpsrt")
    s = t.untyped_storage()
    assert s.device == torch.device("mpsrt", 0)
    assert s.is_mpsrt and not torch.arange(2).untyped_storage().is_mpsrt
    assert s.nbytes() == 32
    assert t[2:].untyped_storage().data_ptr() == s.data_ptr()  # a view shares the storage
    assert s.mpsrt() is s  # already there: no copy
    t[1] = 42.0
    back = s.cpu()
    assert back.device.type == "cpu"
    assert torch.tensor([], dtype=torch.float32).set_(back)[:3].tolist() == [0.0, 42.0, 2.0]
    moved = torch.arange(3, dtype=torch.int64).untyped_storage().mpsrt()
    assert moved.device.type == "mpsrt" and moved.nbytes() == 24
    # set_ onto an mpsrt storage with an offset and strides (what torch.load rebuilds with)
    u = torch.empty(0, dtype=torch.float32, device="mpsrt").set_(s, 1, (3,), (2,))
    assert u.device.type == "mpsrt" and u.tolist() == [42.0, 3.0, 5.0]
    assert u.untyped_storage().data_ptr() == s.data_ptr()
    w = torch.empty(0, dtype=torch.float32, device="mpsrt").set_(u)  # set_.source_Tensor
    assert w.tolist() == [42.0, 3.0, 5.0] and w.stride() == (2,)
    assert w.set_().shape == (0,) and w.device.type == "mpsrt"
    fresh = torch.UntypedStorage(16, device="mpsrt")
    assert fresh.device.type == "mpsrt" and fresh.nbytes() == 16
    with pytest.raises(RuntimeError, match="must match"):
        torch.empty(0, device="mpsrt").set_(torch.arange(2.0).untyped_storage())


def test_save_load_round_trip(tmp_path: Path) -> None:
    base = torch.randn(4, 5).to("mpsrt")
    view = base[1:, ::2]  # saved together with base: one storage, still shared after load
    ints = torch.arange(-3, 3, dtype=torch.int64, device="mpsrt")
    halves = torch.linspace(0, 1, 7, dtype=torch.bfloat16).to("mpsrt")
    path = tmp_path / "t.pt"
    torch.save({"base": base, "view": view, "ints": ints, "halves": halves}, path)

    got = torch.load(path)
    for k, want in (("base", base), ("view", view), ("ints", ints), ("halves", halves)):
        assert got[k].device == torch.device("mpsrt", 0), k
        assert got[k].dtype == want.dtype and got[k].shape == want.shape, k
        assert torch.equal(got[k].cpu(), want.cpu()), k
    assert got["view"].untyped_storage().data_ptr() == got["base"].untyped_storage().data_ptr()
    assert got["base"].untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    got["base"][1, 0] = 99.0
    assert got["view"][0, 0].item() == 99.0

    on_cpu = torch.load(path, map_location="cpu")
    assert on_cpu["base"].device.type == "cpu" and torch.equal(on_cpu["base"], base.cpu())

    cpu_path = tmp_path / "cpu.pt"
    src = torch.arange(10, dtype=torch.float64)[2:7]
    torch.save(src, cpu_path)
    for where in ("mpsrt", "mpsrt:0", torch.device("mpsrt"), {"cpu": "mpsrt:0"}):
        moved = torch.load(cpu_path, map_location=where)
        assert moved.device == torch.device("mpsrt", 0), where
        assert torch.equal(moved.cpu(), src), where


def test_state_dict_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = model.to("mpsrt")
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    state = torch.load(path, weights_only=True)
    assert all(v.device.type == "mpsrt" for v in state.values())
    other = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    other = other.to("mpsrt")
    x = torch.randn(3, 8).to("mpsrt")
    assert not torch.equal(other(x).cpu(), model(x).cpu())
    other.load_state_dict(state)
    assert torch.equal(other(x).cpu(), model(x).cpu())
    for name, p in other.state_dict().items():
        assert p.device.type == "mpsrt" and torch.equal(p.cpu(), model.state_dict()[name].cpu())


def test_load_onto_missing_device_raises(tmp_path: Path) -> None:
    path = tmp_path / "t.pt"
    torch.save(torch.ones(3, device="mpsrt"), path)
    n = mpsrt.device_count()
    with pytest.raises(RuntimeError, match=r"device_count\(\) is"):
        torch.load(path, map_location=f"mpsrt:{n}")
    # a location that only starts with "mps" is not Apple's MPS: it is ours
    assert torch.load(path, map_location="mpsrt").device.type == "mpsrt"


# ---------------------------------------------------------------- random numbers
def _host(buf: mpsrt.Buffer) -> torch.Tensor:
    """A CPU tensor with an mpsrt Buffer's values (a DLPack host copy: either memory model)."""
    return torch.from_dlpack(buf.__dlpack__(dl_device=(1, 0), copy=True))


_RANDOM_CASES = [
    # (torch call on the device, mpsrt call), each after the same seed
    (lambda: torch.rand(1000, device="mpsrt"), lambda: mpsrt.rand(1000)),
    (
        lambda: torch.rand(257, dtype=torch.float16, device="mpsrt"),
        lambda: mpsrt.rand(257, dtype="float16"),
    ),
    (
        lambda: torch.empty(300, dtype=torch.bfloat16, device="mpsrt").uniform_(-2, 3),
        lambda: mpsrt.empty(300, dtype="bfloat16").uniform_(-2, 3),
    ),
    (
        lambda: torch.randn(1001, dtype=torch.float64, device="mpsrt"),
        lambda: mpsrt.randn(1001, dtype="float64"),
    ),
    (
        lambda: torch.empty(999, device="mpsrt").normal_(3, 0.5),
        lambda: mpsrt.empty(999, dtype="float32").normal_(3, 0.5),
    ),
    (
        lambda: torch.randint(-5, 17, (1000,), device="mpsrt"),
        lambda: mpsrt.randint(-5, 17, (1000,)),
    ),
    (
        lambda: torch.randint(7, (500,), dtype=torch.int8, device="mpsrt"),
        lambda: mpsrt.randint(0, 7, (500,), dtype="int8"),
    ),
    (
        lambda: torch.empty(400, dtype=torch.int16, device="mpsrt").random_(),
        lambda: mpsrt.empty(400, dtype="int16").random_(),
    ),
    (
        lambda: torch.empty(400, dtype=torch.float32, device="mpsrt").random_(-3, None),
        lambda: mpsrt.empty(400, dtype="float32").random_(-3, 2**24 + 1),
    ),
    (
        lambda: torch.empty(1000, dtype=torch.bool, device="mpsrt").bernoulli_(0.3),
        lambda: mpsrt.empty(1000, dtype="bool").bernoulli_(0.3),
    ),
    (
        lambda: torch.empty(1000, dtype=torch.float32, device="mpsrt").bernoulli_(0.75),
        lambda: mpsrt.empty(1000, dtype="float32").bernoulli_(0.75),
    ),
]


@pytest.mark.parametrize("case", range(len(_RANDOM_CASES)))
def test_random_ops_are_mpsrts_numbers(case: int) -> None:
    on_torch, on_mpsrt = _RANDOM_CASES[case]
    torch.mpsrt.manual_seed(11)
    got = on_torch()
    assert got.device.type == "mpsrt"
    mpsrt.manual_seed(11)
    want = _host(on_mpsrt())
    # Bit for bit: the same Philox words through the same kernels (randn included).
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got.cpu().view(torch.uint8), want.contiguous().view(torch.uint8))
    torch.mpsrt.manual_seed(12)
    assert not torch.equal(on_torch().cpu(), got.cpu())


def test_torch_manual_seed_seeds_the_device() -> None:
    torch.manual_seed(99)
    a = torch.rand(64, device="mpsrt")
    mpsrt.manual_seed(99)
    assert torch.equal(a.cpu(), _host(mpsrt.rand(64)))
    # torch.mpsrt's RNG state is mpsrt's generator: saving and restoring replays the numbers
    state = torch.mpsrt.get_rng_state()
    b = torch.randn(64, device="mpsrt")
    torch.mpsrt.set_rng_state(state)
    assert torch.equal(torch.randn(64, device="mpsrt").cpu(), b.cpu())
    before = torch.mpsrt.get_rng_state()
    with torch.random.fork_rng(device_type="mpsrt"):
        torch.rand(8, device="mpsrt")
        assert not torch.equal(torch.mpsrt.get_rng_state(), before)
    assert torch.equal(torch.mpsrt.get_rng_state(), before)


def test_generator_objects() -> None:
    g = torch.Generator(device="mpsrt")
    assert g.device == torch.device("mpsrt", 0)
    g.manual_seed(5)
    assert g.initial_seed() == 5
    a = torch.rand(100, device="mpsrt", generator=g)
    state = g.get_state()
    assert state.dtype == torch.uint8 and state.shape == (44,)
    b = torch.rand(100, device="mpsrt", generator=g)
    g.set_state(state)
    assert torch.equal(torch.rand(100, device="mpsrt", generator=g).cpu(), b.cpu())
    g.manual_seed(5)
    assert torch.equal(torch.rand(100, device="mpsrt", generator=g).cpu(), a.cpu())
    # its own stream: the default generator is untouched by g
    torch.mpsrt.manual_seed(5)
    before = torch.mpsrt.get_rng_state()
    torch.rand(10, device="mpsrt", generator=g)
    assert torch.equal(torch.mpsrt.get_rng_state(), before)
    # an mpsrt generator seeded like mpsrt.Generator gives mpsrt's numbers
    m = mpsrt.Generator()
    m.manual_seed(5)
    assert torch.equal(a.cpu(), _host(mpsrt.rand(100, generator=m)))
    assert g.get_offset() > 0
    g.set_offset(0)
    assert torch.equal(torch.rand(100, device="mpsrt", generator=g).cpu(), a.cpu())
    # torch.mpsrt's default generator is torch.default_generator's counterpart on the device
    assert torch.mpsrt.initial_seed() == 5
    with pytest.raises(RuntimeError, match="device type for generator"):
        torch.rand(4, device="mpsrt", generator=torch.Generator())
    with pytest.raises(RuntimeError, match="RNG state is wrong size"):
        g.set_state(torch.zeros(10, dtype=torch.uint8))


def test_dropout_mask_is_mpsrt_bernoulli() -> None:
    x = torch.ones(4096, device="mpsrt")
    torch.mpsrt.manual_seed(3)
    y = torch.nn.functional.dropout(x, p=0.25, training=True)
    mpsrt.manual_seed(3)
    keep = _host(mpsrt.empty(4096, dtype="bool").bernoulli_(0.75))
    assert torch.equal(y.cpu(), keep.float() / 0.75)
    assert torch.equal(torch.nn.functional.dropout(x, 0.25, training=False).cpu(), x.cpu())


def test_random_ops_without_an_mpsrt_kernel_follow_the_seed() -> None:
    # randperm, multinomial and complex normal_ run torch's CPU kernels with a CPU generator
    # seeded from mpsrt's: reproducible under torch.mpsrt.manual_seed, advancing it.
    def draw() -> list[torch.Tensor]:
        return [
            torch.randperm(50, device="mpsrt"),
            torch.multinomial(torch.ones(20, device="mpsrt"), 5),
            torch.empty(6, dtype=torch.complex64, device="mpsrt").normal_(),
        ]

    torch.mpsrt.manual_seed(21)
    first = [t.cpu() for t in draw()]
    assert all(t.device.type == "mpsrt" for t in draw())
    torch.mpsrt.manual_seed(21)
    again = [t.cpu() for t in draw()]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert torch.equal(torch.sort(first[0]).values, torch.arange(50))
    torch.mpsrt.manual_seed(22)
    assert not torch.equal(torch.randperm(50, device="mpsrt").cpu(), first[0])


def test_random_into_strided_views() -> None:
    t = torch.zeros(8, 10, device="mpsrt")
    torch.mpsrt.manual_seed(4)
    t[:, ::3].uniform_()
    mpsrt.manual_seed(4)
    want = _host(mpsrt.rand(8 * 4)).reshape(8, 4)
    assert torch.equal(t[:, ::3].cpu(), want)
    mask = torch.ones(8, 10, dtype=torch.bool)
    mask[:, ::3] = False
    assert torch.all(t.cpu()[mask] == 0)


def test_random_bad_input() -> None:
    t = torch.empty(4, device="mpsrt")
    with pytest.raises(RuntimeError, match=r"uniform_ expects to return a \[from, to\) range"):
        t.uniform_(2, 1)
    with pytest.raises(RuntimeError, match=r"normal expects std >= 0\.0"):
        t.normal_(0, -1)
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to'"):
        t.random_(5, 5)
    with pytest.raises(RuntimeError, match=r"bernoulli_ expects p to be in \[0, 1\]"):
        t.bernoulli_(1.5)
    with pytest.raises(ValueError):  # outside what int8 holds: mpsrt's message
        torch.empty(4, dtype=torch.int8, device="mpsrt").random_(0, 1000)
    assert torch.rand(3, device="mpsrt").shape == (3,)  # still usable


# ---------------------------------------------------------------- runtime integration
def _fallback_counts() -> tuple[int, int, int, int]:
    ops, adopted, copied, staged = torch.ops.mpsrt_torch._fallback_counts()
    return ops, adopted, copied, staged


def test_new_outputs_are_made_in_device_memory(unified_memory: None) -> None:
    x = torch.randn(256, 256).to("mpsrt")
    mpsrt.synchronize()
    before = _fallback_counts()
    # relu's CPU kernel allocates its output (in mpsrt memory: handed over, no copy); mm, add
    # and max are structured, so torch allocates their outputs on the device (mpsrt's
    # allocator) and the CPU kernel writes into them.
    y = torch.mm(x, x).relu()
    vals, idx = y.max(1)
    z = y + vals[:, None]
    after = _fallback_counts()
    assert after[0] - before[0] == 4
    assert after[1] - before[1] >= 1  # relu's output
    assert after[2] == before[2]  # no output was copied into device memory
    for t in (y, vals, idx, z):
        assert t.device.type == "mpsrt" and t.untyped_storage().device.type == "mpsrt"
    ref = torch.mm(x.cpu(), x.cpu()).relu()
    assert torch.equal(y.cpu(), ref) and torch.equal(idx.cpu(), ref.max(1).indices)
    assert torch.equal(z.cpu(), ref + ref.max(1).values[:, None])
    # The memory goes back to mpsrt's allocator when the tensors go.
    live = mpsrt.memory_allocated()
    del y, vals, idx, z
    mpsrt.synchronize()
    assert mpsrt.memory_allocated() < live


def test_profiler_names_each_aten_op_on_its_stream(tmp_path: Path) -> None:
    import json

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU()).to("mpsrt")
    x = torch.randn(8, 32).to("mpsrt")
    mpsrt.profiler.start(mode="interval")
    try:
        with torch.no_grad():
            model(x).sum()
        torch.mpsrt.synchronize()
    finally:
        mpsrt.profiler.stop()
    path = tmp_path / "trace.json"
    mpsrt.profiler.export_trace(path)
    events = json.loads(path.read_text())["traceEvents"]
    host_ops = [e for e in events if e.get("cat") == "host_op"]
    names = {e["name"] for e in host_ops}
    assert {"aten::addmm", "aten::gelu", "aten::sum"} <= names, names
    stream = mpsrt.current_stream().stream_id
    assert all(e["ph"] == "X" and e["args"]["stream"] == stream for e in host_ops)
    # on the stream's track, beside the allocator's counters
    assert {e["tid"] for e in host_ops} == {stream + 1}
    assert any(e.get("ph") == "C" and e.get("cat") == "memory" for e in events)


def test_profiler_logs_host_ops(backend: str) -> None:
    # MPSRT_LOG_PROFILE_INFO bit 4 logs each host op, bit 64 prints their statistics (torch.mps's
    # CPU-fallback bits), in a session started by MPSRT_TRACE_SIGNPOSTS.
    code = (
        "import torch, mpsrt.torch\n"
        "x = torch.randn(8, 8).to('mpsrt')\n"
        "(x @ x).tanh().sum().item()\n"
    )
    env = {**os.environ, "MPSRT_BACKEND": backend, "MPSRT_TRACE_SIGNPOSTS": "2"}
    env["MPSRT_LOG_PROFILE_INFO"] = "68"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "[profiler] host op aten::mm: device 0, stream 0" in out.stderr, out.stderr
    assert "host op" in out.stderr and "aten::tanh" in out.stderr
    section = out.stderr[out.stderr.index("host op  ") :]
    assert "aten::mm" in section and "aten::sum" in section


_AUTOGRAD_PROFILE = """
import json, time, torch, mpsrt.torch
x = torch.randn(512, 512, device="mpsrt")
(x @ x).sum().item()  # warm: the kernels and the allocator's blocks exist
t0 = time.perf_counter()
with torch.autograd.profiler.profile(use_device="mpsrt") as prof:
    y = x @ x
    s = y.sum()
    torch.mpsrt.synchronize()
wall = (time.perf_counter() - t0) * 1e6
# a key can have two rows: an op's device call and the CPU kernel it runs (the fallback)
rows = {}
for e in prof.key_averages():
    rows.setdefault(e.key, []).append([e.self_device_time_total, e.device_time_total, e.count])
events = [[e.name, e.device_time_total] for e in prof.function_events]
table = prof.key_averages().table()
print(json.dumps({"rows": rows, "events": events, "wall": wall, "table": table}))
"""


def test_autograd_profiler_use_device_times_device_ops(backend: str) -> None:
    # torch.autograd.profiler.profile(use_device="mpsrt") records an mpsrt timing event on the
    # current stream at each op's entry and exit (torch's PrivateUse1 profiler stubs): real device
    # times, no "PrivateUse1 used in profiler but not enabled" per op (a fresh interpreter: torch
    # prints those on stderr).
    import json

    out = run_python(_AUTOGRAD_PROFILE, backend)
    assert out.returncode == 0, out.stderr
    assert "not enabled" not in out.stderr and "RecordFunction callback" not in out.stderr, (
        out.stderr
    )
    got = json.loads(out.stdout.splitlines()[-1])
    rows, wall = got["rows"], got["wall"]
    assert {"aten::matmul", "aten::mm", "aten::sum"} <= set(rows), rows
    for name, averages in rows.items():
        for self_device, device_total, count in averages:
            assert 0 <= self_device <= device_total <= wall, (name, averages, wall)
            assert count >= 1
    for name, device_total in got["events"]:
        assert 0 <= device_total <= wall, (name, device_total, wall)
    # a 512x512 matmul takes device time, less than the profiled region's wall time
    mm = max(self_device for self_device, _, _ in rows["aten::mm"])
    assert 0 < mm < wall, rows["aten::mm"]
    assert max(total for _, total, _ in rows["aten::matmul"]) >= mm
    assert "Self MPSRT" in got["table"] and "MPSRT total" in got["table"]


def test_memory_snapshot_has_torch_allocations_with_user_frames() -> None:
    from torch.cuda import _memory_viz

    mpsrt.memory._record_memory_history(max_entries=10_000)
    try:
        kept = torch.empty(3 << 20, dtype=torch.uint8, device="mpsrt")
        made = torch.ones(1000, device="mpsrt") * 2  # allocated by a CPU kernel, adopted
        snap = mpsrt.memory._snapshot()
    finally:
        mpsrt.memory._record_memory_history(enabled=None)
    here = Path(__file__).name
    fn = "test_memory_snapshot_has_torch_allocations_with_user_frames"

    def frames_of(size: int) -> list[dict[str, object]]:
        for seg in snap["segments"]:
            for b in seg["blocks"]:
                if b["state"] == "active_allocated" and b["requested_size"] == size:
                    return b["frames"]
        raise AssertionError(f"no live block of {size} bytes in the snapshot")

    for size in (kept.numel(), made.numel() * 4):
        frames = frames_of(size)
        assert any(f["filename"].endswith(here) and f["name"] == fn for f in frames), frames
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    assert any(any(f["name"] == fn for f in e["frames"]) for e in allocs)
    html = _memory_viz.trace_plot(snap)
    assert "<html" in html.lower() and len(html) > 1000
    assert _memory_viz.segment_plot(snap)
    del kept, made


def test_oom_at_the_memory_fraction_is_torchs_error() -> None:
    gc.collect()
    mpsrt.synchronize()
    mpsrt.empty_cache()
    old = mpsrt.get_per_process_memory_fraction()
    limit = mpsrt.recommended_max_memory()
    torch.mpsrt.set_per_process_memory_fraction(0.1)
    try:
        with pytest.raises(torch.OutOfMemoryError) as info:
            torch.empty(int(limit * 0.2), dtype=torch.uint8, device="mpsrt")
        assert "limit" in str(info.value) or "fraction" in str(info.value), str(info.value)
        small = torch.ones(1024, device="mpsrt")  # the next allocation works
        assert small.sum().item() == 1024
        # the fallback's outputs obey the limit too
        big = torch.ones(int(limit * 0.06) // 4, device="mpsrt")
        with pytest.raises(torch.OutOfMemoryError):
            torch.cat([big, big])
    finally:
        torch.mpsrt.set_per_process_memory_fraction(old)
    assert torch.ones(4, device="mpsrt").sum().item() == 4


_PARENT_TENSOR: list[torch.Tensor] = []


def _torch_fork_child(conn: Any) -> None:
    out: dict[str, object] = {"bad_fork": torch.mpsrt._is_in_bad_fork()}
    try:
        _PARENT_TENSOR[0] + 1
        out["parent"] = "no error"
    except Exception as e:
        out["parent"] = f"{type(e).__name__}: {e}"
    try:
        torch.manual_seed(5)  # as DataLoader workers do; skips the device in a bad fork
        out["seeded"] = True
        fresh = torch.arange(10.0, device="mpsrt") * 2
        out["fresh"] = fresh.sum().item()
        out["rand"] = torch.rand(4, device="mpsrt").cpu().tolist()
    except Exception as e:
        out["fresh"] = f"{type(e).__name__}: {e}"
    conn.send(out)
    conn.close()


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_fork_child_follows_mpsrts_contract(backend: str) -> None:
    _PARENT_TENSOR[:] = [torch.ones(16, device="mpsrt")]
    _PARENT_TENSOR[0].add_(0)  # a CPU kernel ran on it here: its stand-in is kept with it
    try:
        _check_fork_child(backend)
        assert torch.equal(_PARENT_TENSOR[0].cpu(), torch.ones(16))  # the parent is unaffected
    finally:
        _PARENT_TENSOR.clear()


def _check_fork_child(backend: str) -> None:
    import multiprocessing as mp

    torch.mpsrt.synchronize()
    ctx = mp.get_context("fork")
    parent_end, child_end = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_torch_fork_child, args=(child_end,))
    p.start()
    child_end.close()
    assert parent_end.poll(60), "the forked child did not answer within 60 s"
    out = parent_end.recv()
    p.join(60)
    assert p.exitcode == 0
    assert out.get("seeded") is True, out
    if backend == "cpu":  # a fresh runtime in the child; the parent's tensors raise
        assert out["bad_fork"] is False
        assert "belongs to the parent process" in str(out["parent"])
        assert out["fresh"] == 90.0
        torch.mpsrt.manual_seed(5)
        assert out["rand"] == torch.rand(4, device="mpsrt").cpu().tolist()
    else:  # the driver cannot cross a fork: torch skips the device when it seeds
        assert out["bad_fork"] is True
        for what in ("parent", "fresh"):  # mpsrt's error, which says what to do
            assert str(out[what]).startswith("RuntimeError") and "spawn" in str(out[what]), out


def test_eight_threads_run_ops_and_allocate() -> None:
    import threading

    errors: list[BaseException] = []
    results: dict[int, torch.Tensor] = {}
    w = torch.randn(64, 64).to("mpsrt")
    ref_w = w.cpu()

    def work(i: int) -> None:
        try:
            acc = torch.zeros(64, device="mpsrt")
            for k in range(30):
                x = torch.full((16, 64), float(i + k), device="mpsrt")
                acc = acc + (x @ w).relu().sum(0)
                torch.empty(1 << 16, dtype=torch.uint8, device="mpsrt")  # churn the allocator
            results[i] = acc.cpu()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    for i in range(8):
        want = torch.zeros(64)
        for k in range(30):
            want = want + (torch.full((16, 64), float(i + k)) @ ref_w).relu().sum(0)
        torch.testing.assert_close(results[i], want, rtol=1e-5, atol=1e-3)


_LOSSES = {
    "mse": lambda x, t, c: torch.nn.functional.mse_loss(x, t),
    "mse_sum": lambda x, t, c: torch.nn.functional.mse_loss(x, t, reduction="sum"),
    "smooth_l1": lambda x, t, c: torch.nn.functional.smooth_l1_loss(x, t),
    "l1": lambda x, t, c: torch.nn.functional.l1_loss(x, t),
    "huber": lambda x, t, c: torch.nn.functional.huber_loss(x, t),
    "cross_entropy": lambda x, t, c: torch.nn.functional.cross_entropy(x, c),
    "bce_logits": lambda x, t, c: torch.nn.functional.binary_cross_entropy_with_logits(
        x, t.sigmoid()
    ),
}


@pytest.mark.parametrize("name", sorted(_LOSSES))
def test_losses_and_their_gradients_match_cpu(name: str) -> None:
    # Warnings are errors in this suite: a loss must not warn on the device where cpu does not.
    x = torch.randn(6, 5)
    t = torch.randn(6, 5)
    c = torch.tensor([0, 4, 1, 1, 3, 2])
    grads = []
    for dev in ("mpsrt", "cpu"):
        xx = x.to(dev).requires_grad_()
        loss = _LOSSES[name](xx, t.to(dev), c.to(dev))
        loss.backward()
        assert loss.device.type == dev and xx.grad is not None
        grads.append((loss.detach().cpu(), xx.grad.cpu()))
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=1e-6)


def test_import_torch_autoloads_the_device_unless_opted_out(backend: str) -> None:
    code = (
        "import sys, torch\n"
        "print(torch._C._get_privateuse1_backend_name(), hasattr(torch, 'mpsrt'),"
        " 'mpsrt.torch' in sys.modules)\n"
    )
    runs = {}
    for autoload in ("1", "0"):
        env = {**os.environ, "MPSRT_BACKEND": backend, "TORCH_DEVICE_BACKEND_AUTOLOAD": autoload}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
        )
        assert out.returncode == 0, out.stderr
        runs[autoload] = out.stdout.split()
    assert runs["1"] == ["mpsrt", "True", "True"]
    assert runs["0"] == ["privateuseone", "False", "False"]


# The glue is loaded and initialised when its operators answer (on any backend, host-visible
# device memory or not).
_IMPORT_AND_USE = (
    "import torch, mpsrt.torch\nprint(type(torch.ops.mpsrt_torch._fallback_counts()).__name__)\n"
)


def _cached_build_copy(tmp_path: Path) -> Path:
    """A copy of this process's finished glue build under tmp_path (as TORCH_EXTENSIONS_DIR),
    times kept, so that ninja finds the object file up to date."""
    import shutil

    from mpsrt.torch import _glue

    src = _glue.build_directory()
    if not _glue._is_built(src):  # the installed wheel's prebuilt glue, no compiler
        pytest.skip("no cached build of the glue to copy (this process loaded a prebuilt one)")
    dst = tmp_path / "mpsrt" / src.name
    shutil.copytree(src, dst)
    return dst


def _import_with_extensions_dir(root: Path, backend: str) -> subprocess.CompletedProcess[str]:
    # Prebuilt glues are looked for in a folder that does not exist: the cached build is used.
    env = {
        **os.environ,
        "TORCH_EXTENSIONS_DIR": str(root),
        "MPSRT_BACKEND": backend,
        "MPSRT_TORCH_GLUE_DIR": str(root / "no-prebuilt-glues"),
    }
    return subprocess.run(
        [sys.executable, "-c", _IMPORT_AND_USE],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _hold_build_lock(d: Path) -> subprocess.Popen[str]:
    """A process that holds the glue builders' lock in `d` until its stdin closes."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import filelock, sys\n"
            f"lock = filelock.FileLock({str(d / 'mpsrt-build.lock')!r})\n"
            "lock.acquire()\n"
            "print('held', flush=True)\nsys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


@pytest.mark.needs_compiler
@pytest.mark.parametrize("left", ["torch_lock", "builder_killed"])
def test_a_build_killed_half_way_never_blocks_later_imports(
    tmp_path: Path, left: str, backend: str
) -> None:
    # What a build killed half way (Ctrl-C, a CI timeout) leaves: torch's lock file, which
    # torch's own loader waits on forever; and where the builder was killed while linking, also
    # a library cut short, no stamp and the builders' lock held by a process that died. Each
    # later import must load a working glue. The second case rebuilds the glue from scratch
    # (ninja does not take the copy's objects: its log holds their commands under the original
    # folder's paths), two to three minutes of a core: it runs where MPSRT_TEST_GLUE_REBUILD=1
    # (CI sets it for this test with the newest torch: docs/tests.md), once, on the run's first
    # backend (the glue is one library for every backend).
    from conftest import AVAILABLE, BACKENDS

    if left != "torch_lock":
        if os.environ.get("MPSRT_TEST_GLUE_REBUILD") != "1":
            pytest.skip("a full rebuild of the glue (2-3 min of a core): MPSRT_TEST_GLUE_REBUILD=1")
        if backend != next(b for b in BACKENDS if b in AVAILABLE):
            pytest.skip("the glue's rebuild is backend-independent: checked on the first backend")
    from mpsrt.torch import _glue

    d = _cached_build_copy(tmp_path)
    lib = d / f"{d.name}.so"
    (d / "lock").touch()  # torch's lock file, as a killed cpp_extension.load leaves it
    if left == "builder_killed":
        with open(lib, "r+b") as f:
            f.truncate(4096)
        (d / "mpsrt-build-stamp").unlink()  # the build never finished
        holder = _hold_build_lock(d)
        holder.kill()
        holder.communicate()
    out = _import_with_extensions_dir(tmp_path, backend)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["list"]
    assert _glue._is_built(d)
    # A rebuild says so in one line; loading the finished build says nothing.
    announced = [line for line in out.stderr.splitlines() if line.startswith("[torch]")]
    if left != "torch_lock":  # rebuilt: the stale lock file was cleared first
        if hasattr(_glue._cpp_extension(), "FileBaton"):
            # torch <= 2.13: the file's existence is the lock; the build removes it.
            assert not (d / "lock").exists()
        else:
            # Newer torch: an advisory lock (filelock) whose file stays; it must be free.
            import filelock

            with filelock.FileLock(str(d / "lock")).acquire(timeout=0):
                pass
        assert len(announced) == 1 and "; building it (needs a C++ compiler" in announced[0]
    else:
        assert announced == []


def test_waiting_on_a_live_builder_ends_with_a_clear_error(tmp_path: Path) -> None:
    from mpsrt.torch import _glue

    d = tmp_path / "mpsrt" / "build"
    d.mkdir(parents=True)
    holder = _hold_build_lock(d)
    try:
        with pytest.raises(
            ImportError, match=r"\[torch\] waited 0.2 s for another process building"
        ):
            _glue._build(d, verbose=False, wait_seconds=0.2)
        assert not _glue._is_built(d) and not list(d.glob("*.so"))
    finally:
        holder.communicate("")
    assert holder.returncode == 0


def test_accelerator_memory_info_and_capability() -> None:
    free, total = torch.accelerator.get_memory_info()
    assert total == torch.mpsrt.mem_get_info()[1] == mpsrt.mem_get_info()[1]
    assert 0 <= free <= total
    dtypes = torch.accelerator.get_device_capability()["supported_dtypes"]
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.complex64):
        assert dt in dtypes


def test_pinned_host_memory() -> None:
    x = torch.arange(16.0).pin_memory()
    assert x.is_pinned() and x[3:].is_pinned()  # any address inside the allocation
    assert not torch.arange(16.0).is_pinned()
    assert torch.empty(8, pin_memory=True).is_pinned()
    d = x.to("mpsrt", non_blocking=True)
    torch.mpsrt.synchronize()
    assert torch.equal(d.cpu(), x)
    del x
    assert not torch.empty(8).is_pinned()  # freed pinned memory is no longer recognised


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_autocast(dtype: torch.dtype) -> None:
    # torch's op lists and cast policies (those of its accelerators): matmuls in the lower
    # precision, softmax and losses in float32; gradients flow back in the parameters' dtype.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    dev_model = model.to("mpsrt")
    with torch.autocast(device_type="mpsrt", dtype=dtype):
        y = dev_model(x.to("mpsrt"))
        p = y.softmax(-1)
        loss = torch.nn.functional.mse_loss(y, torch.zeros_like(y))
    assert y.dtype == dtype and p.dtype == torch.float32 and loss.dtype == torch.float32
    loss.backward()
    assert all(q.grad is not None and q.grad.dtype == torch.float32 for q in dev_model.parameters())
    # The same casts by hand on cpu give the same numbers.
    w1, b1, w2, b2 = (q.detach().cpu().to(dtype) for q in dev_model.parameters())
    h = torch.nn.functional.linear(x.to(dtype), w1, b1).relu()
    want = torch.nn.functional.linear(h, w2, b2)
    assert torch.equal(y.detach().cpu(), want)
    assert torch.get_autocast_dtype("mpsrt") == torch.float16


def test_device_module_lazy_hooks() -> None:
    assert torch.mpsrt.is_initialized()
    torch.mpsrt.init()
    torch.mpsrt._lazy_init()
    calls = []
    torch.mpsrt._lazy_call(lambda: calls.append(torch.mpsrt.current_device()))
    assert calls == [mpsrt.current_device()]  # already initialised: runs at once
    assert not torch.mpsrt._is_in_bad_fork()
    assert torch.mpsrt.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]


def test_default_stream_and_the_stream_context() -> None:
    # torch.mpsrt.default_stream works on every supported torch (2.13 has no
    # torch._C._get_default_stream); torch.mpsrt.stream(s) is torch.cuda.stream's context.
    default = torch.mpsrt.default_stream()
    assert isinstance(default, torch.Stream) and default.device.type == "mpsrt"
    assert default == torch.mpsrt.current_stream()
    s = torch.Stream(device="mpsrt")
    with torch.mpsrt.stream(s) as entered:
        assert entered is s and torch.mpsrt.current_stream() == s
        x = torch.ones(1000, device="mpsrt") * 3  # queued on s
    assert torch.mpsrt.current_stream() == default
    s.synchronize()
    assert x.sum().item() == 3000
    with torch.mpsrt.stream(None):
        assert torch.mpsrt.current_stream() == default


def test_rng_state_offset_is_torch_cudas_private_api() -> None:
    torch.mpsrt.manual_seed(7)
    assert torch.mpsrt._get_rng_state_offset() == 0
    a = torch.rand(100, device="mpsrt")
    offset = torch.mpsrt._get_rng_state_offset()
    assert offset > 0
    torch.mpsrt._set_rng_state_offset(0)
    assert torch.equal(torch.rand(100, device="mpsrt").cpu(), a.cpu())  # the same numbers again
    assert torch.mpsrt._get_rng_state_offset("mpsrt:0") == offset


def test_autocast_bans_binary_cross_entropy_as_on_cuda() -> None:
    x = torch.rand(4, device="mpsrt")
    y = torch.rand(4, device="mpsrt")
    loss = torch.nn.functional.binary_cross_entropy(x, y)  # outside autocast it runs
    want = torch.nn.functional.binary_cross_entropy(x.cpu(), y.cpu())
    torch.testing.assert_close(loss.cpu(), want)
    with torch.autocast(device_type="mpsrt", dtype=torch.float16):
        with pytest.raises(RuntimeError, match="BCELoss are unsafe to autocast"):
            torch.nn.functional.binary_cross_entropy(x, y)
        # the logits form is safe, as on CUDA
        torch.nn.functional.binary_cross_entropy_with_logits(x, y)


def test_empty_host_cache_after_the_device_was_used(backend: str) -> None:
    # torch.accelerator.empty_host_cache() asks the device's host allocator (pinned memory):
    # mpsrt registers one (it caches nothing). In a fresh interpreter: it used to crash.
    code = (
        "import torch, mpsrt.torch\n"
        "x = torch.ones(4, device='mpsrt') * 2\n"
        "p = torch.ones(1000).pin_memory()\n"
        "assert p.is_pinned()\n"
        "torch.accelerator.empty_host_cache()\n"
        "x.copy_(p[:4], non_blocking=True)\n"
        "print(x.cpu().tolist(), p.is_pinned())\n"
    )
    r = run_python(code, backend)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[0] == "[1.0, 1.0, 1.0, 1.0] True"


def _attention_inputs(device: str, dropout: bool = False) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 32, generator=g) for _ in range(3))
    return tuple(t.to(device).requires_grad_(True) for t in (q, k, v))


@pytest.mark.parametrize("mode", ["cpu", "device"])
def test_attention_backend_is_the_cpus_choice_on_host_memory(mode: str) -> None:
    # scaled_dot_product_attention asks the device which backend to take. Where the device's
    # ops run as CPU kernels on host-visible memory, mpsrt answers as the CPU would for the
    # same tensors (flash attention here: torch's fused CPU kernel, run by the fallback on the
    # device memory); on mpsrt's kernels the fused-attention pair ("overrideable": mpsrt's
    # fused kernels), on discrete memory without them the math path.
    previous = torch.mpsrt._set_kernels(mode)
    try:
        host = (
            torch.mpsrt._kernels_enabled() is False
            and mpsrt.get_device_properties(0).unified_memory
        )
        cpu_q, cpu_k, cpu_v = _attention_inputs("cpu")
        q, k, v = _attention_inputs("mpsrt")
        cpu_choice = torch._fused_sdp_choice(cpu_q, cpu_k, cpu_v)
        assert cpu_choice == 1  # flash attention: torch's choice on the CPU for these inputs
        device = 4 if torch.mpsrt._kernels_enabled() else 0  # SDPBackend.overrideable, math
        assert torch._fused_sdp_choice(q, k, v) == (cpu_choice if host else device)
        # Dropout: the CPU's choice again (whatever it is), never a backend the CPU lacks.
        assert torch._fused_sdp_choice(q, k, v, dropout_p=0.5) == (
            torch._fused_sdp_choice(cpu_q, cpu_k, cpu_v, dropout_p=0.5) if host else device
        )
        torch.mpsrt.reset_fallback_counts()
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        ran = torch.mpsrt.fallback_counts()
        flash = "aten::_scaled_dot_product_flash_attention_for_cpu"
        assert (flash in ran) == host, ran
        assert ("aten::bmm" in ran) == (not host and not torch.mpsrt._kernels_enabled()), ran
        want = torch.nn.functional.scaled_dot_product_attention(cpu_q, cpu_k, cpu_v, is_causal=True)
        torch.testing.assert_close(out.cpu(), want, atol=1e-5, rtol=1e-5)
        out.sum().backward()
        want.sum().backward()
        for got, ref in ((q, cpu_q), (k, cpu_k), (v, cpu_v)):
            torch.testing.assert_close(got.grad.cpu(), ref.grad, atol=1e-4, rtol=1e-4)
    finally:
        torch.mpsrt._set_kernels(previous)


def test_layer_norm_runs_the_fused_kernel_not_the_decomposition() -> None:
    # layer_norm on mpsrt reaches native_layer_norm (a kernel of mpsrt's, or torch's fused CPU
    # kernel through the fallback), never torch's generic decomposition into mean/var/...
    x = torch.randn(8, 512)
    w, b = torch.randn(512), torch.randn(512)
    with torch.profiler.profile() as prof:
        out = torch.nn.functional.layer_norm(x.to("mpsrt"), (512,), w.to("mpsrt"), b.to("mpsrt"))
    names = {e.key for e in prof.key_averages()}
    assert "aten::native_layer_norm" in names, names
    assert not names & {"aten::var_mean", "aten::var", "aten::mean", "aten::rsqrt"}, names
    torch.testing.assert_close(
        out.cpu(), torch.nn.functional.layer_norm(x, (512,), w, b), atol=1e-5, rtol=1e-5
    )


def test_data_assignment_moves_between_cpu_and_mpsrt_as_on_cuda() -> None:
    # torch answers True for dense CPU and CUDA tensors, so `p.data = p.data.to(...)` moves a
    # tensor between them; mpsrt's dense tensors answer the same with the CPU's.
    cpu, dev = torch.arange(4.0), torch.arange(4.0, device="mpsrt") * 2
    assert torch._has_compatible_shallow_copy_type(dev, cpu)
    assert torch._has_compatible_shallow_copy_type(cpu, dev)
    assert torch._has_compatible_shallow_copy_type(dev, dev)
    assert not torch._has_compatible_shallow_copy_type(dev, torch.empty(4, device="meta"))
    assert not torch._has_compatible_shallow_copy_type(dev, torch.eye(2).to_sparse())
    p = torch.nn.Parameter(torch.ones(4))
    p.data = dev
    assert p.device.type == "mpsrt" and isinstance(p, torch.nn.Parameter)
    assert torch.equal(p.detach().cpu(), torch.arange(4.0) * 2)
    p.data = p.data.cpu()
    assert p.device.type == "cpu" and torch.equal(p.detach(), torch.arange(4.0) * 2)
    with pytest.raises(RuntimeError, match="incompatible tensor type"):
        p.data = torch.empty(4, device="meta")


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_device_capability_lists_the_dtypes_the_device_makes_and_converts() -> None:
    dtypes = torch.accelerator.get_device_capability()["supported_dtypes"]
    packed = {torch.uint1, torch.uint7, torch.int1, torch.int6, torch.float4_e2m1fn_x2, torch.bits8}
    quantized = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}
    assert not dtypes & packed, dtypes & packed
    assert quantized <= dtypes  # made by quantizing (test_torch_quantized.py), not by ones()
    # Every other dtype listed is made, copied both ways and converted on the device (torch's
    # device-generic tests make a tensor of each).
    for dt in dtypes - quantized:
        ones = torch.ones(4, dtype=dt)
        x = torch.zeros(4, dtype=dt, device="mpsrt")
        x.copy_(ones)
        assert torch.equal(x.cpu().view(torch.uint8), ones.view(torch.uint8)), dt
        wide = torch.complex128 if dt.is_complex else torch.float64
        assert torch.equal(x.to(wide).cpu(), ones.to(wide)), dt
    assert {torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool} <= dtypes


_CONVS = {
    "conv1d": lambda: torch.nn.Conv1d(3, 8, 3, padding=1),
    "conv2d-grouped-dilated": lambda: torch.nn.Conv2d(4, 8, 3, stride=2, groups=2, dilation=2),
    "conv-transpose2d": lambda: torch.nn.ConvTranspose2d(4, 6, 3, stride=2, output_padding=1),
    "conv-transpose2d-grouped": lambda: torch.nn.ConvTranspose2d(4, 6, 3, groups=2, bias=False),
    "conv3d-no-bias": lambda: torch.nn.Conv3d(2, 4, 3, bias=False),
}


@pytest.mark.parametrize("name", sorted(_CONVS))
def test_convolutions_and_their_gradients_match_cpu(name: str) -> None:
    # torch sends an out-of-tree device's convolutions to convolution_overrideable and their
    # gradients to convolution_backward_overrideable, which no CPU kernel serves: they run as
    # the generic convolution ops' CPU kernels through the fallback.
    import copy

    torch.manual_seed(0)
    mod = _CONVS[name]()
    dims = {torch.nn.Conv1d: 1, torch.nn.Conv3d: 3}.get(type(mod), 2)
    x = torch.randn(2, mod.in_channels, *([9] * dims), requires_grad=True)
    on_device = copy.deepcopy(mod).to("mpsrt")
    xd = x.detach().to("mpsrt").requires_grad_(True)
    torch.mpsrt.reset_fallback_counts()
    y, yd = mod(x), on_device(xd)
    grad = torch.randn_like(y)
    y.backward(grad)
    yd.backward(grad.to("mpsrt"))
    assert yd.device.type == "mpsrt"
    torch.testing.assert_close(yd.cpu(), y, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, atol=1e-5, rtol=1e-5)
    for p, q in zip(on_device.parameters(), mod.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, atol=1e-4, rtol=1e-4)
    ran = torch.mpsrt.fallback_counts()
    assert ran.get("aten::convolution") == 1 and ran.get("aten::convolution_backward") == 1, ran


def test_convolution_outputs_have_the_strides_torch_compile_expects() -> None:
    # torch decides an out-of-tree device's convolutions give contiguous outputs (its fake
    # tensors say so to torch.compile); a channels-last input keeps its format on the CPU only.
    from torch._subclasses.fake_tensor import FakeTensorMode

    conv = torch.nn.Conv2d(4, 8, 3).to("mpsrt")
    x = torch.randn(2, 4, 9, 9, device="mpsrt").to(memory_format=torch.channels_last)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = conv(mode.from_tensor(x))
    got = conv(x)
    assert got.stride() == fake.stride() == got.contiguous().stride()


@pytest.mark.parametrize("case", ["plain", "causal", "bias"])
def test_fused_attention_overrideable_pair_matches_cpu(case: str) -> None:
    # The fused-attention ops torch leaves to out-of-tree devices, called as a caller of
    # them (or an "overrideable" backend choice) would: forward, and backward through the
    # forward's derivative (its backward op), against CPU attention.
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, requires_grad=True) for _ in range(3))
    bias = torch.randn(2, 1, 5, 5, requires_grad=True) if case == "bias" else None
    causal = case == "causal"
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=bias, is_causal=causal
    )
    dev = [t.detach().to("mpsrt").requires_grad_(True) for t in (q, k, v)]
    dev_bias = bias.detach().to("mpsrt").requires_grad_(True) if bias is not None else None
    outs = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        *dev, dev_bias, is_causal=causal
    )
    got, lse = outs[0], outs[1]
    assert got.device.type == "mpsrt" and lse.shape == (2, 3, 5)
    assert outs[4] == 5 and outs[5] == 5  # max_q, max_k
    torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(expected)
    expected.backward(grad)
    got.backward(grad.to("mpsrt"))
    for d, c in zip([*dev, dev_bias], [q, k, v, bias]):
        if c is not None:
            torch.testing.assert_close(d.grad.cpu(), c.grad, atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="return_debug_mask=True is not supported"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
            *dev, return_debug_mask=True
        )


def test_a_script_ending_right_after_a_backward_exits_cleanly(backend: str) -> None:
    # torch's autograd worker thread of the device may drop a finished backward's Python state
    # while the interpreter finalizes (exit code 134, "terminate called ..."): the device's
    # exit hook lets it finish first. Three runs at once: the race showed in half the runs.
    code = (
        "import torch, mpsrt.torch\n"
        "x = torch.randn(2, 3, requires_grad=True).to('mpsrt')\n"
        "m = torch.nn.Linear(3, 8).to('mpsrt')\n"
        "m(x).sum().backward()\n"
    )
    env = {**os.environ, "MPSRT_BACKEND": backend}
    runs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    for p in runs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        assert "terminate called" not in err
