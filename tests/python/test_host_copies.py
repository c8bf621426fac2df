"""Host access per memory model: numpy(), copy_(host data), _raw() and DLPack alias the memory on
unified memory and copy it on discrete memory, where every host copy goes through the device's
staging pool (bounded, shared by threads, released by empty_cache).

Every test runs on the backend under test in the run's memory model (the README's command: cpu
and lavapipe, both unified; CI's second run: vulkan with MPSRT_VULKAN_MEMORY=discrete), and once
more in a runtime of its own with MPSRT_VULKAN_MEMORY=discrete: the discrete model on vulkan, so
that the staging path is tested in every run; other backends ignore the setting (checked) and
stay unified.
"""

from __future__ import annotations

import ctypes
import gc
import threading

import mpsrt
import numpy as np
import pytest
from conftest import is_unified
from mpsrt import memory

KiB = 1 << 10
MiB = 1 << 20
POOL = 64 * KiB  # MPSRT_STAGING_BYTES in these tests: 4 chunks of 16 KiB
CHUNK = POOL // 4


@pytest.fixture(params=["as_run", "forced"])
def model(request: pytest.FixtureRequest, backend: str, runtime_env):
    """The runtime of one test: the run's memory model, or MPSRT_VULKAN_MEMORY=discrete (the
    discrete model on vulkan; nothing elsewhere); both with a small staging pool, so that copies
    many times the pool pass through it. Yields "discrete" where that model is forced."""
    env = {"MPSRT_STAGING_BYTES": str(POOL)}
    if request.param == "forced":
        env["MPSRT_VULKAN_MEMORY"] = "discrete"
    with runtime_env(**env):
        yield "discrete" if request.param == "forced" and backend == "vulkan" else request.param


def _stats() -> dict[str, int]:
    return mpsrt.memory_stats()


def _pattern(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def test_the_memory_model_is_a_device_property(model: str, backend: str) -> None:
    props = mpsrt.get_device_properties()
    if model == "discrete":
        assert props.unified_memory is False
        assert "memory=discrete" in props.details
    elif backend == "cpu":
        assert props.unified_memory is True  # also with MPSRT_VULKAN_MEMORY=discrete
    b = mpsrt.empty(16)
    # Host memory (kDLCPU) exactly where the model is unified; the device's own otherwise.
    assert b.__dlpack_device__() == ((1, 0) if props.unified_memory else (7, b.device))


def test_numpy_aliases_on_unified_and_copies_on_discrete(model: str) -> None:
    b = mpsrt.empty((4, 4), dtype="float32").fill_(1.0)
    a = b.numpy()
    assert a.shape == (4, 4) and a.dtype == np.float32 and (a == 1.0).all()
    a[0, 0] = 5.0  # a write to the array ...
    b.fill_(2.0)  # ... and a device write after numpy()
    mpsrt.synchronize()
    if is_unified():
        assert a.ctypes.data == b.data_ptr
        assert (a == 2.0).all(), "the array is the memory: the device's fill shows through"
    else:
        assert a.ctypes.data != b.data_ptr
        assert a[0, 0] == 5.0 and (a.reshape(-1)[1:] == 1.0).all(), "a copy: it stays as read"
        assert (b.numpy() == 2.0).all(), "the write to the copy did not reach the device"
    raw = b._raw()
    assert raw.dtype == np.uint8 and raw.nbytes == 64
    assert (raw.view(np.float32) == 2.0).all()


@pytest.mark.parametrize(
    "n",
    [1, 3, CHUNK - 1, CHUNK, CHUNK + 1, POOL - 5, POOL, POOL + 1, 7 * POOL + 3, MiB + 5],
    ids=lambda n: f"{n}B",
)
def test_round_trips_below_at_and_above_the_chunk_and_the_pool(model: str, n: int) -> None:
    copies = _stats()["num_staged_copies"]
    src = _pattern(n, n)
    b = mpsrt.empty(n).copy_(src)
    assert np.array_equal(b.numpy(), src)
    # The device reads what the host wrote, and the host what the device wrote.
    c = mpsrt.empty(n).copy_(b)
    assert np.array_equal(c.numpy(), src)
    staged = _stats()["num_staged_copies"] - copies
    assert staged == (0 if is_unified() else 3)
    assert _stats()["staging_bytes.peak"] <= POOL


def test_typed_round_trips_and_views_with_offsets(model: str) -> None:
    x = np.arange(3 * POOL // 4 + 7, dtype=np.float32) * 0.5 - 3
    b = mpsrt.empty(x.shape, dtype="float32").copy_(x)
    np.testing.assert_array_equal(b.numpy(), x)
    # A view at an odd byte offset, of an odd size: only its bytes move, both ways.
    base = mpsrt.empty(3 * POOL + 11).fill_(0xA5)
    v = base.view(CHUNK + 3, (POOL + 1,), "uint8")
    src = _pattern(POOL + 1, 9)
    v.copy_(src)
    assert np.array_equal(v.numpy(), src)
    want = np.full(base.nbytes, 0xA5, np.uint8)
    want[CHUNK + 3 : CHUNK + 3 + POOL + 1] = src
    assert np.array_equal(base.numpy(), want)
    rows = mpsrt.empty((64, 1000), dtype="int16").fill_(0)
    rows[5:9].copy_(np.full((4, 1000), -7, np.int16))
    got = rows.numpy()
    assert (got[5:9] == -7).all() and (got[:5] == 0).all() and (got[9:] == 0).all()


def test_host_copies_wait_for_queued_work_on_every_stream(model: str) -> None:
    s = mpsrt.Stream()
    b = mpsrt.empty(5 * POOL, dtype="uint8")
    with mpsrt.stream(s):
        b.fill_(3)  # queued on another stream: numpy() waits for it
    assert (b.numpy() == 3).all()
    with mpsrt.stream(s):
        b.fill_(4)
    b.copy_(np.full(b.nbytes, 9, np.uint8))  # after the fill, not overwritten by it
    assert (b.numpy() == 9).all()


def test_concurrent_host_copies_share_the_pool(model: str) -> None:
    mpsrt.reset_peak_memory_stats()
    errors: list[str] = []

    def work(i: int) -> None:
        try:
            for r in range(4):
                src = _pattern(3 * POOL + 101 * i + r, 10 * i + r)
                b = mpsrt.empty(src.nbytes).copy_(src)
                if not np.array_equal(b.numpy(), src):
                    errors.append(f"thread {i} round {r}: wrong bytes")
        except Exception as e:  # reported below
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _stats()["staging_bytes.peak"] <= POOL


def test_staging_memory_is_counted_and_released_by_empty_cache(model: str) -> None:
    mpsrt.empty_cache()
    assert _stats()["staging_bytes.current"] == 0
    mpsrt.reset_peak_memory_stats()
    b = mpsrt.empty(3 * POOL)
    driver = mpsrt.driver_allocated_memory()
    b.copy_(_pattern(3 * POOL, 1))
    b.numpy()
    s = _stats()
    if is_unified():
        assert s["staging_bytes.current"] == s["staging_bytes.peak"] == 0
        return
    assert 0 < s["staging_bytes.current"] <= POOL
    assert s["staging_bytes.current"] % CHUNK == 0
    assert s["staging_bytes.peak"] >= s["staging_bytes.current"]
    assert s["num_staged_copies"] >= 2
    # Staging memory is host memory: not the device's heaps.
    assert mpsrt.driver_allocated_memory() == driver
    mpsrt.empty_cache()
    assert _stats()["staging_bytes.current"] == 0
    assert _stats()["staging_bytes.peak"] == s["staging_bytes.peak"]
    mpsrt.reset_peak_memory_stats()
    assert _stats()["staging_bytes.peak"] == 0
    mpsrt.reset_accumulated_memory_stats()
    assert _stats()["num_staged_copies"] == 0
    assert b.numpy().nbytes == 3 * POOL  # the pool refills on demand


def test_options_list_the_settings(model: str) -> None:
    opts = {o["name"]: o["value"] for o in mpsrt.options()}
    assert opts["MPSRT_STAGING_BYTES"] == str(POOL)
    if model != "as_run":
        assert opts["MPSRT_VULKAN_MEMORY"] == "discrete"


def _capsule(cap: object) -> tuple[int, tuple[int, int]]:
    """(data pointer, (device type, device id)) of a versioned DLPack capsule."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    p = get(cap, b"dltensor_versioned")
    # DLManagedTensorVersioned: version (8 bytes), manager_ctx, deleter, flags, then DLTensor:
    # data, device {int32 type, int32 id}.
    data = ctypes.c_uint64.from_address(p + 32).value
    device = (ctypes.c_int32.from_address(p + 40).value, ctypes.c_int32.from_address(p + 44).value)
    return data, device


def test_dlpack_per_memory_model(model: str) -> None:
    b = mpsrt.empty((2, 3), dtype="int32").fill_(7)
    copy = np.from_dlpack(b, copy=True)  # a host copy in both models
    assert (copy == 7).all() and copy.ctypes.data != b.data_ptr
    data, device = _capsule(b.__dlpack__(max_version=(1, 0)))
    assert data == b.data_ptr and device == b.__dlpack_device__()
    if is_unified():
        assert device == (1, 0)
        assert np.from_dlpack(b).ctypes.data == b.data_ptr
        return
    # Discrete: the device memory itself (data = the device address), ...
    assert device == (7, b.device)
    data, device = _capsule(b.__dlpack__(max_version=(1, 0), dl_device=(7, b.device)))
    assert data == b.data_ptr
    # ... a device copy for copy=True, ...
    data, device = _capsule(b.__dlpack__(max_version=(1, 0), copy=True))
    assert data != b.data_ptr and device == (7, b.device)
    # ... and for the host only a copy asked for: numpy.from_dlpack gets an error that says how.
    with pytest.raises(BufferError, match=r"Buffer\.numpy\(\).*copy=True"):
        np.from_dlpack(b)
    with pytest.raises(BufferError, match=r"copy=True"):
        b.__dlpack__(dl_device=(1, 0))
    with pytest.raises(BufferError, match=r"copy=True"):
        b.__dlpack__(dl_device=(1, 0), copy=False)
    data, device = _capsule(b.__dlpack__(dl_device=(1, 0), copy=True, max_version=(1, 0)))
    assert device == (1, 0) and data != b.data_ptr
    assert (np.from_dlpack(b, device="cpu", copy=True) == 7).all()
    gc.collect()
    b.free()  # no export is left counted as alive


def test_data_ptrs_are_unique_and_do_not_overlap(model: str) -> None:
    live = [mpsrt.empty(n) for n in (100, 4 * KiB, 2 * MiB, 3 * MiB, 12 * MiB) for _ in range(3)]
    ranges = sorted((b.data_ptr, b.data_ptr + b.nbytes) for b in live)
    assert all(lo > 0 for lo, _ in ranges)
    assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:]))
    segments = memory.snapshot()["segments"]
    bases = [s["address"] for s in segments]
    assert len(set(bases)) == len(bases)
    for b in live:
        assert any(s["address"] <= b.data_ptr < s["address"] + s["total_size"] for s in segments)
    views = [live[3][i * 1000 : (i + 1) * 1000] for i in range(3)]
    assert [v.data_ptr - live[3].data_ptr for v in views] == [0, 1000, 2000]
