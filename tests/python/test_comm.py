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
        # torch's no-copy rule: on its own device the result is the source itself.
        assert out[1] is src
        assert out[0].data_ptr != src.data_ptr and out[2].data_ptr != out[0].data_ptr
        check(src, x, dtype, 1)
        # Device strings, a subset and repeats.
        out = comm.broadcast(src, ["mps:2", 0, 2, "mps:1", 1])
        assert [b.device for b in out] == [2, 0, 2, 1, 1]
        assert out[3] is src and out[4] is src
        assert out[0].data_ptr != out[2].data_ptr, "each other-device entry is its own copy"
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
        assert comm.broadcast(src, []) == ()  # torch: no device, no copy
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
        with pytest.raises(ValueError, match="sum exactly to 6"):
            comm.scatter(src, [0, 1], chunk_sizes=[2, 3])
        with pytest.raises(ValueError, match="sum exactly to 4"):
            comm.scatter(src, [0, 1], chunk_sizes=[3, 4], dim=1)
        with pytest.raises(ValueError, match="chunk_sizes to be of same length"):
            comm.scatter(src, [0, 1], chunk_sizes=[6])
        with pytest.raises(ValueError, match="non-negative"):
            comm.scatter(src, [0, 1], chunk_sizes=[7, -1])
        with pytest.raises(TypeError):
            comm.scatter(src, [0, 1], chunk_sizes=3)
        for dim in (2, -3, 100):
            with pytest.raises(ValueError, match="Dimension out of range"):
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
        with pytest.raises(ValueError, match="dtype"):
            comm.gather([a, make(sample((2, 3), "int64"), "int64", 1)])
        with pytest.raises(ValueError, match="invalid shape"):
            comm.gather([a, make(sample((2, 4), "float32"), "float32", 1)], dim=0)
        with pytest.raises(ValueError, match="invalid shape"):
            comm.gather([a, make(sample((3, 3), "float32"), "float32", 1)], dim=1)
        with pytest.raises(ValueError):
            comm.gather([a, make(sample((2, 3, 1), "float32"), "float32", 1)])
        for dim in (2, -3):
            with pytest.raises(ValueError, match="Dimension out of range"):
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
        with pytest.raises(ValueError, match="invalid size"):
            comm.reduce_add([a, make(sample((3, 2), "float32"), "float32", 1)])
        with pytest.raises(ValueError, match="invalid size"):
            comm.reduce_add([a, make(sample((6,), "float32"), "float32", 1)])
        with pytest.raises(ValueError, match="dtype"):
            comm.reduce_add([a, make(sample((2, 3), "int64"), "int64", 1)])
        with pytest.raises(ValueError, match="device"):
            comm.reduce_add([a, a], destination=-5)
        with pytest.raises(TypeError):
            comm.reduce_add([a, a], destination=[1])

    three_devices(body)


# ---------------------------------------------------------------- no-copy rule and out= forms
# (torch.cuda.comm's out= forms, their checks and texts, and its no-copy rule)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_chunk_on_the_source_device_is_a_view(three_devices, dtype: str) -> None:
    def body() -> None:
        x = sample((7, 4), dtype)
        src = make(x, dtype, 1)
        row = 4 * src.itemsize
        out = comm.scatter(src, [0, 1, 2])  # chunks of 3, 3, 1 rows
        chunk = out[1]
        assert chunk.base is src and chunk.data_ptr == src.data_ptr + 3 * row
        check(chunk, x[3:6], dtype, 1)
        assert out[0].base is None and out[2].base is None  # other devices: copies
        # Writes through the chunk reach the source: the same memory, as in torch.
        chunk.fill_(0)
        want = x.copy()
        want[3:6] = 0
        check(src, want, dtype, 1)
        # chunk_sizes, and the source's device several times.
        parts = comm.scatter(src, [1, 2, 1], chunk_sizes=[2, 4, 1])
        assert parts[0].data_ptr == src.data_ptr and parts[2].data_ptr == src.data_ptr + 6 * row
        assert parts[1].base is None
        check(parts[2], want[6:7], dtype, 1)
        # Along dim 1 the chunk is a strided view (test_scatter_non_leading_dim_views) ...
        cols = comm.scatter(src, [1, 0], dim=1)
        assert cols[0].base is src and cols[0].data_ptr == src.data_ptr
        assert cols[0].stride() == (4, 1) and not cols[0].is_contiguous()
        check(cols[0], want[:, 0:2], dtype, 1)
        # ... contiguous where every dimension before dim has size 1.
        flat = make(sample((1, 8), dtype), dtype, 2)
        halves = comm.scatter(flat, [2, 0], dim=1)
        assert halves[0].base is flat and halves[0].shape == (1, 4)
        assert halves[0].is_contiguous()

    three_devices(body)


def test_scatter_streams(three_devices) -> None:
    def body() -> None:
        x = sample((6, 2), "float32")
        src = make(x, "float32", 0)
        s1, s2 = mpsrt.Stream(device=1), mpsrt.Stream(device=2)
        out = comm.scatter(src, [0, 1, 2], streams=[None, s1, s2])
        for d, part in enumerate((x[0:2], x[2:4], x[4:6])):
            check(out[d], part, "float32", d)
        # Like torch, a stream is checked only where a chunk moves; a short list is fine.
        comm.scatter(src, [0, 1], streams=[mpsrt.Stream(device=2)])
        with pytest.raises(RuntimeError) as e:
            comm.scatter(src, [0, 1], streams=[None, s2])
        assert str(e.value) == (
            "Expected the device associated with the stream at index 1 (was 2) to match the "
            "device supplied at that index (expected 1)"
        )
        assert isinstance(e.value, ValueError)
        with pytest.raises(TypeError, match="streams"):
            comm.scatter(src, [0, 1], streams=s1)
        with pytest.raises(TypeError, match="streams"):
            comm.scatter(src, [0, 1], streams=[None, 1])

    three_devices(body)


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_out(three_devices, dtype: str) -> None:
    def body() -> None:
        x = sample((5, 3), dtype)
        src = make(x, dtype, 1)
        outs = [mpsrt.empty((5, 3), dtype, device=d) for d in (0, 1, 2, 2)]
        for o in outs:
            o.fill_(1)
        res = comm.broadcast(src, out=outs)
        assert isinstance(res, tuple) and len(res) == 4
        assert all(r is o for r, o in zip(res, outs)), "out= returns the out Buffers themselves"
        for o in outs:
            check(o, x, dtype, o.device)
        check(src, x, dtype, 1)
        # The source among the outputs, and views as outputs.
        big = mpsrt.empty((10, 3), dtype, device=0)
        big.fill_(0)
        comm.broadcast(src, out=(src, big[5:10], big[0:5]))
        check(big, np.concatenate([x, x]), dtype, 0)

    three_devices(body)


def test_broadcast_out_sees_pending_work(three_devices) -> None:
    def body() -> None:
        src = mpsrt.empty((1 << 16,), "int64", device=0)
        s = mpsrt.Stream(device=0)
        with mpsrt.stream(s):
            for v in range(1, 11):
                src.fill_(v)
        outs = [mpsrt.empty((1 << 16,), "int64", device=d) for d in (0, 1, 2)]
        comm.broadcast(src, out=outs)
        for o in outs:
            assert (read(o) == 10).all()

    three_devices(body)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_out(three_devices, dtype: str) -> None:
    def body() -> None:
        x = sample((6, 5), dtype, seed=3)
        src = make(x, dtype, 0)
        outs = [mpsrt.empty(s, dtype, device=d) for s, d in (((1, 5), 2), ((4, 5), 0), ((1, 5), 1))]
        res = comm.scatter(src, out=outs)
        assert all(r is o for r, o in zip(res, outs))
        for o, part in zip(outs, (x[0:1], x[1:5], x[5:6])):
            check(o, part, dtype, o.device)
        assert outs[1].data_ptr != src.data_ptr, "out= copies, even on the source's device"
        cols = [mpsrt.empty((6, c), dtype, device=d) for c, d in ((2, 1), (0, 2), (3, 0))]
        comm.scatter(src, dim=-1, out=cols, streams=[mpsrt.Stream(device=1), None, None])
        for o, part in zip(cols, (x[:, 0:2], x[:, 2:2], x[:, 2:5])):
            check(o, part, dtype, o.device)

    three_devices(body)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_out(three_devices, dtype: str) -> None:
    def body() -> None:
        parts = [sample((r, 3), dtype, seed=i) for i, r in enumerate((2, 1, 3))]
        bufs = [make(p, dtype, d) for d, p in enumerate(parts)]
        out = mpsrt.empty((6, 3), dtype, device=1)
        assert comm.gather(bufs, out=out) is out
        check(out, np.concatenate(parts), dtype, 1)
        cols = [sample((2, c), dtype, seed=7 + i) for i, c in enumerate((1, 4, 2))]
        bufs = [make(p, dtype, 2 - d) for d, p in enumerate(cols)]
        out = mpsrt.empty((2, 7), dtype, device=2)
        assert comm.gather(bufs, dim=1, out=out) is out
        check(out, np.concatenate(cols, 1), dtype, 2)
        # Into a view of a bigger buffer: its neighbours stay as they were.
        big = mpsrt.empty((4, 7), dtype, device=0)
        big.fill_(0)
        comm.gather(bufs, dim=-1, out=big[1:3])
        want = np.zeros((4, 7), np.float32 if dtype != "int64" else np.int64)
        want[1:3] = np.concatenate(cols, 1)
        check(big, want, dtype, 0)

    three_devices(body)


def test_out_forms_bad_inputs_use_torch_words(three_devices) -> None:
    """torch.cuda.comm's RuntimeErrors and texts; CommError is also a ValueError (API.md)."""

    def body() -> None:
        src = make(sample((6, 4), "float32"), "float32", 0)
        good = [mpsrt.empty((6, 4), "float32", device=d) for d in (1, 2)]

        def raises(text: str, call: Callable[[], object]) -> None:
            with pytest.raises(RuntimeError) as e:
                call()
            assert str(e.value) == text
            assert isinstance(e.value, ValueError) and isinstance(e.value, comm.CommError)

        raises(
            "Exactly one of 'devices' and 'out' must be specified, but got devices=None and "
            "out=None",
            lambda: comm.broadcast(src),
        )
        raises(
            f"Exactly one of 'devices' and 'out' must be specified, but got devices=[1] and "
            f"out={good}",
            lambda: comm.broadcast(src, [1], out=good),
        )
        raises(
            "Expected all output tensors to have same shape as the source tensor [6, 4], but "
            "output tensor at index 1 has shape [4, 6]",
            lambda: comm.broadcast(src, out=[good[0], mpsrt.empty((4, 6), "float32")]),
        )
        raises(
            "'devices' must not be specified when 'out' is specified, but got devices=[0, 1]",
            lambda: comm.scatter(src, [0, 1], out=good),
        )
        raises(
            "'chunk_sizes' must not be specified when 'out' is specified, but got "
            "chunk_sizes=[3, 3]",
            lambda: comm.scatter(src, chunk_sizes=[3, 3], out=good),
        )
        raises(
            "Expected at least one output tensor to scatter to", lambda: comm.scatter(src, out=[])
        )
        raises(
            "Output tensor at index 1 has incorrect shape: [3, 5]. Expected same shape except "
            "for scatter dim 0 as the source tensor: [6, 4]",
            lambda: comm.scatter(
                src, out=[mpsrt.empty((3, 4), "float32"), mpsrt.empty((3, 5), "float32")]
            ),
        )
        raises(
            "Output tensor at index 0 has incorrect shape: [6]. Expected same shape except for "
            "scatter dim 1 as the source tensor: [6, 4]",
            lambda: comm.scatter(src, dim=1, out=[mpsrt.empty((6,), "float32")]),
        )
        raises(
            "Total size for output tensors along scatter dim 0 does not match the source tensor "
            "size at dim 0. Expected 6, but got total size 5",
            lambda: comm.scatter(
                src, out=[mpsrt.empty((3, 4), "float32"), mpsrt.empty((2, 4), "float32")]
            ),
        )
        raises(
            "Expected the device associated with the stream at index 0 (was 0) to match the "
            "device supplied at that index (expected 1)",
            lambda: comm.scatter(
                src, out=[mpsrt.empty((6, 4), "float32", device=1)], streams=[mpsrt.Stream()]
            ),
        )
        raises(
            "'destination' must not be specified when 'out' is specified, but got destination=1",
            lambda: comm.gather([src], destination=1, out=good[0]),
        )
        raises(
            "Expected out tensor to have shape [12, 4], but got [6, 4]",
            lambda: comm.gather([src, good[0]], out=good[1]),
        )
        raises(
            "Expected out tensor to have shape [6, 8], but got [6, 4]",
            lambda: comm.gather([src, good[0]], dim=1, out=good[1]),
        )
        # mpsrt's own checks: types, dtypes (comm copies bytes, it does not convert).
        with pytest.raises(TypeError, match="sequence of Buffers"):
            comm.broadcast(src, out=good[0])
        with pytest.raises(TypeError, match="Buffer"):
            comm.scatter(src, out=[good[0], "x"])
        with pytest.raises(TypeError, match="Buffer"):
            comm.gather([src], out=[good[0]])
        with pytest.raises(ValueError, match="does not convert dtypes"):
            comm.broadcast(src, out=[mpsrt.empty((6, 4), "int32")])
        with pytest.raises(ValueError, match="does not convert dtypes"):
            comm.gather([src], out=mpsrt.empty((6, 4), "int32"))
        freed = mpsrt.empty((6, 4), "float32")
        freed.free()
        with pytest.raises(ValueError, match="released"):
            comm.broadcast(src, out=[freed])
        # Nothing was written by a refused call.
        good[0].fill_(7.0)
        with pytest.raises(RuntimeError):
            comm.broadcast(src, out=[good[0], mpsrt.empty(3, "float32")])
        assert (read(good[0]) == 7.0).all()

    three_devices(body)


def test_no_copy_rule_and_out_forms_on_one_device() -> None:
    """On every backend (one device suffices): what stays on the source's device is the source
    or a view of it; out= on the source's device is a device copy."""
    dev = mpsrt.current_device()
    x = sample((6, 4), "float32")
    src = make(x, "float32", dev)
    a, b = comm.broadcast(src, [dev, dev])
    assert a is src and b is src
    chunks = comm.scatter(src, [dev, dev, dev], chunk_sizes=[1, 0, 5])
    assert [c.base for c in chunks] == [src] * 3
    assert [c.data_ptr - src.data_ptr for c in chunks] == [0, 16, 16]
    chunks[2][0].fill_(-1.0)  # a write through a chunk reaches the source
    want = x.copy()
    want[1] = -1
    check(src, want, "float32", dev)
    outs = [mpsrt.empty((6, 4), "float32", device=dev) for _ in range(2)]
    assert comm.broadcast(src, out=outs) == tuple(outs)
    for o in outs:
        check(o, want, "float32", dev)
    parts = [mpsrt.empty((6, c), "float32", device=dev) for c in (3, 1)]
    comm.scatter(src, dim=1, out=parts, streams=[mpsrt.Stream(device=dev)])
    check(parts[0], want[:, :3], "float32", dev)
    check(parts[1], want[:, 3:], "float32", dev)
    rows = [mpsrt.empty((k, 4), "float32", device=dev) for k in (4, 2)]
    comm.scatter(src, out=rows, streams=[mpsrt.Stream(device=dev), None])
    check(rows[0], want[:4], "float32", dev)
    out = mpsrt.empty((12, 4), "float32", device=dev)
    assert comm.gather([src, outs[0]], out=out) is out
    check(out, np.concatenate([want, want]), "float32", dev)
    wide = mpsrt.empty((6, 8), "float32", device=dev)
    comm.gather([outs[1], src], dim=1, out=wide)
    check(wide, np.concatenate([want, want], 1), "float32", dev)


def test_comm_is_exported() -> None:
    assert mpsrt.comm is comm
    assert set(comm.__all__) == {"broadcast", "scatter", "gather", "reduce_add"}


# ---------------------------------------------------------------- torch.cuda.comm's errors
# (issue 28 item 7: empty inputs, an empty device list, chunk sizes that do not add up, host
# arrays in out=; the texts are torch/csrc/cuda/comm.cpp's and split_with_sizes')


def raises_exactly(kind: type[BaseException], text: str, call: Callable[[], object]) -> None:
    with pytest.raises(kind) as e:
        call()
    assert str(e.value) == text
    assert isinstance(e.value, ValueError)  # API.md: a wrong value is also a ValueError


def test_comm_broadcast_torch_errors(three_devices) -> None:
    def body() -> None:
        src = make(sample((2, 3), "float32"), "float32", 0)
        # torch: an empty device list or out list broadcasts to nothing.
        assert comm.broadcast(src, []) == ()
        assert comm.broadcast(src, out=[]) == ()
        host = np.zeros((2, 3), np.float32)
        for out in ([host], [mpsrt.empty((2, 3), "float32", device=1), host]):
            i = len(out) - 1
            raises_exactly(
                RuntimeError,
                f"Expected all output tensors to be mpsrt Buffers, but output tensor at index {i} "
                "has device 'cpu' (a numpy.ndarray)",
                lambda out=out: comm.broadcast(src, out=out),
            )
        assert (host == 0).all()

    three_devices(body)


def test_comm_scatter_torch_errors(three_devices) -> None:
    def body() -> None:
        src = make(sample((6, 4), "float32"), "float32", 0)
        raises_exactly(
            RuntimeError,
            "Expected at least one device to scatter to",
            lambda: comm.scatter(src, []),
        )
        raises_exactly(
            RuntimeError,
            "Expected at least one output tensor to scatter to",
            lambda: comm.scatter(src, out=[]),
        )
        raises_exactly(
            RuntimeError,
            "split_with_sizes expects split_sizes to sum exactly to 6 (input tensor's size at "
            "dimension 0), but got split_sizes=[2, 3]",
            lambda: comm.scatter(src, [0, 1], chunk_sizes=[2, 3]),
        )
        raises_exactly(
            RuntimeError,
            "split_with_sizes expects split_sizes to sum exactly to 4 (input tensor's size at "
            "dimension 1), but got split_sizes=[3, 4]",
            lambda: comm.scatter(src, [1, 2], chunk_sizes=[3, 4], dim=-1),
        )
        raises_exactly(
            RuntimeError,
            "split_with_sizes expects split_sizes have only non-negative entries, but got "
            "split_sizes=[7, -1]",
            lambda: comm.scatter(src, [0, 1], chunk_sizes=[7, -1]),
        )
        raises_exactly(
            RuntimeError,
            "Expected devices and chunk_sizes to be of same length, but got len(devices) = 2 and "
            "len(chunk_sizes) = 1",
            lambda: comm.scatter(src, [0, 1], chunk_sizes=[6]),
        )
        raises_exactly(
            IndexError,
            "Dimension out of range (expected to be in range of [-2, 1], but got 2)",
            lambda: comm.scatter(src, [0, 1], dim=2),
        )
        raises_exactly(
            RuntimeError,
            "chunk expects at least a 1-dimensional tensor",
            lambda: comm.scatter(mpsrt.empty((), "float32"), [0, 1]),
        )
        raises_exactly(
            RuntimeError,
            "Expected all output tensors to be mpsrt Buffers, but output tensor at index 0 has "
            "device 'cpu' (a numpy.ndarray)",
            lambda: comm.scatter(src, out=[np.zeros((6, 4), np.float32)]),
        )

    three_devices(body)


def test_comm_gather_and_reduce_add_torch_errors(three_devices) -> None:
    def body() -> None:
        a = make(sample((2, 3), "float32"), "float32", 0)
        raises_exactly(
            RuntimeError, "Expected at least one tensor to gather from", lambda: comm.gather([])
        )
        raises_exactly(
            RuntimeError,
            "Expected at least one tensor to gather from",
            lambda: comm.gather([], out=mpsrt.empty((2, 3), "float32")),
        )
        # torch.cuda.comm.gather: a CPU tensor among the inputs is a RuntimeError naming it.
        for inputs in ([np.zeros((2, 3), np.float32), a], [a, np.zeros((2, 3), np.float32)]):
            i = 0 if isinstance(inputs[0], np.ndarray) else 1
            raises_exactly(
                RuntimeError,
                f"Expected all input tensors to be mpsrt Buffers, but tensor at index {i} has "
                "device 'cpu' (a numpy.ndarray)",
                lambda inputs=inputs: comm.gather(inputs),
            )
        raises_exactly(
            RuntimeError,
            "Expected all input tensors to have the same number of dimensions, but tensor at "
            "index 1 has 3 dimensions, (expected 2)",
            lambda: comm.gather([a, mpsrt.empty((2, 3, 1), "float32", device=1)]),
        )
        raises_exactly(
            RuntimeError,
            "Input tensor at index 1 has invalid shape [2, 4], but expected [2, 3]",
            lambda: comm.gather([a, mpsrt.empty((2, 4), "float32", device=1)]),
        )
        raises_exactly(
            IndexError,
            "Dimension out of range (expected to be in range of [-2, 1], but got -3)",
            lambda: comm.gather([a, a], dim=-3),
        )
        raises_exactly(
            ValueError,
            "input 1 has invalid size: got 3x2, but expected 2x3",
            lambda: comm.reduce_add([a, mpsrt.empty((3, 2), "float32", device=1)]),
        )
        with pytest.raises(IndexError, match="list index out of range") as e:
            comm.reduce_add([])  # torch indexes inputs[0]
        assert isinstance(e.value, ValueError)

    three_devices(body)


def test_comm_gather_into_a_host_array_as_torch_gathers_into_a_cpu_tensor(three_devices) -> None:
    def body() -> None:
        parts = [sample((2, c), "float32", seed=c) for c in (1, 3)]
        bufs = [make(p, "float32", d) for d, p in enumerate(parts)]
        host = np.full((2, 4), -7, np.float32)
        assert comm.gather(bufs, dim=1, out=host) is host
        np.testing.assert_array_equal(host, np.concatenate(parts, 1))
        raises_exactly(
            RuntimeError,
            "Expected out tensor to have shape [2, 4], but got [4, 2]",
            lambda: comm.gather(bufs, dim=1, out=np.zeros((4, 2), np.float32)),
        )
        with pytest.raises(ValueError, match="does not convert dtypes"):
            comm.gather(bufs, dim=1, out=np.zeros((2, 4), np.float64))

    three_devices(body)


# ---------------------------------------------------------------- scatter's views along any dim


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_non_leading_dim_views(three_devices, dtype: str) -> None:
    """torch's scatter returns `tensor.chunk(...)` / split views for the chunks that stay on the
    source's device: strided along a later dimension, with torch's strides and offsets."""
    torch = pytest.importorskip("torch")

    def body() -> None:
        x = sample((3, 7, 2), dtype)
        src = make(x, dtype, 1)
        t = torch.zeros(3, 7, 2)  # the layout torch's chunks have
        want_chunks = t.chunk(3, dim=1)
        out = comm.scatter(src, [1, 0, 1], dim=1)  # chunks of 3, 3, 1 along dim 1
        for i, (chunk, tc) in enumerate(zip(out, want_chunks)):
            assert chunk.shape == tuple(tc.shape)
            part = x[:, 3 * i : 3 * i + tc.shape[1]]
            if chunk.device == 1:
                assert chunk.base is src
                assert chunk.stride() == tc.stride()
                assert chunk.is_contiguous() == tc.is_contiguous()
                assert chunk.data_ptr - src.data_ptr == tc.storage_offset() * src.itemsize
            else:
                assert chunk.base is None and chunk.is_contiguous()
            check(chunk, part, dtype, [1, 0, 1][i])
        # A write through a strided chunk reaches exactly its elements of the source.
        out[0].fill_(0)
        want = x.copy()
        want[:, 0:3] = 0
        check(src, want, dtype, 1)
        # chunk_sizes along the last dimension, and out= with a strided source piece.
        halves = comm.scatter(src, [1, 2], chunk_sizes=[1, 1], dim=2)
        assert halves[0].stride() == (14, 2, 1) and halves[0].base is src
        check(halves[0], want[:, :, :1], dtype, 1)
        check(halves[1], want[:, :, 1:], dtype, 2)
        outs = [mpsrt.empty((3, 7, 1), dtype, device=d) for d in (2, 1)]
        comm.scatter(src, dim=2, out=outs)
        check(outs[0], want[:, :, :1], dtype, 2)
        check(outs[1], want[:, :, 1:], dtype, 1)
        # gather of strided views puts them back.
        check(comm.gather(list(halves), dim=2, destination=0), want, dtype, 0)

    three_devices(body)


# ---------------------------------------------------------------- Buffer.copy_ across devices
# (issue 28 item 6: as a cross-device tensor.copy_ on CUDA)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_device_buffer_copy_values(three_devices, dtype: str) -> None:
    def body() -> None:
        x = sample((5, 6), dtype)
        a = make(x, dtype, 0)
        b = mpsrt.empty((5, 6), dtype, device=2)
        assert b.copy_(a) is b
        check(b, x, dtype, 2)
        # Views and strided views on either side: exactly their elements move.
        c = make(np.zeros((5, 6), np.float32), dtype, 1)
        c.narrow(1, 2, 3).copy_(a.narrow(1, 0, 3))
        c[4].copy_(b[0])
        want = np.zeros((5, 6), np.float32).astype(x.dtype)
        want[:, 2:5] = x[:, 0:3]
        want[4] = x[0]
        check(c, want, dtype, 1)
        with pytest.raises(ValueError, match="sizes must match"):
            b.copy_(mpsrt.empty((5, 5), dtype, device=0))

    three_devices(body)


def test_cross_device_buffer_copy_is_stream_ordered(three_devices) -> None:
    """Ordered after the source device's current stream (its pending fills are copied) and the
    destination's current stream (its pending fill comes first), complete when it returns."""

    def body() -> None:
        n = 1 << 18
        src = mpsrt.empty((n,), "int64", device=0)
        dst = mpsrt.empty((n,), "int64", device=1)
        s0, s1 = mpsrt.Stream(device=0), mpsrt.Stream(device=1)
        with mpsrt.stream(s0), mpsrt.stream(s1):
            for v in range(1, 21):
                src.fill_(v)  # queued on device 0's current stream
                dst.fill_(-v)  # queued on device 1's current stream, before the copy
            dst.copy_(src)
            assert s0.query() and s1.query()
            src.fill_(99)  # later work on the source does not reach the copy
        assert (read(dst) == 20).all()

    three_devices(body)


def test_cross_device_buffer_copy_in_the_profiler(three_devices, tmp_path) -> None:
    import json

    def body() -> None:
        a = mpsrt.empty((1024,), "float32", device=0).fill_(1.0)
        b = mpsrt.empty((1024,), "float32", device=1)
        mpsrt.profiler.start()
        b.copy_(a)
        mpsrt.profiler.stop()
        mpsrt.profiler.export_trace(tmp_path / "t.json")
        trace = json.loads((tmp_path / "t.json").read_text())
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        assert any(e.get("name") == "copy_peer" for e in events)

    three_devices(body)
