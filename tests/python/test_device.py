"""Devices: counts, properties, current device, the device() context manager, bad input."""

from __future__ import annotations

import json
import threading

import mpsrt
import pytest
from conftest import run_python


class FakeTorchDevice:
    """Quacks like torch.device: `.type` and `.index`."""

    def __init__(self, type: str, index: int | None) -> None:
        self.type = type
        self.index = index


def test_backend_is_active(backend: str) -> None:
    assert mpsrt.backend() == backend
    assert backend in mpsrt.available_backends()
    assert set(mpsrt.available_backends()) <= set(mpsrt._C.built_backends())
    assert mpsrt.is_available() is True
    assert mpsrt.device_count() >= 1


_INFO = "import json, mpsrt; print(json.dumps(mpsrt.backend_info()))"


def test_default_backend_prefers_hardware_then_cpu_then_software() -> None:
    """Unset MPSRT_BACKEND: metal, vulkan on a hardware GPU, cpu, then software Vulkan."""
    r = run_python(_INFO)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["backend"] == info["available"][0]
    assert set(info["available"]) <= set(info["built"])
    assert info["reason"].startswith(f"{info['backend']}: the best available backend")
    if "vulkan" not in info["available"]:
        return
    forced = run_python(_INFO, backend="vulkan")
    assert forced.returncode == 0, forced.stderr
    finfo = json.loads(forced.stdout)
    assert finfo["backend"] == "vulkan"
    assert finfo["reason"].startswith("vulkan: chosen by MPSRT_BACKEND")
    if "is a software device" in finfo["reason"]:  # lavapipe or SwiftShader, not a GPU
        assert info["backend"] == "cpu"
        assert info["available"].index("cpu") < info["available"].index("vulkan")
        assert "set MPSRT_BACKEND=vulkan to use it" in info["reason"]
        assert "is a software device" in info["reason"]
    else:
        assert info["backend"] in ("metal", "vulkan")


def test_backend_info_describes_the_running_backend(backend: str) -> None:
    info = mpsrt.backend_info()
    assert info["backend"] == backend == mpsrt.backend()
    assert info["available"] == mpsrt.available_backends()
    assert info["reason"].startswith(f"{backend}: ")


def test_properties_are_real(backend: str) -> None:
    p = mpsrt.get_device_properties()
    assert p.backend == backend
    assert p.index == 0
    assert isinstance(p.name, str) and p.name
    assert p.total_memory > 1 << 20
    assert 0 < p.recommended_max_memory <= p.total_memory
    assert 0 < p.max_buffer_size <= p.total_memory
    assert p.timestamp_period_ns > 0
    assert mpsrt.get_device_name() == p.name
    assert repr(p).startswith("DeviceProperties(") and p.name in repr(p)
    if backend == "cpu":
        assert p.unified_memory is True
        with open("/proc/meminfo") as f:
            mem_kib = int(f.readline().split()[1])
        assert p.total_memory <= mem_kib * 1024
        assert p.recommended_max_memory == p.total_memory // 4 * 3
        assert p.details.startswith("kernels=")


def test_device_argument_forms() -> None:
    n0 = mpsrt.get_device_properties(0).name
    for form in (
        0,
        "mps",
        "mps:0",
        f"{mpsrt.backend()}:0",
        mpsrt.backend(),
        FakeTorchDevice("mps", 0),
        FakeTorchDevice("mps", None),
        None,
    ):
        assert mpsrt.get_device_properties(form).name == n0
        assert mpsrt.get_device_properties(form).index == 0


def test_set_device_and_context_manager(runtime_env) -> None:
    if mpsrt.backend() != "cpu" and mpsrt.device_count() < 3:
        pytest.skip("needs 3 devices; this backend has fewer here")
    with runtime_env(MPSRT_CPU_DEVICES=3):
        assert mpsrt.device_count() == 3
        assert mpsrt.current_device() == 0
        with mpsrt.device(2):
            assert mpsrt.current_device() == 2
            assert mpsrt.get_device_properties().index == 2
            with mpsrt.device("mps:1"):
                assert mpsrt.current_device() == 1
            assert mpsrt.current_device() == 2
        assert mpsrt.current_device() == 0
        with pytest.raises(KeyError), mpsrt.device(1):
            raise KeyError("restored even when the body raises")
        assert mpsrt.current_device() == 0
        with mpsrt.device(None):
            assert mpsrt.current_device() == 0
        mpsrt.set_device(1)
        assert mpsrt.current_device() == 1
        mpsrt.synchronize()
        mpsrt.synchronize(2)
        mpsrt.set_device("mps:0")
        assert mpsrt.current_device() == 0
        with pytest.raises(ValueError, match=r"invalid device index 3: expected 0 <= index < 3"):
            mpsrt.set_device(3)


def test_current_device_is_per_thread(runtime_env) -> None:
    with runtime_env(MPSRT_CPU_DEVICES=2):
        if mpsrt.device_count() < 2:
            pytest.skip("needs 2 devices; this backend has fewer here")
        mpsrt.set_device(1)
        seen: list[int] = []

        def body() -> None:
            seen.append(mpsrt.current_device())
            mpsrt.set_device(1)
            seen.append(mpsrt.current_device())

        t = threading.Thread(target=body)
        t.start()
        t.join()
        assert seen == [0, 1]
        assert mpsrt.current_device() == 1


@pytest.mark.parametrize(
    ("arg", "exc", "pattern"),
    [
        (-1, ValueError, r"invalid device index -1: expected 0 <= index < \d+"),
        (10**6, ValueError, r"invalid device index 1000000: expected 0 <= index < \d+"),
        (2**80, ValueError, r"invalid device index"),
        ("x", ValueError, r"invalid device string 'x': expected 'mps', 'mps:N'"),
        ("mps:", ValueError, r"must be a device index"),
        ("mps:abc", ValueError, r"must be a device index"),
        ("mps:99", ValueError, r"invalid device index 99"),
        (1.5, TypeError, r"expected a device index \(int\).*got float 1.5"),
        (True, TypeError, r"got bool True"),
        (None, TypeError, r"got None"),
        ([0], TypeError, r"got list"),
    ],
)
def test_set_device_bad_input(arg: object, exc: type, pattern: str) -> None:
    before = mpsrt.current_device()
    with pytest.raises(exc, match=pattern):
        mpsrt.set_device(arg)
    assert mpsrt.current_device() == before  # nothing changed
    mpsrt.synchronize()  # and the runtime still works


def test_other_backend_string_is_rejected() -> None:
    other = next(b for b in ("cpu", "vulkan", "metal") if b != mpsrt.backend())
    with pytest.raises(ValueError, match=f"belongs to backend {other}"):
        mpsrt.get_device_properties(f"{other}:0")


@pytest.mark.parametrize(
    "fn", [mpsrt.get_device_properties, mpsrt.get_device_name, mpsrt.synchronize]
)
def test_device_queries_bad_input(fn) -> None:
    with pytest.raises(ValueError, match="invalid device index"):
        fn(-1)
    with pytest.raises(TypeError, match="got float"):
        fn(0.0)
    with pytest.raises(ValueError, match="invalid device string"):
        fn("gpu")


def test_native_set_device_returns_previous(runtime_env) -> None:
    with runtime_env(MPSRT_CPU_DEVICES=2):
        if mpsrt.device_count() < 2:
            pytest.skip("needs 2 devices; this backend has fewer here")
        assert mpsrt._C.set_device(1) == 0
        assert mpsrt._C.set_device(0) == 1
        with pytest.raises(ValueError, match="invalid device index -1"):
            mpsrt._C.set_device(-1)
