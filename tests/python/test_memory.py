"""Device memory (API.md "Memory"): empty(), Buffer, statistics, limits, history, errors.

Each test measures against what it finds (the runtime is shared by the tests of a backend),
and restores every setting it changes.
"""

from __future__ import annotations

import gc
import os
import pickle
import re
import sys
import threading
from collections.abc import Iterator

import mpsrt
import numpy as np
import pytest
from conftest import PATIENCE, blocked, is_unified, run_python
from mpsrt import memory

KiB = 1 << 10
MiB = 1 << 20
THIS_FILE = os.path.basename(__file__)

# name -> (itemsize, numpy dtype or None when numpy has none)
DTYPES = {
    "uint8": (1, np.uint8),
    "int8": (1, np.int8),
    "int16": (2, np.int16),
    "uint16": (2, np.uint16),
    "int32": (4, np.int32),
    "uint32": (4, np.uint32),
    "int64": (8, np.int64),
    "uint64": (8, np.uint64),
    "float16": (2, np.float16),
    "bfloat16": (2, None),
    "float32": (4, np.float32),
    "float64": (8, np.float64),
    "bool": (1, np.bool_),
}
NUMPY_DTYPES = [n for n, (_, d) in DTYPES.items() if d is not None]


def _settle() -> None:
    gc.collect()
    mpsrt.synchronize()


def _drop_failure_references() -> None:
    """pytest keeps the last failure's traceback in sys.last_*: its frames hold the failed
    test's buffers, which would then outlive the test (and a runtime reset, which crashes)."""
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)


@pytest.fixture(autouse=True)
def _clean_cache() -> Iterator[None]:
    # No automatic garbage collection during a test: it could free buffers of another test in
    # the middle of a measurement.
    _settle()
    mpsrt.empty_cache()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        _drop_failure_references()
        _settle()
        mpsrt.empty_cache()


@pytest.fixture
def limit_bytes() -> Iterator:
    """Call with a byte count to set the hard limit (as a fraction); restored afterwards."""
    dev = mpsrt.current_device()
    prev = mpsrt._C.set_per_process_memory_fraction(0.0, dev)
    mpsrt._C.set_per_process_memory_fraction(prev, dev)

    def apply(nbytes: int) -> float:
        fraction = nbytes / mpsrt.recommended_max_memory()
        mpsrt.set_per_process_memory_fraction(fraction)
        return fraction

    try:
        yield apply
    finally:
        mpsrt._C.set_per_process_memory_fraction(prev, dev)


def _fmt(n: int) -> str:
    """The allocator's byte format ("300.00 MiB", "512 B")."""
    v, unit = float(n), 0
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    while v >= 1024 and unit < 4:
        v /= 1024
        unit += 1
    return f"{n} B" if unit == 0 else f"{v:.2f} {units[unit]}"


def _assert_usable() -> None:
    """The runtime still allocates, fills and reads back after an error."""
    b = mpsrt.empty(64, dtype="uint8")
    b.fill_(7)
    assert (b.numpy() == 7).all()
    s = mpsrt.memory_stats()
    assert s["allocated_bytes.all.current"] == mpsrt.current_allocated_memory()
    assert s["reserved_bytes.all.current"] >= s["allocated_bytes.all.current"]


# ---------------------------------------------------------------------------- empty() and Buffer


@pytest.mark.parametrize(
    ("size", "shape"),
    [
        (10, (10,)),
        ((2, 3), (2, 3)),
        ([2, 3], (2, 3)),
        ((4, 1, 2), (4, 1, 2)),
        ((), ()),
        (0, (0,)),
        ((3, 0), (3, 0)),
    ],
)
def test_empty_sizes(size: object, shape: tuple) -> None:
    b = mpsrt.empty(size, dtype="float32")
    assert b.shape == shape
    assert isinstance(b.shape, tuple)
    n = int(np.prod(shape)) if shape else 1
    assert b.nbytes == 4 * n
    if n:
        assert b.data_ptr % 512 == 0
    assert b.numpy().shape == shape


@pytest.mark.parametrize("name", list(DTYPES))
def test_empty_every_dtype(name: str) -> None:
    itemsize, npdt = DTYPES[name]
    spellings: list[object] = [name, "torch." + name]
    if npdt is not None:
        spellings += [np.dtype(npdt), npdt]
    for spelling in spellings:
        b = mpsrt.empty((2, 3), dtype=spelling)
        assert b.dtype == name, spelling
        assert b.itemsize == itemsize
        assert b.nbytes == 6 * itemsize
        assert b.shape == (2, 3)
        if npdt is not None:
            assert b.numpy().dtype == np.dtype(npdt)
    assert mpsrt.empty(4).dtype == "uint8", "the default dtype is uint8"


def test_python_builtin_types_as_dtype() -> None:
    # numpy and torch agree: float is float64, int is int64, bool is bool.
    assert mpsrt.empty(2, dtype=float).dtype == "float64"
    assert mpsrt.empty(2, dtype=int).dtype == "int64"
    assert mpsrt.empty(2, dtype=bool).dtype == "bool"


def test_buffer_attributes() -> None:
    b = mpsrt.empty((3, 5), dtype="int16")
    assert b.shape == (3, 5)
    assert b.dtype == "int16"
    assert b.nbytes == 30
    assert b.device == mpsrt.current_device() == 0
    assert isinstance(b.data_ptr, int)
    assert b.data_ptr > 0 and b.data_ptr % 512 == 0
    assert len(b) == 3
    assert "int16" in repr(b) and "(3, 5)" in repr(b)
    # Host memory on unified memory; the device's own (kDLVulkan = 7, index) on discrete memory.
    assert b.__dlpack_device__() == ((1, 0) if is_unified() else (7, b.device))
    other = mpsrt.empty((3, 5), dtype="int16")
    assert other.data_ptr != b.data_ptr


@pytest.mark.usefixtures("unified_memory")
def test_numpy_shares_memory() -> None:
    b = mpsrt.empty((4, 4), dtype="float32")
    a = b.numpy()
    assert a.ctypes.data == b.data_ptr
    assert a.shape == (4, 4) and a.dtype == np.float32
    a[...] = np.arange(16, dtype=np.float32).reshape(4, 4)
    assert np.array_equal(b.numpy(), a), "writes through numpy are the buffer's bytes"
    b.fill_(3.0)
    mpsrt.synchronize()
    assert (a == 3.0).all(), "a device fill is visible through the array"
    assert np.shares_memory(a, b.numpy())


@pytest.mark.usefixtures("unified_memory")
@pytest.mark.parametrize("name", NUMPY_DTYPES)
def test_numpy_from_dlpack_shares_memory(name: str) -> None:
    b = mpsrt.empty((3, 4), dtype=name)
    a = np.from_dlpack(b)
    assert a.ctypes.data == b.data_ptr
    assert a.shape == (3, 4)
    assert a.dtype == np.dtype(DTYPES[name][1])
    assert a.flags.writeable, (
        "numpy.from_dlpack(buf) is read-only: numpy imports unversioned DLPack capsules "
        "read-only; __dlpack__ must return a versioned capsule when max_version >= (1, 0)"
    )
    a.view(np.uint8)[...] = 0
    a.view(np.uint8).reshape(-1)[: b.itemsize] = 1  # first element: bytes 01 01 ...
    assert (b.numpy().view(np.uint8).reshape(-1)[: b.itemsize] == 1).all()
    b.fill_(True if name == "bool" else 1)
    mpsrt.synchronize()
    assert (a == 1).all(), "a device fill is visible through the DLPack array"


def test_dlpack_refuses_another_device() -> None:
    b = mpsrt.empty(8)
    with pytest.raises(BufferError, match=r"\(kDLCPU, 0\)"):
        b.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match=r"\(kDLCPU, 0\)"):
        b.__dlpack__(dl_device=(1, 1))
    if not is_unified():
        with pytest.raises(BufferError, match=r"\(7, 0\) \(its own device\)"):
            b.__dlpack__(dl_device=(7, 1))
        b.__dlpack__(dl_device=(7, 0))  # the device it is on
        return
    assert np.from_dlpack(b, device="cpu").ctypes.data == b.data_ptr
    b.__dlpack__(dl_device=(1, 0))  # the device it is on
    assert np.from_dlpack(b).ctypes.data == b.data_ptr


def test_dlpack_copy_true_exports_an_independent_host_copy() -> None:
    b = mpsrt.empty((2, 3), dtype="int32").fill_(7)
    a = np.from_dlpack(b, copy=True)
    assert a.ctypes.data != b.data_ptr and a.shape == (2, 3) and a.dtype == np.int32
    assert (a == 7).all(), "the copy holds the buffer's data, after its pending fill"
    b.fill_(1)
    mpsrt.synchronize()
    assert (a == 7).all(), "the copy does not follow later writes to the buffer"
    a[...] = 3
    assert (b.numpy() == 1).all(), "writes to the copy do not reach the buffer"
    del b
    gc.collect()
    assert (a == 3).all(), "the copy outlives the buffer"
    if is_unified():
        shared = np.from_dlpack(mpsrt.empty(4).fill_(1), copy=False)
        assert shared.flags.writeable and (shared == 1).all()


@pytest.mark.parametrize("max_version", [None, (0, 8), (1, 0), (1, 5), (2, 0)])
def test_dlpack_max_version_chooses_the_capsule(max_version) -> None:
    b = mpsrt.empty(4)
    capsule = b.__dlpack__(max_version=max_version)
    versioned = max_version is not None and max_version >= (1, 0)
    assert type(capsule).__name__ == "PyCapsule"
    assert ("dltensor_versioned" if versioned else "dltensor") in repr(capsule)


def test_dlpack_stream_none_waits_and_minus_one_does_not() -> None:
    s = mpsrt.Stream()
    b = mpsrt.empty(1 << 16)
    with blocked(s):
        with mpsrt.stream(s):
            b.fill_(5)  # queued behind the gate
        b.__dlpack__(stream=-1)  # the consumer orders its own reads: returns at once
        assert not s.query(), "stream=-1 waited for the buffer's pending work"
        done = threading.Event()
        waiter = threading.Thread(target=lambda: (b.__dlpack__(stream=None), done.set()))
        waiter.start()
        assert not done.wait(0.2), "stream=None returned before the buffer's work was done"
    waiter.join(PATIENCE)
    assert done.is_set() and s.query()
    b.__dlpack__(stream=3)  # an int >= 0 waits as None does
    assert (b.numpy() == 5).all()


@pytest.mark.parametrize(
    ("kwargs", "exc", "text"),
    [
        ({"stream": "default"}, TypeError, "stream must be None, -1 or an int >= 0"),
        ({"stream": 1.0}, TypeError, "stream must be None, -1 or an int >= 0"),
        ({"stream": True}, TypeError, "stream must be None, -1 or an int >= 0"),
        ({"stream": -2}, ValueError, "stream -2 is not valid"),
        ({"stream": 1 << 70}, ValueError, "stream is out of range"),
        ({"copy": "yes"}, TypeError, "copy must be None or a bool"),
        ({"copy": 1}, TypeError, "copy must be None or a bool"),
        ({"dl_device": [1, 0]}, TypeError, "dl_device must be None or a (device_type, index)"),
        ({"dl_device": (1, 0, 0)}, TypeError, "dl_device must be None or a (device_type"),
        ({"max_version": "1.0"}, TypeError, "max_version must be None or tuple[int, int]"),
        ({"bogus": 1}, TypeError, "unsupported keyword argument 'bogus'"),
    ],
)
def test_dlpack_bad_keywords(kwargs, exc, text) -> None:
    b = mpsrt.empty(4).fill_(1)
    with pytest.raises(exc, match=re.escape(text)):
        b.__dlpack__(**kwargs)
    assert (b.numpy() == 1).all(), "the buffer is still usable"
    capsule = b.__dlpack__()
    del capsule
    gc.collect()
    b.free()  # raises BufferError if the failed export left a view counted as alive


@pytest.mark.usefixtures("unified_memory")
def test_torch_from_dlpack_shares_memory() -> None:
    torch = pytest.importorskip(
        "torch", reason="torch is not installed: DLPack into torch untested"
    )
    b = mpsrt.empty((4, 4), dtype="float32")
    t = torch.from_dlpack(b)
    assert t.data_ptr() == b.data_ptr
    assert tuple(t.shape) == (4, 4) and t.dtype == torch.float32
    t.fill_(2.5)
    assert (b.numpy() == 2.5).all()
    b.fill_(-1.0)
    mpsrt.synchronize()
    assert bool((t == -1.0).all())
    bf = mpsrt.empty(3, dtype="bfloat16")
    assert torch.from_dlpack(bf).dtype == torch.bfloat16


def test_numpy_of_bfloat16_is_an_array_or_a_clear_error() -> None:
    b = mpsrt.empty(4, dtype="bfloat16")
    try:
        a = b.numpy()
    except (TypeError, ValueError, RuntimeError) as e:
        assert "bfloat16" in str(e), f"unclear error: {e}"
    else:
        assert isinstance(a, np.ndarray), f"numpy() returned a {type(a).__name__}"
        assert a.nbytes == 8 and a.ctypes.data == b.data_ptr


# ---------------------------------------------------------------------------- fill_ and copy_


def _bits(b: mpsrt.Buffer) -> np.ndarray:
    """The buffer's elements as unsigned integers of the same width."""
    raw = b.numpy() if b.dtype != "bfloat16" else None
    if raw is None:
        u = mpsrt.empty(b.shape, dtype="uint16")
        u.copy_(b)
        return u.numpy().reshape(-1)
    return raw.view(f"u{b.itemsize}").reshape(-1)


INT_CASES = {
    "uint8": [0, 1, 0xAB, 255],
    "int8": [-128, -1, 0, 127],
    "int16": [-32768, -2, 0x1234, 32767],
    "uint16": [0, 0xBEEF, 65535],
    "int32": [-(2**31), -5, 2**31 - 1],
    "uint32": [0, 0xDEADBEEF, 2**32 - 1],
    "int64": [-(2**63), -7, 0x0123456789ABCDEF, 2**63 - 1],
    "uint64": [0, 0xFEDCBA9876543210, 2**64 - 1],
}


@pytest.mark.parametrize("name", list(INT_CASES))
def test_fill_integers(name: str) -> None:
    b = mpsrt.empty(37, dtype=name)  # odd count: no vector-width luck
    npdt = DTYPES[name][1]
    for v in INT_CASES[name]:
        b.fill_(v)
        got = b.numpy()
        assert (got == np.array(v).astype(npdt)).all(), (name, v, got[:4])
        assert got.tobytes() == np.full(37, v, dtype=npdt).tobytes()


FLOAT_VALUES = [
    0.0,
    -0.0,
    1.0,
    -2.5,
    0.1,
    1 / 3,
    3.0e38,
    1e-40,
    65504.0,
    65519.0,
    65520.0,
    1e10,
    2.0**-24,
    2.0**-25,
    3 * 2.0**-25,
    1 + 2.0**-11,
    1 + 3 * 2.0**-11,
    float("inf"),
    -float("inf"),
    float("nan"),
]


@pytest.mark.parametrize("name", ["float16", "float32", "float64"])
def test_fill_floats_round_like_numpy(name: str) -> None:
    npdt = DTYPES[name][1]
    b = mpsrt.empty(9, dtype=name)
    for v in FLOAT_VALUES:
        b.fill_(v)
        with np.errstate(all="ignore"):
            # torch semantics: a Python float becomes a float32 first for 16-bit types
            want = np.array(np.float32(v) if name == "float16" else v).astype(npdt)
        got = b.numpy()
        if np.isnan(want):
            assert np.isnan(got).all(), (name, v)
        else:
            want_bits = want.view(f"u{b.itemsize}")
            assert (_bits(b) == want_bits).all(), (
                name,
                v,
                hex(int(_bits(b)[0])),
                hex(int(want_bits)),
            )


BF16 = [
    (1.0, 0x3F80),
    (-2.0, 0xC000),
    (1 + 2.0**-8, 0x3F80),  # a tie: to even
    (1 + 3 * 2.0**-8, 0x3F82),  # a tie: to even (up)
    (3.141592653589793, 0x4049),
    (3.0e38, 0x7F62),
    (3.4028234663852886e38, 0x7F80),  # rounds to inf
    (float("inf"), 0x7F80),
    (-float("inf"), 0xFF80),
    (0.0, 0x0000),
    (-0.0, 0x8000),
    (1e-40, 0x0001),  # float32 subnormal 0x000116c2 rounds to 1
]


def test_fill_bfloat16_rounds_to_nearest_even() -> None:
    b = mpsrt.empty(5, dtype="bfloat16")
    for v, bits in BF16:
        b.fill_(v)
        got = _bits(b)
        assert (got == bits).all(), (v, hex(int(got[0])), hex(bits))
    b.fill_(float("nan"))
    got = int(_bits(b)[0])
    assert got & 0x7F80 == 0x7F80 and got & 0x007F != 0, hex(got)


def test_fill_bool() -> None:
    b = mpsrt.empty(11, dtype="bool")
    b.fill_(True)
    assert b.numpy().all() and (b.numpy().view(np.uint8) == 1).all()
    b.fill_(False)
    assert not b.numpy().any()


@pytest.mark.parametrize(
    ("value", "want"), [(1, True), (0, False), (2, True), (0.0, False), (2.5, True)]
)
def test_fill_bool_with_numbers(value: object, want: bool) -> None:
    # torch: bool_tensor.fill_(v) stores bool(v)
    b = mpsrt.empty(6, dtype="bool")
    b.fill_(not want)
    b.fill_(value)
    assert (b.numpy() == want).all()
    assert (b.numpy().view(np.uint8) == int(want)).all()


def test_fill_returns_self_and_runs_in_order() -> None:
    b = mpsrt.empty(1000, dtype="int32")
    for v in range(20):
        assert b.fill_(v) is b
    assert (b.numpy() == 19).all()


def test_copy_from_a_buffer_and_from_numpy() -> None:
    src = mpsrt.empty((8, 8), dtype="float64")
    src.copy_(np.arange(64, dtype=np.float64).reshape(8, 8))
    assert np.array_equal(src.numpy(), np.arange(64).reshape(8, 8))
    dst = mpsrt.empty((8, 8), dtype="float64")
    assert dst.copy_(src) is dst
    assert np.array_equal(dst.numpy(), src.numpy())
    # Bytes are copied: a source of another dtype but the same size is accepted.
    raw = mpsrt.empty(512, dtype="uint8")
    raw.copy_(src)
    assert raw.numpy().tobytes() == src.numpy().tobytes()
    # Non-contiguous numpy input is made contiguous first.
    big = np.arange(128, dtype=np.float64).reshape(8, 16)[:, ::2]
    dst.copy_(big)
    assert np.array_equal(dst.numpy(), big)
    # Device copy ordered after a fill on the same stream.
    src.fill_(5.0)
    dst.copy_(src)
    assert (dst.numpy() == 5.0).all()


def test_copy_size_mismatch() -> None:
    a = mpsrt.empty(16, dtype="float32")
    b = mpsrt.empty(15, dtype="float32")
    with pytest.raises(ValueError, match=r"60.*64|64.*60"):
        a.copy_(b)
    with pytest.raises(ValueError, match=r"sizes must match"):
        a.copy_(np.zeros(3, dtype=np.float32))
    _assert_usable()


# ---------------------------------------------------------------------------- lifetime


def test_free_then_use_raises_a_clear_value_error() -> None:
    b = mpsrt.empty(1024, dtype="float32")
    before = mpsrt.current_allocated_memory()
    b.free()
    assert mpsrt.current_allocated_memory() == before - 4096
    assert b.shape == (1024,) and b.nbytes == 4096  # metadata stays readable
    for use in (
        lambda: b.data_ptr,
        lambda: b.numpy(),
        lambda: b.fill_(1.0),
        lambda: b.copy_(np.zeros(1024, dtype=np.float32)),
        lambda: np.from_dlpack(b),
        lambda: mpsrt.empty(1024, dtype="float32").copy_(b),
    ):
        with pytest.raises(ValueError, match="released"):
            use()
    b.free()  # a second free is harmless
    assert "released" in repr(b)
    _assert_usable()


def test_free_with_a_live_numpy_view_does_not_hand_the_memory_out_again() -> None:
    b = mpsrt.empty(4096)
    view = b.numpy()
    start, end = view.ctypes.data, view.ctypes.data + view.nbytes
    try:
        b.free()
    except (ValueError, BufferError):
        pass  # refusing is fine too
    others = [mpsrt.empty(4096) for _ in range(4)]
    aliased = [o.data_ptr for o in others if o.data_ptr < end and start < o.data_ptr + o.nbytes]
    view[...] = 1
    for o in others:
        o.fill_(2)
    mpsrt.synchronize()
    overwritten = int((view != 1).sum())
    del others, view, b
    assert not aliased, (
        "free() returned memory that a live numpy array still uses: new buffers at "
        f"{[hex(p) for p in aliased]} alias it"
    )
    assert overwritten == 0, f"{overwritten} bytes of the numpy array were overwritten"


def test_memory_returns_when_the_last_reference_goes() -> None:
    base = mpsrt.current_allocated_memory()
    b = mpsrt.empty(MiB)
    assert mpsrt.current_allocated_memory() == base + MiB
    del b
    assert mpsrt.current_allocated_memory() == base
    if not is_unified():
        # numpy() is a host copy there: it holds no device memory.
        b = mpsrt.empty(MiB)
        copy = b.numpy()
        del b
        assert mpsrt.current_allocated_memory() == base
        assert copy.nbytes == MiB
        return
    # A numpy view keeps it alive.
    b = mpsrt.empty(MiB)
    view = b.numpy()
    del b
    assert mpsrt.current_allocated_memory() == base + MiB
    view[0] = 1
    del view
    assert mpsrt.current_allocated_memory() == base
    # So does a DLPack import.
    b = mpsrt.empty(MiB)
    d = np.from_dlpack(b)
    del b
    assert mpsrt.current_allocated_memory() == base + MiB
    assert int(d[0]) >= 0
    del d
    assert mpsrt.current_allocated_memory() == base


def test_a_buffer_alive_across_a_runtime_reset_is_safe(backend: str) -> None:
    # conftest's runtime_env re-creates the runtime; a Buffer made before must then either
    # make the reset refuse or be freed safely afterwards, never touch the destroyed allocator.
    code = """
import os, mpsrt
b = mpsrt.empty(1000)
try:
    mpsrt._C._reset_runtime(dict(os.environ))
except RuntimeError as e:
    print("refused:", e)
    raise SystemExit(0)
c = mpsrt.empty(1000)
del b
d = mpsrt.empty(1000)
assert mpsrt.current_allocated_memory() == 2048, mpsrt.current_allocated_memory()
print("ok")
"""
    r = run_python(code, backend=backend)
    assert r.returncode == 0, (
        f"exit code {r.returncode} (-11/139: segfault) when a Buffer outlived a runtime reset\n"
        f"{r.stdout}{r.stderr[-2000:]}"
    )


def test_a_freed_block_is_reused_on_the_same_stream() -> None:
    b = mpsrt.empty(3000)
    ptr = b.data_ptr
    b.fill_(1)  # pending work does not block reuse on the same stream
    del b
    c = mpsrt.empty(3000)
    assert c.data_ptr == ptr


def _heap_holding(ptr: int) -> bool:
    return any(
        s["address"] <= ptr < s["address"] + s["total_size"] for s in memory.snapshot()["segments"]
    )


@pytest.mark.parametrize("how", ["fill_on_the_stream", "record_stream"])
def test_memory_used_by_another_stream_waits_for_it(how: str) -> None:
    s = mpsrt.Stream()
    gate = threading.Event()
    s.add_callback(lambda: gate.wait(20))  # holds the stream until the gate opens
    emptied = threading.Event()
    try:
        b = mpsrt.empty(3 * MiB)  # 12 MiB: a heap of its own (the huge pool)
        ptr, end = b.data_ptr, b.data_ptr + b.nbytes
        if how == "record_stream":
            with mpsrt.stream(s):
                s_work = mpsrt.empty(16)
                s_work.fill_(1)  # something queued on s
            b.record_stream(s)
        else:
            with mpsrt.stream(s):
                b.fill_(1)  # queued on s behind the gate
        del b
        c = mpsrt.empty(3 * MiB)  # on the default stream
        aliased = c.data_ptr < end and ptr < c.data_ptr + c.nbytes
        del c
        if how == "record_stream":
            del s_work
        # empty_cache() waits for the work the freed block waits for (as torch.cuda's waits for
        # the blocks' events), then releases its heap.
        worker = threading.Thread(target=lambda: (mpsrt.empty_cache(), emptied.set()))
        worker.start()
        waited = not emptied.wait(0.3)
        kept_while_busy = _heap_holding(ptr)
    finally:
        gate.set()
    worker.join(PATIENCE)
    assert not aliased, "memory still in use by another stream was handed out"
    assert waited, "empty_cache() returned while a cached block's free still waited on work"
    assert kept_while_busy, "the heap was released while another stream was still using it"
    assert emptied.is_set(), "empty_cache() did not return once the stream's work was done"
    assert not _heap_holding(ptr), "empty_cache() kept a heap whose pending work had finished"


def test_empty_on_a_stream() -> None:
    s = mpsrt.Stream()
    gate = threading.Event()
    s.add_callback(lambda: gate.wait(20))
    try:
        b = mpsrt.empty(3000, stream=s)
        ptr = b.data_ptr
        with mpsrt.stream(s):
            b.fill_(9)
        del b
        same = mpsrt.empty(3000, stream=s)  # its own stream: reusable at once
        reused_on_s = same.data_ptr == ptr
        with mpsrt.stream(s):
            same.fill_(9)
        del same
        other = mpsrt.empty(3000)  # the default stream: must wait for s
        aliased = other.data_ptr == ptr
        del other
    finally:
        gate.set()
    s.synchronize()
    assert reused_on_s, "a block freed on a stream was not reused on that stream"
    assert not aliased, "a block with work queued on a stream was handed to another stream"
    with pytest.raises(TypeError, match="stream"):
        mpsrt.empty(16, stream=0)  # type: ignore[arg-type]
    _assert_usable()


def test_each_device_has_its_own_allocator(backend: str, runtime_env) -> None:
    if backend != "cpu":
        pytest.skip("MPSRT_CPU_DEVICES is a cpu-backend setting")
    with runtime_env(MPSRT_CPU_DEVICES="2"):
        a0, a1 = mpsrt.memory_allocated(0), mpsrt.memory_allocated(1)
        d1 = mpsrt._C.driver_allocated_memory(1)
        b = mpsrt.empty(3 * MiB, device=1)
        assert b.device == 1
        assert mpsrt.memory_allocated(1) == a1 + 3 * MiB
        assert mpsrt.memory_allocated(0) == a0
        assert mpsrt._C.driver_allocated_memory(1) > d1
        with mpsrt.device(1):
            assert mpsrt.current_allocated_memory() == a1 + 3 * MiB
        c = mpsrt.empty(3 * MiB, device="mps:1")
        assert c.device == 1
        with pytest.raises(ValueError, match="device"):
            mpsrt.empty(16, device=1, stream=mpsrt.Stream(device=0))
        with pytest.raises(ValueError):
            mpsrt.empty(16, device=2)
        del b, c
        mpsrt.empty_cache()  # every device, as torch.cuda.empty_cache()
        assert mpsrt._C.driver_allocated_memory(1) == d1
        assert mpsrt.memory_allocated(1) == a1


# ---------------------------------------------------------------------------- limits


def test_fraction_type_and_range_errors_match_torch() -> None:
    for bad in (1, "0.5", None, True):
        with pytest.raises(TypeError) as e:
            mpsrt.set_per_process_memory_fraction(bad)  # type: ignore[arg-type]
        assert str(e.value) == "Invalid type for fraction argument, must be `float`"
    for bad in (2.5, -0.1, 2.0000001):
        with pytest.raises(ValueError) as e:
            mpsrt.set_per_process_memory_fraction(bad)
        assert str(e.value) == f"Invalid fraction value: {bad}. Allowed range: 0~2"
    with pytest.raises(ValueError):
        mpsrt.set_per_process_memory_fraction(float("nan"))
    _assert_usable()


def test_fraction_limit_raises_out_of_memory_and_recovers(limit_bytes) -> None:
    limit_bytes(256 * MiB)
    ooms = mpsrt.memory_stats()["num_ooms"]
    allocated = mpsrt.current_allocated_memory()
    with pytest.raises(mpsrt.OutOfMemoryError) as e:
        mpsrt.empty(300 * MiB)
    assert isinstance(e.value, RuntimeError)
    msg = str(e.value)
    assert "300.00 MiB" in msg, f"names the size: {msg}"
    assert "huge" in msg, f"names the pool: {msg}"
    assert "allocated" in msg and "cached" in msg and "limit" in msg, msg
    assert "MPSRT_HIGH_WATERMARK_RATIO" in msg and "set_per_process_memory_fraction" in msg, msg
    assert mpsrt.memory_stats()["num_ooms"] == ooms + 1
    assert mpsrt.current_allocated_memory() == allocated, "the failed allocation leaked"
    ok = mpsrt.empty(200 * MiB)  # within the limit: works
    ok.fill_(1)
    del ok
    _assert_usable()


def test_an_allocation_within_the_limit_works_after_freeing(limit_bytes) -> None:
    limit_bytes(256 * MiB)
    b = mpsrt.empty(100 * MiB)
    del b  # 100 MiB cached
    c = mpsrt.empty(200 * MiB)  # 200 <= 256 once the cache is freed
    assert c.nbytes == 200 * MiB
    held = mpsrt.empty(40 * MiB)
    del c  # 200 MiB cached, 40 MiB held
    d = mpsrt.empty(150 * MiB)  # reuses the cached block
    assert d.nbytes == 150 * MiB
    del held, d
    _assert_usable()


def test_small_fraction_names_the_small_pool(limit_bytes) -> None:
    limit_bytes(64 * MiB)
    hold = mpsrt.empty(60 * MiB)
    with pytest.raises(mpsrt.OutOfMemoryError, match="small"):
        mpsrt.empty(1000)
    del hold
    _assert_usable()


def test_zero_fraction_means_no_limit(limit_bytes) -> None:
    limit_bytes(64 * MiB)
    with pytest.raises(mpsrt.OutOfMemoryError):
        mpsrt.empty(100 * MiB)
    mpsrt.set_per_process_memory_fraction(0.0)
    b = mpsrt.empty(100 * MiB)
    assert b.nbytes == 100 * MiB


def test_high_watermark_environment_variable(runtime_env) -> None:
    rec = mpsrt.recommended_max_memory()
    ratio = repr(128 * MiB / rec)
    with runtime_env(MPSRT_HIGH_WATERMARK_RATIO=ratio, MPSRT_LOW_WATERMARK_RATIO=ratio):
        with pytest.raises(mpsrt.OutOfMemoryError, match="MPSRT_HIGH_WATERMARK_RATIO"):
            mpsrt.empty(200 * MiB)
        b = mpsrt.empty(100 * MiB)
        assert b.nbytes == 100 * MiB
        del b


def test_huge_sizes() -> None:
    with pytest.raises((mpsrt.OutOfMemoryError, ValueError)) as e:
        mpsrt.empty(2**62)
    msg = str(e.value)
    assert "max_buffer_size" in msg or "4194304.00 TiB" in msg or str(2**62) in msg, msg
    with pytest.raises(ValueError, match="overflow"):
        mpsrt.empty(2**62, dtype="float64")  # 2**65 bytes
    with pytest.raises(ValueError):
        mpsrt.empty(2**64)
    _assert_usable()


def test_reclaim_callback_frees_and_retries(limit_bytes, capfd) -> None:
    limit_bytes(256 * MiB)
    held = [mpsrt.empty(200 * MiB)]
    asked: list[int] = []

    def reclaim(needed: int) -> bool:
        asked.append(needed)
        held.clear()
        return True

    def broken(needed: int) -> bool:
        raise RuntimeError("reclaim exploded")

    ids = [memory.add_reclaim_callback(broken), memory.add_reclaim_callback(reclaim)]
    try:
        b = mpsrt.empty(150 * MiB)
        assert b.nbytes == 150 * MiB
        assert asked == [150 * MiB]
        assert "reclaim exploded" in capfd.readouterr().err
        del b
    finally:
        for i in ids:
            memory.remove_reclaim_callback(i)
    with pytest.raises(TypeError):
        memory.add_reclaim_callback(42)
    with pytest.raises(ValueError):
        memory.remove_reclaim_callback(ids[0])
    _assert_usable()


# ---------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    ("size", "exc"),
    [
        (-1, ValueError),
        ((2, -3), ValueError),
        (1.5, TypeError),
        ("3", TypeError),
        ((2, "x"), TypeError),
        ((2, 2.0), TypeError),
        (True, TypeError),
        (None, TypeError),
        (tuple(range(1, 18)), ValueError),
    ],
)
def test_bad_sizes(size: object, exc: type) -> None:
    with pytest.raises(exc) as e:
        mpsrt.empty(size)  # type: ignore[arg-type]
    assert "empty()" in str(e.value)
    _assert_usable()


def test_bad_dtypes() -> None:
    with pytest.raises(ValueError) as e:
        mpsrt.empty(4, dtype="complex64")
    for name in DTYPES:
        assert name in str(e.value), f"the message lists the dtypes: {e.value}"
    with pytest.raises(ValueError, match="float32"):
        mpsrt.empty(4, dtype=np.complex64)
    for bad in (3, 2.5, object(), [np.float32]):
        with pytest.raises(TypeError, match="dtype"):
            mpsrt.empty(4, dtype=bad)
    _assert_usable()


@pytest.mark.parametrize(
    ("dtype", "value", "exc"),
    [
        ("uint8", "x", TypeError),
        ("uint8", None, TypeError),
        ("uint8", [1], TypeError),
        ("float32", "1.0", TypeError),
        ("int32", 1.5, TypeError),
        ("uint8", 256, ValueError),
        ("uint8", -1, ValueError),
        ("int8", 128, ValueError),
        ("int16", -32769, ValueError),
        ("uint32", 2**32, ValueError),
        ("int64", 2**63, ValueError),
        ("uint64", 2**64, ValueError),
        ("uint64", -1, ValueError),
        ("float32", 10**400, ValueError),
        ("float64", 10**400, ValueError),
    ],
    ids=lambda v: "10**400" if isinstance(v, int) and v > 2**64 else None,
)
def test_bad_fill_values(dtype: str, value: object, exc: type) -> None:
    b = mpsrt.empty(8, dtype=dtype)
    with pytest.raises(exc) as e:
        b.fill_(value)
    msg = str(e.value)
    assert "fill_" in msg or dtype in msg or "range" in msg, f"unclear message: {msg!r}"
    _assert_usable()


# ---------------------------------------------------------------------------- statistics


def test_memory_stats_keys() -> None:
    s = mpsrt.memory_stats()
    for stat in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
        for pool in ("all", "small_pool", "large_pool"):
            for field in ("current", "peak", "allocated", "freed"):
                assert f"{stat}.{pool}.{field}" in s
    for stat in ("allocation", "segment", "active"):
        for pool in ("all", "small_pool", "large_pool"):
            assert f"{stat}.{pool}.current" in s and f"{stat}.{pool}.peak" in s
    for key in ("num_alloc_retries", "num_ooms", "inactive_split_bytes.all.current"):
        assert key in s
    assert all(isinstance(v, int) for v in s.values())
    assert list(s) == sorted(s)


def test_memory_stats_agree_with_the_accessors() -> None:
    mpsrt.reset_peak_memory_stats()
    a0 = mpsrt.memory_allocated()
    small = mpsrt.empty(1000)
    large = mpsrt.empty(3 * MiB)
    huge = mpsrt.empty(12 * MiB)
    s = mpsrt.memory_stats()
    assert s["allocated_bytes.all.current"] == mpsrt.memory_allocated() == mpsrt.memory_allocated(0)
    assert mpsrt.memory_allocated("mps") == mpsrt.memory_allocated()
    assert mpsrt.current_allocated_memory() == mpsrt.memory_allocated()
    assert mpsrt.memory_allocated() >= a0 + 1024 + 3 * MiB + 12 * MiB
    assert (
        s["allocated_bytes.small_pool.current"] + s["allocated_bytes.large_pool.current"]
        == s["allocated_bytes.all.current"]
    )
    assert s["allocated_bytes.small_pool.current"] >= 1024
    assert s["allocated_bytes.large_pool.current"] >= 15 * MiB
    assert s["reserved_bytes.all.current"] == mpsrt.memory_reserved()
    assert mpsrt.memory_reserved() >= mpsrt.memory_allocated()
    if mpsrt.backend() == "cpu":
        assert mpsrt.driver_allocated_memory() == mpsrt.memory_reserved()
    peak = mpsrt.max_memory_allocated()
    assert peak == s["allocated_bytes.all.peak"] >= mpsrt.memory_allocated()
    assert mpsrt.max_memory_reserved() == s["reserved_bytes.all.peak"] >= mpsrt.memory_reserved()
    del huge, large
    assert mpsrt.max_memory_allocated() == peak, "the peak stays after frees"
    assert mpsrt.memory_allocated() < peak
    mpsrt.reset_peak_memory_stats()
    assert mpsrt.max_memory_allocated() == mpsrt.memory_allocated()
    assert mpsrt.max_memory_reserved() == mpsrt.memory_reserved()
    more = mpsrt.empty(2 * MiB)
    assert mpsrt.max_memory_allocated() == mpsrt.memory_allocated()
    del more
    mpsrt.reset_max_memory_allocated()
    assert mpsrt.max_memory_allocated() == mpsrt.memory_allocated()
    s = mpsrt.memory_stats()
    assert s["allocation.all.current"] >= 1
    assert s["requested_bytes.all.current"] <= s["allocated_bytes.all.current"]
    del small
    with pytest.raises(ValueError):
        mpsrt.memory_stats(99)
    with pytest.raises(TypeError):
        mpsrt.memory_allocated(1.5)  # type: ignore[arg-type]


def test_memory_summary_contains_the_figures() -> None:
    keep = mpsrt.empty(3 * MiB)
    text = mpsrt.memory_summary()
    s = mpsrt.memory_stats()
    assert "Allocated memory" in text and "Reserved memory" in text
    assert memory._fmt(s["allocated_bytes.all.current"]) in text
    assert memory._fmt(s["reserved_bytes.all.current"]) in text
    assert re.search(rf"Out-of-memory errors\s+{s['num_ooms']}\b", text)
    assert re.search(rf"Allocation retries\s+{s['num_alloc_retries']}\b", text)
    assert re.search(rf"Staged host copies\s+{s['num_staged_copies']}\b", text)
    assert memory._fmt(s["staging_bytes.peak"]) in text
    short = mpsrt.memory_summary(abbreviated=True)
    assert "from small pool" not in short and "from small pool" in text
    del keep


def _figures(device: int) -> tuple[int, int, int]:
    return (
        mpsrt.memory_reserved(device),
        mpsrt.memory_allocated(device),
        mpsrt.mem_get_info(device)[0],
    )


def test_empty_cache_releases_every_device_and_pending_frees(backend: str, runtime_env) -> None:
    # torch.cuda.empty_cache(): every device's cache, blocks whose free waits on queued work
    # included (torch synchronizes their events); afterwards reserved memory is what live
    # blocks' heaps hold, a second call changes nothing, and free memory rose by the release.
    devices = "2" if backend == "cpu" else str(mpsrt.device_count())
    with runtime_env(MPSRT_CPU_DEVICES=devices):
        n = mpsrt.device_count()
        mpsrt.empty_cache()
        before = [_figures(d) for d in range(n)]
        keep = []
        for d in range(n):
            s = mpsrt.Stream(device=d)
            gate = threading.Event()
            s.add_callback(lambda gate=gate: gate.wait(0.3))  # busy for a moment
            b = mpsrt.empty(3 * MiB, device=d)  # a heap of its own
            with mpsrt.stream(s):
                b.fill_(1)  # b's free waits for this work
            keep.append(mpsrt.empty(4096, device=d))  # live across the call
            del b
        during = [_figures(d) for d in range(n)]
        mpsrt.empty_cache()
        after = [_figures(d) for d in range(n)]
        mpsrt.empty_cache()
        assert [_figures(d) for d in range(n)] == after, "a second empty_cache() changed figures"
        for d in range(n):
            reserved, allocated, free = after[d]
            assert during[d][0] >= before[d][0] + 12 * MiB
            # Only the live 4 KiB block's small heap is left.
            assert before[d][0] < reserved <= before[d][0] + 8 * MiB, (d, before, after)
            assert allocated == before[d][1] + 4096
            assert free - during[d][2] == during[d][0] - reserved, "free did not rise by it"
        del keep
        mpsrt.empty_cache()
        assert [_figures(d)[:2] for d in range(n)] == [f[:2] for f in before]


def test_empty_cache_lowers_driver_memory() -> None:
    b = mpsrt.empty(40 * MiB)
    c = mpsrt.empty(2 * MiB)
    del b, c
    before = mpsrt.driver_allocated_memory()
    reserved = mpsrt.memory_reserved()
    n = mpsrt.memory_stats()["num_empty_cache"]
    mpsrt.empty_cache()
    assert mpsrt.driver_allocated_memory() <= before - 40 * MiB
    assert mpsrt.memory_reserved() <= reserved - 40 * MiB
    assert mpsrt.memory_stats()["num_empty_cache"] == n + 1
    assert mpsrt.memory_stats()["segment.all.current"] == len(memory.snapshot()["segments"])


def test_set_cache_limit() -> None:
    prev = mpsrt.set_cache_limit(0)
    try:
        assert isinstance(prev, int) and prev >= 0
        assert mpsrt.set_cache_limit(32 * MiB) == 0
        assert mpsrt.set_cache_limit(0) == 32 * MiB
        # With no cache allowed, a heap that becomes empty goes back at once.
        b = mpsrt.empty(40 * MiB)
        reserved = mpsrt.memory_reserved()
        del b
        assert mpsrt.memory_reserved() <= reserved - 40 * MiB
        for bad in ("1", 1.5, True, None):
            with pytest.raises(TypeError):
                mpsrt.set_cache_limit(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            mpsrt.set_cache_limit(-1)
        assert mpsrt.set_cache_limit(2**70) == 0, "a rejected value changed the cap"
    finally:
        mpsrt.set_cache_limit(prev)
    _assert_usable()


# ---------------------------------------------------------------------------- history


@pytest.fixture
def recording() -> Iterator[None]:
    memory._record_memory_history()
    try:
        yield
    finally:
        memory._record_memory_history(None)


def _frames_name_this_file(frames: list[dict]) -> bool:
    return any(os.path.basename(f["filename"]) == THIS_FILE for f in frames)


def test_snapshot_and_history(recording, tmp_path) -> None:
    a = mpsrt.empty(1000)
    b = mpsrt.empty(20 * MiB)
    a_ptr, b_ptr = a.data_ptr, b.data_ptr
    del a
    snap = memory.snapshot()
    assert set(snap) >= {"segments", "device_traces"}
    total = 0
    live = {}
    for seg in snap["segments"]:
        assert {"address", "total_size", "segment_type", "blocks"} <= set(seg)
        assert seg["segment_type"] in ("small", "large")
        total += seg["total_size"]
        at = seg["address"]
        for blk in seg["blocks"]:
            assert blk["address"] == at, "blocks tile the segment"
            at += blk["size"]
            if blk["state"] == "active_allocated":
                live[blk["address"]] = blk
        assert at == seg["address"] + seg["total_size"]
    assert total == mpsrt.memory_reserved()
    assert sum(bl["size"] for bl in live.values()) == mpsrt.memory_allocated()
    assert b_ptr in live and a_ptr not in live
    assert live[b_ptr]["requested_size"] == 20 * MiB
    assert _frames_name_this_file(live[b_ptr]["frames"]), live[b_ptr]["frames"]
    trace = snap["device_traces"][mpsrt.current_device()]
    actions = [(t["action"], t["addr"]) for t in trace]
    assert ("alloc", a_ptr) in actions and ("alloc", b_ptr) in actions
    assert ("free_requested", a_ptr) in actions
    assert actions.index(("alloc", a_ptr)) < actions.index(("alloc", b_ptr))
    assert actions.index(("alloc", b_ptr)) < actions.index(("free_requested", a_ptr))
    alloc_a = next(t for t in trace if t["action"] == "alloc" and t["addr"] == a_ptr)
    assert alloc_a["size"] == 1024
    assert _frames_name_this_file(alloc_a["frames"]), alloc_a["frames"]
    assert {"action", "addr", "size", "stream", "frames"} <= set(alloc_a)
    # _dump_snapshot writes the same thing as a pickle.
    path = tmp_path / "snap.pickle"
    memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    assert {"segments", "device_traces"} <= set(loaded)
    assert [s["address"] for s in loaded["segments"]] == [s["address"] for s in snap["segments"]]
    del b
    mpsrt.empty_cache()
    kinds = [t["action"] for t in memory.snapshot()["device_traces"][0]]
    assert "segment_free" in kinds and "free_requested" in kinds


def test_history_stops_and_bad_arguments() -> None:
    memory._record_memory_history(max_entries=4)
    try:
        bufs = [mpsrt.empty(512) for _ in range(6)]
        assert len(memory.snapshot()["device_traces"][0]) == 4
        del bufs
    finally:
        memory._record_memory_history(None)
    c = mpsrt.empty(512)
    assert memory.snapshot()["device_traces"][0] == []
    del c
    for kwargs in ({"enabled": "bogus"}, {"context": "x"}, {"stacks": "c++"}, {"max_entries": -1}):
        with pytest.raises(ValueError):
            memory._record_memory_history(**kwargs)
    _assert_usable()


# ---------------------------------------------------------------------------- threads


def test_threads_never_get_overlapping_buffers() -> None:
    lock = threading.Lock()
    live: dict[int, int] = {}
    errors: list[str] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        mine: list[mpsrt.Buffer] = []
        try:
            for _ in range(300):
                if mine and (len(mine) > 8 or rng.random() < 0.5):
                    b = mine.pop(int(rng.integers(len(mine))))
                    with lock:
                        del live[b.data_ptr]
                    continue
                n = int(rng.choice([rng.integers(1, 4096), rng.integers(4096, 2 * MiB), 12 * MiB]))
                b = mpsrt.empty(n)
                with lock:
                    for start, end in live.items():
                        if start < b.data_ptr + n and b.data_ptr < end:
                            errors.append(f"{b.data_ptr:#x}+{n} overlaps {start:#x}..{end:#x}")
                    live[b.data_ptr] = b.data_ptr + n
                mine.append(b)
            for b in mine:
                with lock:
                    del live[b.data_ptr]
        except Exception as e:  # reported below
            errors.append(repr(e))

    before = mpsrt.current_allocated_memory()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert mpsrt.current_allocated_memory() == before
    assert mpsrt.memory_stats()["allocated_bytes.all.current"] == before


# ============================================================================================
# Issue 16, "Memory": torch.cuda / torch.mps semantics as PyTorch's own tests check them.
# (get/set_per_process_memory_fraction with a device, reset_accumulated_memory_stats,
# mem_get_info, one device rule, num_sync_all_streams, _record_memory_history's signature and
# snapshot content, DeviceProperties equality.) test_history_state_keeps_torchs_one_entry
# replaces the former test_history_state_mode_keeps_no_trace (torch keeps one entry).
# ============================================================================================


class _TorchLikeDevice:
    """What torch.device offers the device rule: .type and .index."""

    def __init__(self, type_: str, index: int | None) -> None:
        self.type, self.index = type_, index


def _device_forms(backend: str, index: int = 0) -> list[object]:
    return [
        index,
        f"mps:{index}",
        f"{backend}:{index}",
        mpsrt.device(index),
        _TorchLikeDevice("mps", index),
    ]


def test_get_per_process_memory_fraction_reads_what_set_wrote(backend: str) -> None:
    dev = mpsrt.current_device()
    prev = mpsrt._C.set_per_process_memory_fraction(0.0, dev)
    mpsrt._C.set_per_process_memory_fraction(prev, dev)
    try:
        assert mpsrt.get_per_process_memory_fraction() == prev
        for i, d in enumerate(_device_forms(backend)):
            f = 0.25 + i / 4  # 0.25 .. 1.25: above 1 is allowed (torch.mps's 0~2)
            mpsrt.set_per_process_memory_fraction(f, d)
            got = mpsrt.get_per_process_memory_fraction(d)
            assert type(got) is float and got == f
            assert mpsrt.get_per_process_memory_fraction() == f
        mpsrt.set_per_process_memory_fraction(2.0, device=None)
        assert mpsrt.get_per_process_memory_fraction(None) == 2.0
        # torch.mps's range and message, with a device too; the fraction stays.
        with pytest.raises(ValueError, match=re.escape("Invalid fraction value: 2.5. Allowed")):
            mpsrt.set_per_process_memory_fraction(2.5, 0)
        with pytest.raises(TypeError, match="must be `float`"):
            mpsrt.set_per_process_memory_fraction(1, "mps:0")
        assert mpsrt.get_per_process_memory_fraction() == 2.0
    finally:
        mpsrt._C.set_per_process_memory_fraction(prev, dev)
    assert mpsrt.get_per_process_memory_fraction() == prev


def test_get_per_process_memory_fraction_defaults_to_the_high_watermark(runtime_env) -> None:
    with runtime_env(MPSRT_HIGH_WATERMARK_RATIO="1.9"):
        assert mpsrt.get_per_process_memory_fraction() == 1.9
    with runtime_env():
        assert mpsrt.get_per_process_memory_fraction() == 1.7  # torch.mps's default


def test_reset_accumulated_memory_stats_zeroes_totals_and_counters(limit_bytes) -> None:
    for _ in range(3):
        x = mpsrt.empty(20 * MiB)
        del x
        mpsrt.empty_cache()
    limit_bytes(64 * MiB)
    with pytest.raises(mpsrt.OutOfMemoryError):
        mpsrt.empty(256 * MiB)
    keep = mpsrt.empty(4096)
    before = mpsrt.memory_stats()
    accumulated = [k for k in before if k.endswith((".allocated", ".freed"))]
    counters = [k for k in before if k.startswith("num_")]
    assert {"num_alloc_retries", "num_ooms", "num_sync_all_streams"} <= set(counters)
    assert {"num_device_alloc", "num_device_free"} <= set(counters)
    assert before["allocation.all.allocated"] >= 4 and before["num_ooms"] >= 1
    assert before["num_device_free"] >= 3 and before["num_sync_all_streams"] >= 3

    mpsrt.reset_accumulated_memory_stats()
    after = mpsrt.memory_stats()
    assert {k: after[k] for k in accumulated + counters} == dict.fromkeys(accumulated + counters, 0)
    # Current and peak figures stay.
    for k in before:
        if k.endswith((".current", ".peak")):
            assert after[k] == before[k], k
    assert after["allocated_bytes.all.current"] == mpsrt.memory_allocated() >= 4096
    # Counting starts again from zero.
    more = mpsrt.empty(4096)
    s = mpsrt.memory_stats()
    assert s["allocation.all.allocated"] == 1 and s["allocation.all.freed"] == 0
    del more
    assert mpsrt.memory_stats(0)["allocation.all.freed"] == 1
    for d in (0, "mps:0", mpsrt.device(0), None):
        mpsrt.reset_accumulated_memory_stats(d)
        assert mpsrt.memory_stats(d)["allocation.all.freed"] == 0
    del keep


def test_mem_get_info_is_free_and_total_bytes(backend: str) -> None:
    free, total = mpsrt.mem_get_info()
    assert type(free) is int and type(total) is int
    assert total == mpsrt.get_device_properties().total_memory
    assert free == total - mpsrt.driver_allocated_memory()
    b = mpsrt.empty(40 * MiB)  # a heap of its own: the process holds 40 MiB more
    free2, total2 = mpsrt.mem_get_info(0)
    assert total2 == total and free2 <= free - 40 * MiB
    for d in _device_forms(backend):
        assert mpsrt.mem_get_info(d) == (free2, total)
    del b
    mpsrt.empty_cache()
    assert mpsrt.mem_get_info(None) == (free, total)


MEMORY_DEVICE_FUNCS = {
    "memory_stats": mpsrt.memory_stats,
    "memory_allocated": mpsrt.memory_allocated,
    "max_memory_allocated": mpsrt.max_memory_allocated,
    "memory_reserved": mpsrt.memory_reserved,
    "max_memory_reserved": mpsrt.max_memory_reserved,
    "reset_peak_memory_stats": mpsrt.reset_peak_memory_stats,
    "reset_max_memory_allocated": mpsrt.reset_max_memory_allocated,
    "reset_accumulated_memory_stats": mpsrt.reset_accumulated_memory_stats,
    "memory_summary": mpsrt.memory_summary,
    "mem_get_info": mpsrt.mem_get_info,
    "get_per_process_memory_fraction": mpsrt.get_per_process_memory_fraction,
    "set_per_process_memory_fraction": lambda d: mpsrt.set_per_process_memory_fraction(
        mpsrt.get_per_process_memory_fraction(), d
    ),
    "memory.snapshot": lambda d: memory.snapshot(d)["segments"],
    "memory._record_memory_history": lambda d: memory._record_memory_history(None, device=d),
}


@pytest.mark.parametrize("name", sorted(MEMORY_DEVICE_FUNCS))
def test_every_memory_function_takes_every_device_form(name: str, backend: str) -> None:
    f = MEMORY_DEVICE_FUNCS[name]
    keep = mpsrt.empty(3000)
    want = f(None)
    forms = [*_device_forms(backend), "mps", mpsrt.device(None)]
    for d in forms:
        got = f(d)
        if name != "mem_get_info":  # free memory may move with other threads' heaps
            assert got == want, (name, d)
    del keep


def test_memory_functions_follow_the_device_context_object(backend: str, runtime_env) -> None:
    if backend != "cpu":
        pytest.skip("MPSRT_CPU_DEVICES is a cpu-backend setting")
    with runtime_env(MPSRT_CPU_DEVICES="2"):
        b = mpsrt.empty(3 * MiB, device=1)
        for d in _device_forms(backend, 1):
            assert mpsrt.memory_allocated(d) == 3 * MiB, d
            assert mpsrt.memory_stats(d)["allocation.all.current"] == 1
            mpsrt.set_per_process_memory_fraction(1.25, d)
            assert mpsrt.get_per_process_memory_fraction(d) == 1.25
            assert [s["total_size"] for s in memory.snapshot(d)["segments"]] == [32 * MiB]
        assert mpsrt.memory_allocated(mpsrt.device(0)) == 0
        assert mpsrt.get_per_process_memory_fraction(0) == 1.7
        assert mpsrt.get_device_properties(0) != mpsrt.get_device_properties(1)
        del b


def test_num_sync_all_streams_counts_empty_cache_and_the_oom_ladder(limit_bytes) -> None:
    n = mpsrt.memory_stats()["num_sync_all_streams"]
    mpsrt.empty_cache()
    assert mpsrt.memory_stats()["num_sync_all_streams"] == n + 1
    mpsrt.empty_cache()
    assert mpsrt.memory_stats()["num_sync_all_streams"] == n + 2
    b = mpsrt.empty(4096)  # served by the cache: no pass over the streams
    assert mpsrt.memory_stats()["num_sync_all_streams"] == n + 2
    limit_bytes(64 * MiB)
    with pytest.raises(mpsrt.OutOfMemoryError):
        mpsrt.empty(256 * MiB)  # every rung, the synchronise-and-free-all one included
    assert mpsrt.memory_stats()["num_sync_all_streams"] == n + 3
    del b
    _assert_usable()


def test_record_memory_history_has_torch_cudas_signature() -> None:
    import inspect

    params = inspect.signature(memory._record_memory_history).parameters
    want = {
        "enabled": "all",
        "context": "all",
        "stacks": "all",
        "max_entries": sys.maxsize,
        "device": None,
        "clear_history": False,
        "compile_context": False,
        "global_record_annotations": False,
        "skip_actions": None,
        # torch 2.14's
        "record_pinned_host_memory": False,
        "record_cuda": True,
    }
    assert {k: p.default for k, p in params.items()} == want
    assert list(params) == list(want)  # the positional order too
    try:
        import torch.cuda.memory as tcm
    except ImportError:
        return
    # The installed torch's: the same names, defaults and order, up to its version's last one.
    theirs = inspect.signature(tcm._record_memory_history).parameters
    assert list(theirs) == list(want)[: len(theirs)]
    assert {k: p.default for k, p in theirs.items()} == {k: want[k] for k in theirs}
    assert len(theirs) >= len(want) - 2


def test_record_memory_history_torch_2_14_arguments(backend: str) -> None:
    b = mpsrt.empty(4096)
    try:
        with pytest.raises(ValueError, match="record_pinned_host_memory=True"):
            memory._record_memory_history("all", record_pinned_host_memory=True)
        with pytest.raises(TypeError, match="record_cuda must be a bool"):
            memory._record_memory_history("all", record_cuda=1)
        # record_cuda=False records nothing of the device: as enabled=None.
        memory._record_memory_history("all", record_cuda=False)
        mpsrt.empty(1 << 20).free()
        assert memory.snapshot()["device_traces"][0] == []
        memory._record_memory_history("all", clear_history=True)
        mpsrt.empty(1 << 20).free()
        assert [t["action"] for t in memory.snapshot()["device_traces"][0]][:1] == ["alloc"]
    finally:
        memory._record_memory_history(None, clear_history=True)
        del b


def test_record_memory_history_clear_history_and_positional_device(backend: str) -> None:
    memory._record_memory_history("all", "all", "python", 100, f"{backend}:0")
    try:
        a = mpsrt.empty(512)
        assert any(t["addr"] == a.data_ptr for t in memory.snapshot()["device_traces"][0])
        memory._record_memory_history(clear_history=False)  # re-enabling keeps the entries
        assert memory.snapshot()["device_traces"][0] != []
        memory._record_memory_history(clear_history=True)
        assert memory.snapshot()["device_traces"][0] == []
        del a
        acts = [t["action"] for t in memory.snapshot()["device_traces"][0]]
        assert acts == ["free_requested", "free_completed"]
    finally:
        memory._record_memory_history(None)


def test_record_memory_history_legacy_bool_form() -> None:
    # torch.cuda: a bool `enabled` is the legacy API (record_context, trace_alloc_max_entries).
    memory._record_memory_history(True, trace_alloc_max_entries=3, trace_alloc_record_context=True)
    try:
        bufs = [mpsrt.empty(512) for _ in range(5)]
        trace = memory.snapshot()["device_traces"][0]
        assert len(trace) == 3 and all(_frames_name_this_file(t["frames"]) for t in trace)
        del bufs
    finally:
        memory._record_memory_history(False)
    assert memory.snapshot()["device_traces"][0] == []


def _line_of(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if marker in text and "_line_of" not in text)


def test_history_frames_name_the_callers_line(recording) -> None:
    r = mpsrt.rand(64)  # frames: the rand line
    e = mpsrt.empty(64)  # frames: the empty line
    trace = memory.snapshot()["device_traces"][0]
    for buf, marker in ((r, "# frames: the rand line"), (e, "# frames: the empty line")):
        entry = next(t for t in trace if t["action"] == "alloc" and t["addr"] == buf.data_ptr)
        # The first frame of this file (mpsrt's own Python wrappers and the native frames come
        # before it: test_memory_history.py).
        first = next(f for f in entry["frames"] if f["filename"] == __file__)
        assert first["line"] == _line_of(marker)
        assert first["name"] == "test_history_frames_name_the_callers_line"
        blk = next(
            bl
            for s in memory.snapshot()["segments"]
            for bl in s["blocks"]
            if bl["address"] == buf.data_ptr
        )
        assert blk["frames"] == entry["frames"]
    del r, e


def _make_buffer(n: int = 4096) -> mpsrt.Buffer:
    return mpsrt.empty(n)


def _release_buffer(b: mpsrt.Buffer) -> None:
    b.free()


@pytest.mark.parametrize("context", ["all", "alloc", "state", None])
def test_free_entries_carry_the_stack_the_context_asks_for(context: str | None) -> None:
    memory._record_memory_history(context=context, stacks="python")
    try:
        b = _make_buffer()
        ptr = b.data_ptr
        _release_buffer(b)
        trace = memory.snapshot()["device_traces"][0]
    finally:
        memory._record_memory_history(None)
    by_action = {t["action"]: t for t in trace if t["addr"] == ptr}
    assert set(by_action) >= {"alloc", "free_requested", "free_completed"}
    first = {a: (t["frames"][0]["name"] if t["frames"] else None) for a, t in by_action.items()}
    if context == "all":
        assert first["alloc"] == "_make_buffer"
        assert first["free_requested"] == first["free_completed"] == "_release_buffer"
    elif context == "alloc":
        assert first["alloc"] == "_make_buffer"
        assert first["free_requested"] == first["free_completed"] == "_make_buffer"
    else:  # "state" keeps stacks for live blocks only; None none at all
        assert set(first.values()) == {None}


def _grow() -> mpsrt.Buffer:
    return mpsrt.empty(24 * MiB)  # a heap of its own


def _shrink() -> None:
    mpsrt.empty_cache()


@pytest.mark.parametrize("context", ["all", "alloc"])
def test_segment_entries_and_segments_carry_frames(context: str) -> None:
    memory._record_memory_history(context=context, stacks="python")
    try:
        b = _grow()
        seg = next(s for s in memory.snapshot()["segments"] if s["address"] == b.data_ptr)
        assert seg["frames"] and seg["frames"][0]["name"] == "_grow"
        del b
        _shrink()
        trace = memory.snapshot()["device_traces"][0]
    finally:
        memory._record_memory_history(None)
    seg_alloc = next(t for t in trace if t["action"] == "segment_alloc")
    seg_free = next(t for t in trace if t["action"] == "segment_free")
    assert seg_alloc["addr"] == seg_free["addr"] == seg["address"]
    assert seg_alloc["frames"][0]["name"] == "_grow"
    # "all": the releasing call's stack, from mpsrt.empty_cache's own frame (torch's starts at
    # torch/cuda/memory.py's empty_cache); "alloc": the segment's own.
    names = [f["name"] for f in seg_free["frames"][:2]]
    assert names == (["empty_cache", "_shrink"] if context == "all" else ["_grow", names[1]])


def test_history_state_keeps_torchs_one_entry() -> None:
    # torch.cuda: enabled="state" records with max_entries 1: the snapshot's blocks keep their
    # stacks and the trace its newest entry.
    memory._record_memory_history("state")
    try:
        b = mpsrt.empty(4096)
        c = mpsrt.empty(4096)
        c_ptr = c.data_ptr
        del c
        snap = memory.snapshot()
        trace = snap["device_traces"][0]
        assert [(t["action"], t["addr"]) for t in trace] == [("free_completed", c_ptr)]
        blk = next(
            bl for s in snap["segments"] for bl in s["blocks"] if bl["address"] == b.data_ptr
        )
        assert _frames_name_this_file(blk["frames"])
        del b
    finally:
        memory._record_memory_history(None)


def test_skip_actions_filters_the_trace() -> None:
    memory._record_memory_history(skip_actions=["free_requested", "segment_alloc", "snapshot"])
    try:
        b = mpsrt.empty(24 * MiB)
        del b
        mpsrt.empty_cache()
        acts = [t["action"] for t in memory.snapshot()["device_traces"][0]]
    finally:
        memory._record_memory_history(None)
    assert "alloc" in acts and "free_completed" in acts and "segment_free" in acts
    assert "free_requested" not in acts and "segment_alloc" not in acts
    memory._record_memory_history(skip_actions=("alloc",))
    try:
        b = mpsrt.empty(512)
        del b
        acts = [t["action"] for t in memory.snapshot()["device_traces"][0]]
    finally:
        memory._record_memory_history(None)
    assert "alloc" not in acts
    assert [a for a in acts if not a.startswith("segment_")] == ["free_requested", "free_completed"]


def test_history_bad_values_raise_torchs_runtime_error_as_a_value_error() -> None:
    for kwargs in (
        {"enabled": "bogus"},
        {"context": "x"},
        {"stacks": "c++"},
        {"skip_actions": ["allocate"]},
    ):
        with pytest.raises(RuntimeError) as e:
            memory._record_memory_history(**kwargs)
        assert isinstance(e.value, ValueError)
    with pytest.raises(ValueError, match="unknown action 'allocate'"):
        memory._record_memory_history(skip_actions=["alloc", "allocate"])
    for kwargs in ({"skip_actions": "alloc"}, {"skip_actions": [1]}, {"enabled": 5}):
        with pytest.raises(TypeError):
            memory._record_memory_history(**kwargs)
    assert memory.snapshot()["device_traces"][0] == []  # nothing started recording


def test_device_properties_compare_equal_for_the_same_device() -> None:
    a, b = mpsrt.get_device_properties(), mpsrt.get_device_properties(0)
    assert a is not b
    assert a == b and not (a != b)
    assert hash(a) == hash(b)
    assert a == mpsrt.get_device_properties(mpsrt.device(0))
    assert a != "not properties" and a != None  # noqa: E711
    assert len({a, b}) == 1


# =========================================================================== Buffer views
# ("Buffer views": Buffer.view(offset, shape, dtype), buf[i], buf[a:b]; the same
# memory as the base, kept alive by the view, counted once, usable everywhere a Buffer is.)


def _ramp(n: int, dtype: str = "int32") -> mpsrt.Buffer:
    b = mpsrt.empty(n, dtype)
    b.copy_(np.arange(n, dtype=dtype))
    return b


def test_view_slice_is_the_same_memory_and_writes_reach_the_base() -> None:
    base = _ramp(12, "int32").view(0, (4, 3))
    v = base[1:3]
    assert v.shape == (2, 3) and v.dtype == "int32" and v.nbytes == 24
    assert v.data_ptr == base.data_ptr + 12
    assert v.byte_offset == base.byte_offset + 12
    assert v.base is base.base and base.base is not None
    np.testing.assert_array_equal(v.numpy(), [[3, 4, 5], [6, 7, 8]])
    v.fill_(-1)  # device fill through the view
    v[1].copy_(np.array([70, 80, 90], np.int32))  # host copy into a view of the view
    mpsrt.synchronize()
    np.testing.assert_array_equal(
        base.numpy(), [[0, 1, 2], [-1, -1, -1], [70, 80, 90], [9, 10, 11]]
    )
    src = _ramp(3, "int32")
    base[3].copy_(src)  # device copy into a view
    np.testing.assert_array_equal(base.numpy()[3], [0, 1, 2])
    base[0].copy_(base[2])  # from one view of a buffer into another
    np.testing.assert_array_equal(base.numpy()[0], [70, 80, 90])


def test_view_indexing_follows_python_and_torch() -> None:
    b = _ramp(10, "int64")
    assert b[-1].shape == () and b[-1].numpy() == 9
    assert b[3].data_ptr == b.data_ptr + 24
    assert b[2:].shape == (8,) and b[:-7].shape == (3,)
    assert b[8:100].shape == (2,) and b[5:2].shape == (0,)
    assert b[10:].nbytes == 0 and b[10:].data_ptr == b.data_ptr + 80
    assert [int(x.numpy()) for x in b] == list(range(10))  # iteration: __len__ + __getitem__
    m = b.view(0, (5, 2))
    assert [r.numpy().tolist() for r in m[1:3]] == [[2, 3], [4, 5]]
    assert m[4][1].numpy() == 9 and m[4][1].data_ptr == b.data_ptr + 72


def test_view_method_reinterprets_bytes_at_an_offset() -> None:
    f = mpsrt.empty(8, "float32")
    f.copy_(np.linspace(0, 7, 8, dtype=np.float32))
    u = f.view(8, (3,), "uint32")
    assert u.data_ptr == f.data_ptr + 8 and u.byte_offset == 8
    np.testing.assert_array_equal(u.numpy(), np.float32([2, 3, 4]).view(np.uint32))
    rest = f.view(16)  # default: every byte from the offset, 1-D, the same dtype
    assert rest.shape == (4,) and rest.dtype == "float32"
    assert f.view(0, (2, 2, 2)).shape == (2, 2, 2)
    assert f.view(dtype="uint8").shape == (32,)
    assert f.view(32).shape == (0,)
    h = f.view(4, dtype="bfloat16")  # 28 bytes -> 14 bfloat16
    assert h.shape == (14,) and h.data_ptr == f.data_ptr + 4


def test_view_keeps_the_memory_alive_and_counts_it_once() -> None:
    before = mpsrt.memory_allocated()
    stats = mpsrt.memory_stats()
    base = _ramp(1024, "int32")
    with_base = mpsrt.memory_allocated()
    views = [base[i : i + 8] for i in range(0, 1024, 8)] + [base.view(4, (2,))]
    assert mpsrt.memory_allocated() == with_base, "a view allocated memory"
    after = mpsrt.memory_stats()
    assert after["allocation.all.allocated"] == stats["allocation.all.allocated"] + 1
    assert after["allocated_bytes.all.current"] == with_base
    keep = views[5]
    ptr = keep.data_ptr
    del base, views
    gc.collect()
    mpsrt.synchronize()
    assert mpsrt.memory_allocated() == with_base, "the memory was freed under a live view"
    other = mpsrt.empty(4096)  # must not be handed the viewed memory
    assert not (other.data_ptr <= ptr < other.data_ptr + 4096)
    np.testing.assert_array_equal(keep.numpy(), np.arange(40, 48))
    assert keep.base is not None and keep.base.nbytes == 4096  # .base keeps the owner too
    del other, keep
    gc.collect()
    mpsrt.synchronize()
    assert mpsrt.memory_allocated() == before


def test_view_free_drops_only_its_own_hold() -> None:
    before = mpsrt.memory_allocated()
    base = _ramp(64, "int32")
    v = base[16:32]
    base.free()  # the view still holds the memory
    assert "released" in repr(base)
    np.testing.assert_array_equal(v.numpy(), np.arange(16, 32))
    v.fill_(3)
    mpsrt.synchronize()
    assert (v.numpy() == 3).all()
    w = v[0:4]
    v.free()
    with pytest.raises(ValueError, match="released"):
        v.fill_(1)
    assert (w.numpy() == 3).all()
    assert mpsrt.memory_allocated() > before
    del w, v, base
    gc.collect()
    mpsrt.synchronize()
    assert mpsrt.memory_allocated() == before


def test_view_of_a_view_reports_the_first_owner_as_base() -> None:
    a = _ramp(100, "uint8")
    b = a[10:90]
    c = b[5:10]
    d = c.view(1, (2,), "uint16")
    assert b.base is a and c.base is a and d.base is a and a.base is None
    assert d.byte_offset == 16 and d.data_ptr == a.data_ptr + 16
    assert "byte_offset=16" in repr(d) and "byte_offset" not in repr(a)
    assert d.numpy().tolist() == [16 | 17 << 8, 18 | 19 << 8]


@pytest.mark.parametrize("offset", [0, 8, 40])
@pytest.mark.parametrize(
    ("op", "dtype"),
    [
        ("uniform_", "float32"),
        ("normal_", "float64"),
        ("random_", "int64"),
        ("bernoulli_", "float32"),
    ],
)
def test_view_random_ops_equal_those_on_a_fresh_buffer(op: str, dtype: str, offset: int) -> None:
    args = {"random_": (0, 1000), "bernoulli_": (0.3,)}.get(op, ())
    base = mpsrt.empty(256, "uint8")
    base.fill_(0xA5)
    view = base.view(offset, (16,), dtype)
    fresh = mpsrt.empty(16, dtype)
    getattr(view, op)(*args, generator=mpsrt.Generator().manual_seed(99))
    getattr(fresh, op)(*args, generator=mpsrt.Generator().manual_seed(99))
    mpsrt.synchronize()
    np.testing.assert_array_equal(view.numpy(), fresh.numpy())
    raw = base.numpy()
    n = view.nbytes
    assert (raw[:offset] == 0xA5).all() and (raw[offset + n :] == 0xA5).all(), "wrote outside"


@pytest.mark.usefixtures("unified_memory")
def test_view_dlpack_numpy_and_torch_share_the_view_memory() -> None:
    torch = pytest.importorskip("torch")
    base = _ramp(16, "float32")
    v = base[4:8]
    arr = np.from_dlpack(v)
    assert arr.__array_interface__["data"][0] == v.data_ptr
    t = torch.from_dlpack(v)
    assert t.data_ptr() == v.data_ptr and t.shape == (4,)
    t += 100  # a torch write lands in the base
    v.numpy()[0] = -5  # so does a numpy write
    np.testing.assert_array_equal(base.numpy()[3:9], [3, -5, 105, 106, 107, 8])
    del arr, t


def test_view_record_stream_protects_the_whole_allocation() -> None:
    s = mpsrt.Stream()
    with blocked(s):
        base = mpsrt.empty(3 * MiB)
        at = base.data_ptr
        v = base[MiB : MiB + 16]
        v.record_stream(s)  # only 16 bytes in the middle
        del v, base
        again = mpsrt.empty(3 * MiB)
        assert again.data_ptr != at, "reused while a stream recorded on a view had work queued"
        # A fill through a view on the blocked stream makes it a user of the whole block too.
        c = mpsrt.empty(4 * KiB)
        at_c = c.data_ptr
        with mpsrt.stream(s):
            c[100:200].fill_(1)
        del c
        d = mpsrt.empty(4 * KiB)
        assert d.data_ptr != at_c, "reused while a fill through a view was queued"
    s.synchronize()
    del again, d
