"""Fill and copy commands through a stream, on every kernel path of the cpu backend and every
setting of the vulkan kernels."""

from __future__ import annotations

from collections.abc import Iterator

import mpsrt
import mpsrt._bench
import numpy as np
import pytest

RawHeap = mpsrt._bench.RawHeap
# Sizes around the vector widths, the L2 size and the parallel split (4 MiB).
SIZES = [1, 7, 63, 64, 65, 255, 4099, (1 << 20) + 13, (6 << 20) + 24]


def _check_fill_and_copy() -> None:
    # Buffers of exactly n bytes; a fill of 2, 4 or 8-byte patterns through a view of that
    # width (the fill of whole patterns leaves the tail as it was). Read back with numpy():
    # the memory itself on unified memory, a staged copy on discrete memory.
    rng = np.random.default_rng(0)
    for n in SIZES:
        a, b = mpsrt.empty(n), mpsrt.empty(n)
        for size, value in ((1, 0xAB), (2, 0xBEEF), (4, 0x01020304), (8, 0x1122334455667788)):
            count = n // size
            if count:
                a.view(0, (count,), f"uint{8 * size}").fill_(value)
            pattern = np.frombuffer(value.to_bytes(8, "little")[:size], np.uint8)
            expect = np.resize(pattern, count * size)
            assert np.array_equal(a.numpy()[: expect.size], expect), (n, size)
        host = rng.integers(0, 256, n, dtype=np.uint8)
        b.copy_(host)
        a.copy_(b)
        assert np.array_equal(a.numpy(), host), n


@pytest.mark.parametrize("isa", ["auto", "scalar", "avx2", "avx512"])
def test_fill_copy_every_kernel_path(backend: str, runtime_env, isa: str) -> None:
    if backend != "cpu" and isa != "auto":
        pytest.skip("instruction-set selection is a cpu-backend setting")
    with runtime_env(MPSRT_CPU_ISA=isa):
        try:
            details = mpsrt.get_device_properties().details
        except ValueError as e:
            assert "not supported by this CPU" in str(e)
            pytest.skip(f"this CPU has no {isa}")
        if backend == "cpu" and isa != "auto":
            assert details == f"kernels={isa}"
        _check_fill_and_copy()


def test_commands_run_in_order() -> None:
    a = mpsrt.empty(1 << 16)
    for v in range(1, 50):
        a.fill_(v)
    assert (a.numpy() == 49).all()


def test_bad_pattern_size() -> None:
    a = RawHeap(64)
    with pytest.raises(ValueError, match="pattern_size must be 1, 2, 4 or 8"):
        a.fill(1, 3)
    a.fill(5)
    mpsrt.synchronize()
    if mpsrt.get_device_properties().unified_memory:  # raw heaps are host-visible there only
        assert (a.numpy() == 5).all()


# --------------------------------------------------------------------------- kernel shapes
# Fills, copies and random fills through views at every phase around 16-byte boundaries (the
# vulkan kernels' uvec4 middles and their partial head / tail words), under each setting of the
# vulkan kernels (on other backends the settings are accepted and change nothing).

VULKAN_VARIANTS = {
    "default": {},
    "one-small-group": {
        "MPSRT_VULKAN_WORKGROUP": "32",
        "MPSRT_VULKAN_GROUPS_PER_SM": "1",
        "MPSRT_VULKAN_UNROLL": "1",
    },
    "big-groups": {
        "MPSRT_VULKAN_WORKGROUP": "1024",
        "MPSRT_VULKAN_GROUPS_PER_SM": "3",
        "MPSRT_VULKAN_UNROLL": "8",
    },
    "words-and-dma": {
        "MPSRT_VULKAN_WORKGROUP": "64",
        "MPSRT_VULKAN_UNROLL": "4",
        "MPSRT_VULKAN_VECTOR": "4",
        "MPSRT_VULKAN_COPY": "dma",
    },
}
LENGTHS = [1, 2, 3, 4, 5, 7, 8, 12, 13, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 129, 1000]


@pytest.fixture(params=list(VULKAN_VARIANTS))
def kernel_settings(request: pytest.FixtureRequest, backend: str, runtime_env) -> Iterator[str]:
    env = VULKAN_VARIANTS[request.param]
    with runtime_env(**env):
        if backend == "vulkan":
            details = mpsrt.get_device_properties().details
            wg = env.get("MPSRT_VULKAN_WORKGROUP")
            if wg is not None:
                assert f"workgroup={wg} " in details, details
            if "MPSRT_VULKAN_COPY" in env:
                assert f"copy={env['MPSRT_VULKAN_COPY']}" in details, details
        yield request.param


def _ref_pattern(value: int, size: int, n: int) -> np.ndarray:
    return np.resize(np.frombuffer(value.to_bytes(8, "little")[:size], np.uint8), n)


def test_fills_at_every_phase_touch_only_their_bytes(kernel_settings: str) -> None:
    dtypes = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}
    values = {1: 0xA5, 2: 0xBEEF, 4: 0x01020304, 8: 0x1122334455667788}
    for size, dtype in dtypes.items():
        regions = []
        at = 64
        for phase in range(0, 32, size):
            for n in LENGTHS:
                regions.append((at + phase, n))
                at = (at + phase + n * size + 32 + 63) // 64 * 64
        buf = mpsrt.empty(at + 64, dtype="uint8")
        ref = np.full(at + 64, 0xCC, np.uint8)
        buf.copy_(ref)  # host writes and reads through copies: both memory models
        for off, n in regions:
            buf.view(off, n, dtype=dtype).fill_(values[size])
            ref[off : off + n * size] = _ref_pattern(values[size], size, n * size)
        mpsrt.synchronize()
        raw = buf.numpy()
        assert np.array_equal(raw, ref), (size, np.nonzero(raw != ref)[0][:8])


def test_copies_at_every_alignment_pair(kernel_settings: str) -> None:
    lengths = [1, 3, 4, 5, 16, 17, 33, 64, 100, 4099]
    span = sum(((16 + n + 63) // 64 + 1) * 64 for n in lengths) * 256 + 64
    src = mpsrt.empty(span, dtype="uint8")
    src.copy_(np.random.default_rng(1).integers(0, 256, span, dtype=np.uint8))
    for one_buffer in (False, True):
        # Inside one buffer: sources in the first half, destinations in the second.
        dst = mpsrt.empty(span, dtype="uint8") if not one_buffer else None
        whole = mpsrt.empty(2 * span, dtype="uint8") if one_buffer else None
        if whole is not None:
            whole.view(0, span).copy_(src)
            s_buf, d_buf, d_base = whole, whole, span
        else:
            assert dst is not None
            s_buf, d_buf, d_base = src, dst, 0
        d_buf.view(d_base, span).fill_(0xCC)
        mpsrt.synchronize()
        ref = d_buf.numpy().copy()
        s_raw = s_buf.numpy().copy()
        s = d = 64
        for sp in range(16):
            for dp in range(16):
                for n in lengths:
                    d_buf.view(d_base + d + dp, n).copy_(s_buf.view(s + sp, n))
                    ref[d_base + d + dp : d_base + d + dp + n] = s_raw[s + sp : s + sp + n]
                    s = (s + sp + n + 63) // 64 * 64
                    d = (d + dp + n + 16 + 63) // 64 * 64
        mpsrt.synchronize()
        got = d_buf.numpy()
        assert np.array_equal(got, ref), (one_buffer, np.nonzero(got != ref)[0][:8])


def test_overlapping_copies_between_views(kernel_settings: str) -> None:
    n_total = 3 << 20
    buf = mpsrt.empty(n_total, dtype="uint8")
    ref = np.random.default_rng(2).integers(0, 256, n_total, dtype=np.uint8)
    buf.copy_(ref)
    at = 1024
    for n in (1, 6, 16, 19, 77, 5000):
        for shift in (*range(-20, 0), *range(1, 21), 64, -64, 1001):
            s, d = at + 100, at + 100 + shift
            buf.view(d, n).copy_(buf.view(s, n))
            ref[d : d + n] = ref[s : s + n].copy()
            at += n + 2200
    s, d = at + 3, at + 3 + 12  # agree mod 4, 1 MiB: several scratch-sized steps on vulkan
    buf.view(d, 1 << 20).copy_(buf.view(s, 1 << 20))
    ref[d : d + (1 << 20)] = ref[s : s + (1 << 20)].copy()
    mpsrt.synchronize()
    raw = buf.numpy()
    assert np.array_equal(raw, ref), np.nonzero(raw != ref)[0][:8]


@pytest.mark.parametrize(
    ("op", "dtype"),
    [
        ("uniform", "float32"),
        ("uniform", "float16"),
        ("uniform", "float64"),
        ("normal", "float32"),
        ("normal", "float64"),
        ("int", "int64"),
        ("int", "uint8"),
        ("int", "int16"),
        ("bernoulli", "bool"),
    ],
)
def test_random_fills_of_views_equal_fresh_buffers(
    kernel_settings: str, op: str, dtype: str
) -> None:
    """A view at every element phase of a 32-byte boundary gets the elements a fresh (aligned)
    Buffer gets from the same generator state, and its neighbours keep their bytes."""
    size = np.dtype(dtype).itemsize

    def draw(b: mpsrt.Buffer, g: mpsrt.Generator) -> None:
        if op == "uniform":
            b.uniform_(-2.0, 3.0, generator=g)
        elif op == "normal":
            b.normal_(1.0, 2.0, generator=g)
        elif op == "int" and dtype == "uint8":
            b.random_(generator=g)
        elif op == "int":
            b.random_(-5, 100, generator=g)
        else:
            b.bernoulli_(0.3, generator=g)

    buf = mpsrt.empty(1 << 16, dtype="uint8")
    expect = np.full(1 << 16, 0xCC, np.uint8)
    buf.copy_(expect)
    at = 64
    for phase in range(0, 32, size):
        for n in (1, 2, 3, 4, 5, 7, 9, 17, 33, 301):
            seed = 1000 * phase + n
            view = buf.view(at + phase, n, dtype=dtype)
            draw(view, mpsrt.Generator().manual_seed(seed))
            fresh = mpsrt.empty(n, dtype=dtype)
            draw(fresh, mpsrt.Generator().manual_seed(seed))
            expect[at + phase : at + phase + n * size] = fresh.numpy().view(np.uint8)
            at = (at + phase + n * size + 32 + 63) // 64 * 64
    mpsrt.synchronize()
    raw = buf.numpy()
    assert np.array_equal(raw, expect), np.nonzero(raw != expect)[0][:8]
