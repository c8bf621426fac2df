"""The PyTorch device "mpsrt" (import mpsrt.torch): registration, one allocator shared with
mpsrt, copies, operators through the CPU-kernel fallback, the seed workload vs CPU, bad input.

Skipped (visibly) when torch is not installed; on a backend whose device memory is not
host-visible the operator tests skip with that reason. The glue is compiled at the first
`import mpsrt.torch` (torch's file lock makes xdist workers wait for one build).
"""

from __future__ import annotations

import contextlib
import gc
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import mpsrt
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch")
import mpsrt.torch  # noqa: E402  (after the importorskip)


@pytest.fixture(autouse=True)
def _free_tensors() -> Iterator[None]:
    # conftest re-creates the runtime between backends, which needs every Buffer freed:
    # tensors in reference cycles (autograd graphs, modules) go here.
    yield
    gc.collect()
    mpsrt.synchronize()


@pytest.fixture
def host_visible(backend: str) -> None:
    try:
        torch.empty(1, device="mpsrt")
    except RuntimeError as e:
        if "not host-visible" in str(e):
            pytest.skip(f"backend {backend}: device memory is not host-visible ({e})")
        raise


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


def test_allocation_is_shared_with_mpsrt(host_visible: None) -> None:
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


def test_copies_round_trip(host_visible: None) -> None:
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


def test_fill_zero_and_views(host_visible: None) -> None:
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


def test_ops_match_cpu(host_visible: None) -> None:
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


def test_autograd_and_optimizer(host_visible: None) -> None:
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
def test_seed_workload_matches_cpu(host_visible: None, train: bool) -> None:
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


def test_streams_and_events(host_visible: None) -> None:
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
    assert torch.equal(x.sum().cpu(), torch.tensor(float(1 << 16)))
    torch.accelerator.synchronize()
    assert mpsrt.current_stream() == mpsrt.default_stream()
    t0, t1 = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
    t0.record()
    torch.ones(1 << 20, device="mpsrt").mul_(2)
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


def test_bad_input(host_visible: None) -> None:
    with pytest.raises(RuntimeError, match="negative dimension"):
        torch.empty(-1, device="mpsrt")
    n = mpsrt.device_count()
    with pytest.raises(IndexError, match="The device index is out of range"):
        torch.empty(2, device=f"mpsrt:{n}")
    with pytest.raises(IndexError, match="The device index is out of range"):
        torch.mpsrt.set_device(n)
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


def test_storages(host_visible: None) -> None:
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


def test_save_load_round_trip(host_visible: None, tmp_path: Path) -> None:
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


def test_state_dict_round_trip(host_visible: None, tmp_path: Path) -> None:
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


def test_load_onto_missing_device_raises(host_visible: None, tmp_path: Path) -> None:
    path = tmp_path / "t.pt"
    torch.save(torch.ones(3, device="mpsrt"), path)
    n = mpsrt.device_count()
    with pytest.raises(RuntimeError, match=r"device_count\(\) is"):
        torch.load(path, map_location=f"mpsrt:{n}")
    # a location that only starts with "mps" is not Apple's MPS: it is ours
    assert torch.load(path, map_location="mpsrt").device.type == "mpsrt"
