"""mpsrt.comm (API.md "Multi-device"): broadcast, scatter, gather and reduce_add over Buffers,
as torch.cuda.comm. Runs with three devices (MPSRT_CPU_DEVICES=3 on cpu); a backend with fewer
devices skips visibly.

Every test body runs in a re-created runtime; its Buffers must be gone before that runtime is
torn down, so a failure is reported as text once the body's frames are released (`in_runtime`).
"""

from __future__ import annotations

import gc
import sys
import traceback
from collections.abc import Callable, Iterator

import mpsrt
import numpy as np
import pytest
from mpsrt import comm

DTYPES = ["float32", "int64", "bfloat16"]


@pytest.fixture(autouse=True)
def _drop_failed_frames() -> Iterator[None]:
    yield
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    gc.collect()


@pytest.fixture
def three_devices(runtime_env) -> Callable[[Callable[[], None]], None]:
    """Call with a body to run it with three devices, or skip visibly."""
    if mpsrt.backend() != "cpu" and mpsrt.device_count() < 3:
        pytest.skip(f"needs 3 devices; backend {mpsrt.backend()} has {mpsrt.device_count()} here")

    def run(body: Callable[[], None]) -> None:
        failure = None
        with runtime_env(MPSRT_CPU_DEVICES=3):
            try:
                assert mpsrt.device_count() == 3
                body()
            except Exception:
                failure = traceback.format_exc()
            gc.collect()
        if failure is not None:
            pytest.fail(failure, pytrace=False)

    return run


# ---------------------------------------------------------------- values in and out


def sample(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Values every dtype holds exactly (bfloat16: multiples of 1/4 below 32, so sums of a few
    of them are exact too); returned as float32 for bfloat16."""
    n = int(np.prod(shape))
    k = (np.arange(n) * 7 + seed * 13) % 97 - 48
    if dtype == "int64":
        return (k.astype(np.int64) * (1 << 33) + seed).reshape(shape)
    x = (k / 4).astype(np.float32)
    return x.reshape(shape)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values that bfloat16 holds exactly -> their bfloat16 bit patterns."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    assert not (u & 0xFFFF).any(), "not exactly representable in bfloat16"
    return (u >> 16).astype(np.uint16)


def make(x: np.ndarray, dtype: str, device: int = 0) -> mpsrt.Buffer:
    buf = mpsrt.empty(x.shape, dtype, device=device)
    buf.copy_(bf16_bits(x) if dtype == "bfloat16" else np.ascontiguousarray(x, dtype=dtype))
    return buf


def read(buf: mpsrt.Buffer) -> np.ndarray:
    """The buffer's values (bfloat16 widened to float32), read through public calls only."""
    if buf.dtype == "bfloat16":
        bits = mpsrt.empty(buf.shape, "uint16", device=buf.device)
        with mpsrt.device(buf.device):
            bits.copy_(buf)
        return (bits.numpy().astype(np.uint32) << 16).view(np.float32)
    return buf.numpy().copy()


def check(buf: mpsrt.Buffer, want: np.ndarray, dtype: str, device: int) -> None:
    assert isinstance(buf, mpsrt.Buffer)
    assert buf.dtype == dtype
    assert buf.device == device
    assert buf.shape == want.shape
    np.testing.assert_array_equal(read(buf), want)


# ---------------------------------------------------------------- broadcast


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast(three_devices, dtype: str) -> None:
    def body() -> None:
        x = sample((5, 3), dtype)
        src = make(x, dtype, 1)
        out = comm.broadcast(src, [0, 1, 2])
        assert isinstance(out, tuple) and len(out) == 3
        for d, b in enumerate(out):
            check(b, x, dtype, d)
        assert out[1].data_ptr != src.data_ptr, "broadcast returns copies, even on the source"
        check(src, x, dtype, 1)
        # Device strings, a subset and repeats.
        out = comm.broadcast(src, ["mps:2", 0, 2])
        assert [b.device for b in out] == [2, 0, 2]
        for b in out:
            check(b, x, dtype, b.device)

    three_devices(body)


def test_broadcast_sees_pending_work_of_every_stream(three_devices) -> None:
    def body() -> None:
        src = mpsrt.empty((1 << 16,), "int64", device=0)
        s = mpsrt.Stream(device=0)
        with mpsrt.stream(s):
            for v in range(1, 21):
                src.fill_(v)  # pending on a non-default stream
        for b in comm.broadcast(src, [1, 2]):
            assert (read(b) == 20).all()

    three_devices(body)


def test_broadcast_bad_inputs(three_devices) -> None:
    def body() -> None:
        src = make(sample((4,), "float32"), "float32")
        with pytest.raises(TypeError, match="Buffer"):
            comm.broadcast(np.zeros(4, np.float32), [0, 1])
        with pytest.raises(TypeError):
            comm.broadcast(src, 1)
        with pytest.raises(TypeError):
            comm.broadcast(src, "mps:1")
        with pytest.raises(ValueError):
            comm.broadcast(src, [])
        with pytest.raises(ValueError, match="device"):
            comm.broadcast(src, [0, 3])
        with pytest.raises(ValueError, match="device"):
            comm.broadcast(src, [0, "nope:1"])
        with pytest.raises(TypeError):
            comm.broadcast(src, [0, 1.5])
        with pytest.raises(TypeError):
            comm.broadcast(src, [None])

    three_devices(body)


# ---------------------------------------------------------------- scatter


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_default_chunks_dim0(three_devices, dtype: str) -> None:
    def body() -> None:
        x = sample((7, 4), dtype)
        out = comm.scatter(make(x, dtype, 0), [0, 1, 2])
        assert isinstance(out, tuple) and len(out) == 3
        # torch.chunk: chunks of ceil(7 / 3) = 3 rows, the last one smaller.
        for d, (b, part) in enumerate(zip(out, (x[0:3], x[3:6], x[6:7]))):
            check(b, part, dtype, d)

    three_devices(body)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_default_chunks_dim1(three_devices, dtype: str) -> None:
    def body() -> None:
        x = sample((3, 9), dtype, seed=1)
        src = make(x, dtype, 2)
        for dim in (1, -1):
            out = comm.scatter(src, [2, 0, 1], dim=dim)
            assert [b.device for b in out] == [2, 0, 1]
            for b, part in zip(out, (x[:, 0:3], x[:, 3:6], x[:, 6:9])):
                check(b, part, dtype, b.device)

    three_devices(body)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_chunk_sizes(three_devices, dtype: str) -> None:
    def body() -> None:
        x = sample((6, 5), dtype, seed=2)
        src = make(x, dtype, 0)
        out = comm.scatter(src, [0, 1, 2], chunk_sizes=[1, 4, 1])
        for d, (b, part) in enumerate(zip(out, (x[0:1], x[1:5], x[5:6]))):
            check(b, part, dtype, d)
        out = comm.scatter(src, [1, 2], chunk_sizes=(2, 3), dim=1)
        for b, part, d in zip(out, (x[:, 0:2], x[:, 2:5]), (1, 2)):
            check(b, part, dtype, d)
        out = comm.scatter(src, [0, 1, 2], chunk_sizes=[0, 6, 0])  # empty chunks are allowed
        assert [b.shape for b in out] == [(0, 5), (6, 5), (0, 5)]
        check(out[1], x, dtype, 1)

    three_devices(body)


def test_scatter_default_chunks_follow_torch_chunk(three_devices) -> None:
    """torch.cuda.comm.scatter splits with tensor.chunk(len(devices)), which may give fewer
    chunks than devices: 4 rows over 3 devices is two chunks of 2 rows, on devices 0 and 1."""

    def body() -> None:
        x = sample((4, 2), "float32")
        out = comm.scatter(make(x, "float32"), [0, 1, 2])
        assert [b.shape for b in out] == [(2, 2), (2, 2)]
        check(out[0], x[0:2], "float32", 0)
        check(out[1], x[2:4], "float32", 1)

    three_devices(body)


def test_scatter_bad_inputs(three_devices) -> None:
    def body() -> None:
        src = make(sample((6, 4), "float32"), "float32")
        with pytest.raises(TypeError, match="Buffer"):
            comm.scatter([1, 2, 3], [0, 1])
        with pytest.raises(TypeError):
            comm.scatter(src, 2)
        with pytest.raises(ValueError):
            comm.scatter(src, [])
        with pytest.raises(ValueError, match="device"):
            comm.scatter(src, [0, 7])
        with pytest.raises(ValueError, match="chunk sizes add up to 5"):
            comm.scatter(src, [0, 1], chunk_sizes=[2, 3])
        with pytest.raises(ValueError, match="chunk sizes add up to 7"):
            comm.scatter(src, [0, 1], chunk_sizes=[3, 4], dim=1)
        with pytest.raises(ValueError, match="chunk sizes"):
            comm.scatter(src, [0, 1], chunk_sizes=[6])
        with pytest.raises(ValueError, match="chunk sizes"):
            comm.scatter(src, [0, 1], chunk_sizes=[7, -1])
        with pytest.raises(TypeError):
            comm.scatter(src, [0, 1], chunk_sizes=3)
        for dim in (2, -3, 100):
            with pytest.raises(ValueError, match="dim"):
                comm.scatter(src, [0, 1], dim=dim)
        for dim in ("0", 0.0, None, True):
            with pytest.raises(TypeError, match="dim"):
                comm.scatter(src, [0, 1], dim=dim)
        scalar = mpsrt.empty((), "float32")
        with pytest.raises(ValueError, match="dimension"):
            comm.scatter(scalar, [0, 1])

    three_devices(body)


def test_scatter_chunk_sizes_of_a_wrong_type_are_type_errors(three_devices) -> None:
    """API.md: a wrong type is a TypeError, a wrong value a ValueError."""

    def body() -> None:
        src = make(sample((6, 4), "float32"), "float32")
        with pytest.raises(TypeError, match="chunk sizes"):
            comm.scatter(src, [0, 1], chunk_sizes=[3.0, 3.0])
        with pytest.raises(TypeError, match="chunk sizes"):
            comm.scatter(src, [0, 1], chunk_sizes=["3", "3"])

    three_devices(body)


# ---------------------------------------------------------------- gather


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather(three_devices, dtype: str) -> None:
    def body() -> None:
        parts = [sample((r, 3), dtype, seed=i) for i, r in enumerate((2, 1, 3))]
        bufs = [make(p, dtype, d) for d, p in enumerate(parts)]
        check(comm.gather(bufs, destination=2), np.concatenate(parts), dtype, 2)
        check(comm.gather(bufs, dim=0, destination="mps:1"), np.concatenate(parts), dtype, 1)
        with mpsrt.device(1):
            check(comm.gather(bufs), np.concatenate(parts), dtype, 1)  # the current device
        check(comm.gather(bufs), np.concatenate(parts), dtype, 0)
        check(comm.gather(tuple(bufs[:1]), destination=0), parts[0], dtype, 0)

        cols = [sample((2, c), dtype, seed=5 + i) for i, c in enumerate((1, 4, 2))]
        bufs = [make(p, dtype, 2 - d) for d, p in enumerate(cols)]
        for dim in (1, -1):
            check(comm.gather(bufs, dim=dim, destination=0), np.concatenate(cols, 1), dtype, 0)

    three_devices(body)


def test_gather_bad_inputs(three_devices) -> None:
    def body() -> None:
        a = make(sample((2, 3), "float32"), "float32", 0)
        b = make(sample((2, 3), "float32"), "float32", 1)
        with pytest.raises(ValueError):
            comm.gather([])
        with pytest.raises(TypeError):
            comm.gather(a)  # a Buffer, not a sequence of them
        with pytest.raises(TypeError, match="Buffer"):
            comm.gather([a, "b"])
        with pytest.raises(TypeError, match="Buffer"):
            comm.gather([a, np.zeros((2, 3), np.float32)])
        with pytest.raises(ValueError, match="dtype"):
            comm.gather([a, make(sample((2, 3), "int64"), "int64", 1)])
        with pytest.raises(ValueError, match="differ"):
            comm.gather([a, make(sample((2, 4), "float32"), "float32", 1)], dim=0)
        with pytest.raises(ValueError, match="differ"):
            comm.gather([a, make(sample((3, 3), "float32"), "float32", 1)], dim=1)
        with pytest.raises(ValueError):
            comm.gather([a, make(sample((2, 3, 1), "float32"), "float32", 1)])
        for dim in (2, -3):
            with pytest.raises(ValueError, match="dim"):
                comm.gather([a, b], dim=dim)
        with pytest.raises(TypeError, match="dim"):
            comm.gather([a, b], dim="1")
        with pytest.raises(ValueError, match="device"):
            comm.gather([a, b], destination=3)
        with pytest.raises(TypeError):
            comm.gather([a, b], destination=1.0)

    three_devices(body)


# ---------------------------------------------------------------- reduce_add


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_add(three_devices, dtype: str) -> None:
    def body() -> None:
        xs = [sample((4, 5), dtype, seed=i) for i in range(3)]
        bufs = [make(x, dtype, d) for d, x in enumerate(xs)]
        want = xs[0] + xs[1] + xs[2]
        check(comm.reduce_add(bufs, destination=2), want, dtype, 2)
        check(comm.reduce_add(bufs), want, dtype, 0)
        with mpsrt.device("mps:1"):
            check(comm.reduce_add(bufs), want, dtype, 1)
        check(comm.reduce_add(bufs[:1], destination=1), xs[0], dtype, 1)
        for x, b in zip(xs, bufs):
            check(b, x, dtype, b.device)  # the inputs are untouched

    three_devices(body)


def test_reduce_add_bfloat16_rounds_to_nearest_even(three_devices) -> None:
    def body() -> None:
        one_and_a_bit = np.float32(1 + 2**-7)  # odd last mantissa bit
        a = make(np.array([1.0, one_and_a_bit, 256.0], np.float32), "bfloat16", 0)
        b = make(np.array([2**-8, 2**-8, 1.0], np.float32), "bfloat16", 1)
        # 1 + 2^-8 ties to 1 (even); 1 + 2^-7 + 2^-8 ties to 1 + 2^-6; 257 rounds to 256.
        want = np.array([1.0, 1 + 2**-6, 256.0], np.float32)
        check(comm.reduce_add([a, b], destination=2), want, "bfloat16", 2)

    three_devices(body)


def test_reduce_add_int64_is_exact(three_devices) -> None:
    def body() -> None:
        big = np.array([2**62 - 1, -(2**62), 2**53 + 1], np.int64)
        a, b = make(big, "int64", 0), make(np.array([1, -1, 2], np.int64), "int64", 2)
        check(
            comm.reduce_add([a, b], destination=1),
            np.array([2**62, -(2**62) - 1, 2**53 + 3], np.int64),
            "int64",
            1,
        )

    three_devices(body)


def test_reduce_add_bad_inputs(three_devices) -> None:
    def body() -> None:
        a = make(sample((2, 3), "float32"), "float32", 0)
        with pytest.raises(ValueError):
            comm.reduce_add([])
        with pytest.raises(TypeError):
            comm.reduce_add(a)
        with pytest.raises(TypeError, match="Buffer"):
            comm.reduce_add([a, 1.0])
        with pytest.raises(ValueError, match="shape"):
            comm.reduce_add([a, make(sample((3, 2), "float32"), "float32", 1)])
        with pytest.raises(ValueError, match="shape"):
            comm.reduce_add([a, make(sample((6,), "float32"), "float32", 1)])
        with pytest.raises(ValueError, match="dtype"):
            comm.reduce_add([a, make(sample((2, 3), "int64"), "int64", 1)])
        with pytest.raises(ValueError, match="device"):
            comm.reduce_add([a, a], destination=-5)
        with pytest.raises(TypeError):
            comm.reduce_add([a, a], destination=[1])

    three_devices(body)


def test_comm_is_exported() -> None:
    assert mpsrt.comm is comm
    assert set(comm.__all__) == {"broadcast", "scatter", "gather", "reduce_add"}
