"""Quantized tensors on the PyTorch device (qint8, quint8, qint32, quint4x2, quint2x4): made on
the device, copied to and from the CPU, their quantizers (per tensor and per channel), and their
ops through the fallback (the QuantizedCPU kernels on quantized stand-ins), on both memory
models. torch's CPU results are the expectation throughout (OpenReg's test_device_capability
for the dtype list)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch")
import mpsrt.torch  # noqa: E402,F401  (after the importorskip)

# torch 2.13 deprecates making quantized tensors (its warning, once per process); the tests make
# them on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:.*quantized tensor creation functions.*")

QDTYPES = [torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4]


@pytest.fixture(params=["auto", "discrete"])
def memory(request: pytest.FixtureRequest, runtime_env, backend: str) -> Iterator[str]:
    """The test runs on the backend's own memory model and on discrete memory (vulkan; the cpu
    backend's memory is host memory either way, so it runs once)."""
    if request.param == "discrete" and backend != "vulkan":
        pytest.skip(f"backend {backend}: host memory only (discrete memory is vulkan's setting)")
    with runtime_env(MPSRT_VULKAN_MEMORY=request.param):
        yield request.param
        gc.collect()


def _q(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.quantize_per_tensor(x, 0.05, 3 if dtype != torch.qint32 else 7, dtype)


def test_the_device_lists_every_quantized_dtype() -> None:
    # OpenReg's test_device_capability: every dtype of get_all_dtypes(include_complex32=True,
    # include_qint=True) is a supported dtype of the device.
    supported = torch.accelerator.get_device_capability("mpsrt:0")["supported_dtypes"]
    assert set(QDTYPES) <= set(supported)
    common = pytest.importorskip("torch.testing._internal.common_dtype")
    assert set(common.get_all_dtypes(include_complex32=True, include_qint=True)) <= set(supported)


@pytest.mark.parametrize("dtype", QDTYPES, ids=str)
def test_per_tensor_round_trip_and_metadata(memory: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.rand(6, 8) * 4 - 1
    q = _q(x, dtype)
    d = q.to("mpsrt")
    assert d.device.type == "mpsrt" and d.dtype == dtype and d.is_quantized
    assert torch._C._dispatch_keys(d).has(torch._C.DispatchKey.QuantizedPrivateUse1)
    assert (d.qscheme(), d.q_scale(), d.q_zero_point()) == (
        q.qscheme(),
        q.q_scale(),
        q.q_zero_point(),
    )
    back = d.cpu()
    assert back.dtype == dtype and back.is_quantized and back.q_scale() == q.q_scale()
    assert torch.equal(back.int_repr(), q.int_repr())
    assert torch.equal(back.dequantize(), q.dequantize())
    # Ops of quantized tensors run on the device (the QuantizedCPU kernels on stand-ins).
    rep = d.int_repr()
    assert rep.device.type == "mpsrt" and torch.equal(rep.cpu(), q.int_repr())
    deq = d.dequantize()
    assert deq.device.type == "mpsrt" and torch.equal(deq.cpu(), q.dequantize())
    made = torch.empty_like(d)
    assert made.device.type == "mpsrt" and made.is_quantized and made.q_scale() == q.q_scale()
    made.copy_(q)  # CPU -> device into an existing quantized tensor
    assert torch.equal(made.cpu().int_repr(), q.int_repr())
    # clone: torch's CPU kernels cannot copy the packed dtypes; the device says the same.
    same_outcome(lambda: q.clone().int_repr(), lambda: d.clone().cpu().int_repr())
    assert torch.equal(d, q.to("mpsrt"))


def same_outcome(on_cpu, on_device) -> None:
    """Both calls give equal results, or both raise the same error (type and text)."""
    try:
        want = on_cpu()
    except Exception as e:  # whatever torch's CPU raises is the expectation
        with pytest.raises(type(e)) as got:
            on_device()
        assert str(got.value).splitlines()[0] == str(e).splitlines()[0]
        return
    assert torch.equal(on_device(), want)


@pytest.mark.parametrize("dtype", [torch.qint8, torch.quint8, torch.qint32], ids=str)
def test_factories_views_and_ops_match_the_cpu(memory: str, dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    x = torch.randn(6, 8)
    q = _q(x, dtype)
    e = torch._empty_affine_quantized([6, 8], scale=0.05, zero_point=q.q_zero_point(),
                                      dtype=dtype, device="mpsrt")  # fmt: skip
    assert e.device.type == "mpsrt" and e.is_quantized and e.q_scale() == 0.05
    e.copy_(q)
    # quantized on the device itself, from a float tensor there
    on_device = torch.quantize_per_tensor(x.to("mpsrt"), 0.05, q.q_zero_point(), dtype)
    assert on_device.device.type == "mpsrt" and torch.equal(
        on_device.cpu().int_repr(), q.int_repr()
    )
    assert torch.equal(e[2:4].int_repr().cpu(), q[2:4].int_repr())  # a view: rows 2-3
    assert torch.equal(e.t().contiguous().int_repr().cpu(), q.t().contiguous().int_repr())
    assert torch.equal(torch.relu(e).int_repr().cpu(), torch.relu(q).int_repr())
    assert torch.equal(torch.cat([e, e]).int_repr().cpu(), torch.cat([q, q]).int_repr())
    # a float source quantized into an existing quantized tensor, from the CPU and the device
    want = torch.empty_like(q).copy_(x)
    for src in (x, x.to("mpsrt")):
        got = torch.empty_like(e).copy_(src)
        assert got.device.type == "mpsrt" and torch.equal(got.int_repr().cpu(), want.int_repr())
    torch.mpsrt.reset_fallback_counts()
    e.int_repr()
    assert torch.mpsrt.fallback_counts().get("aten::int_repr") == 1


def test_per_channel_quantizers(memory: str) -> None:
    torch.manual_seed(2)
    x = torch.randn(5, 4)
    scales, zero_points = torch.rand(4).double() + 0.05, torch.randint(0, 9, (4,))
    q = torch.quantize_per_channel(x, scales, zero_points, 1, torch.quint8)
    d = q.to("mpsrt")
    assert d.qscheme() == torch.per_channel_affine and d.q_per_channel_axis() == 1
    got_scales = d.q_per_channel_scales()
    assert got_scales.device.type == "mpsrt"  # as torch.cuda's live on the device
    assert torch.equal(got_scales.cpu(), q.q_per_channel_scales())
    assert torch.equal(d.q_per_channel_zero_points().cpu(), q.q_per_channel_zero_points())
    assert torch.equal(d.int_repr().cpu(), q.int_repr())
    assert torch.equal(d.dequantize().cpu(), q.dequantize())
    assert torch.equal(d.cpu().dequantize(), q.dequantize())
    like = torch.empty_like(d)
    assert like.qscheme() == torch.per_channel_affine and like.device.type == "mpsrt"
    # quantized on the device with scales and zero points there
    on_device = torch.quantize_per_channel(
        x.to("mpsrt"), scales.to("mpsrt"), zero_points.to("mpsrt"), 1, torch.quint8
    )
    assert torch.equal(on_device.int_repr().cpu(), q.int_repr())
    assert torch.equal(on_device.dequantize().cpu(), q.dequantize())


def test_errors_are_torchs_and_leave_the_device_usable(memory: str) -> None:
    # A quantized tensor has no empty_strided (torch's CPU says so; so does the device).
    with pytest.raises(RuntimeError, match="empty_strided not supported on quantized tensors"):
        torch.empty_strided((2,), (1,), dtype=torch.qint8, device="mpsrt")
    # A packed dtype's copy takes whole contiguous tensors (its elements are not whole bytes).
    q = torch.quantize_per_tensor(torch.rand(4, 8), 0.1, 0, torch.quint4x2)
    d = q.to("mpsrt")
    with pytest.raises(RuntimeError, match="contiguous tensor at the start of its storage"):
        d.t().cpu()
    assert torch.equal(d.cpu().int_repr(), q.int_repr())
    # Schemes that differ: torch's copy_ refuses before any byte moves.
    per_tensor = torch.quantize_per_tensor(torch.rand(4), 0.1, 0, torch.quint8).to("mpsrt")
    per_channel = torch.quantize_per_channel(
        torch.rand(4), torch.rand(4).double() + 0.1, torch.zeros(4, dtype=torch.long), 0,
        torch.quint8,
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="Quantized Copy only works with same qscheme"):
        per_tensor.copy_(per_channel)
    assert per_tensor.qscheme() == torch.per_tensor_affine
    same_outcome(  # a quantized source into a float tensor: torch's refusal
        lambda: torch.ones(4).copy_(per_tensor.cpu()),
        lambda: torch.ones(4, device="mpsrt").copy_(per_tensor).cpu(),
    )
    assert (torch.ones(3, device="mpsrt") * 2).cpu().tolist() == [2.0, 2.0, 2.0]
