"""Philox random numbers through the public API: known answers, agreement with randomgen,
statistics, state handling, independence from threads/ISA/streams, bad inputs."""

from __future__ import annotations

import threading

import mpsrt
import numpy as np
import pytest
from conftest import run_python

KAT0 = [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]  # Random123: ctr 0, key 0


def _gen(seed: int, offset: int = 0) -> mpsrt.Generator:
    g = mpsrt.Generator().manual_seed(seed)
    g.set_offset(offset)
    return g


def _randomgen(seed: int, offset: int):
    randomgen = pytest.importorskip("randomgen")
    # randomgen's Philox increments its counter before each block: start one below.
    return randomgen.Philox(counter=(offset - 1) % (1 << 128), key=seed, number=4, width=32)


def test_known_answer_through_the_public_api() -> None:
    mpsrt.manual_seed(0)
    assert mpsrt.random_bits(4).numpy().tolist() == KAT0
    assert mpsrt.default_generator().get_offset() == 1
    g = _gen(0)
    assert mpsrt.random_bits(8, generator=g).numpy().tolist()[:4] == KAT0
    assert g.get_offset() == 2


@pytest.mark.parametrize(
    ("seed", "offset", "n"),
    [(0, 0, 1), (1, 0, 7), (42, 3, 1000), (0xDEADBEEF_12345678, 2**32 - 2, 4099), (7, 10, 64)],
)
def test_raw_words_equal_randomgen(seed: int, offset: int, n: int) -> None:
    bg = _randomgen(seed, offset)
    ours = mpsrt.random_bits(n, generator=_gen(seed, offset)).numpy()
    theirs = bg.random_raw(n).astype(np.uint32)
    assert np.array_equal(ours, theirs)


@pytest.mark.parametrize(("seed", "offset", "n"), [(5, 0, 4096), (123, 77, 1001)])
def test_float32_uniform_equals_randomgen(seed: int, offset: int, n: int) -> None:
    bg = _randomgen(seed, offset)
    theirs = np.random.Generator(bg).random(n, dtype=np.float32)
    ours = mpsrt.rand(n, generator=_gen(seed, offset)).numpy()
    assert np.array_equal(ours, theirs)


def test_offsets_advance_by_blocks_used() -> None:
    g = _gen(9)
    mpsrt.rand(5, generator=g)  # 5 words -> 2 blocks
    assert g.get_offset() == 2
    mpsrt.rand(3, dtype="float64", generator=g)  # 6 words -> 2 blocks
    assert g.get_offset() == 4
    mpsrt.randn(3, generator=g)  # 4 words (pairs) -> 1 block
    assert g.get_offset() == 5
    mpsrt.randint(0, 2**40, (3,), generator=g)  # 6 words -> 2 blocks
    assert g.get_offset() == 7


def _chi2_uniform(x: np.ndarray, lo: float, hi: float, bins: int = 50) -> float:
    """Chi-square of x against a uniform law on [lo, hi) over `bins` equal bins."""
    counts, _ = np.histogram(x, bins=bins, range=(lo, hi))
    expected = len(x) / bins
    return float(((counts - expected) ** 2 / expected).sum())


# Critical chi-square values at p = 1e-6 (a failure is a real bug, not bad luck).
CHI2_49 = 113.0  # 49 degrees of freedom
CHI2_31 = 75.0  # 31 degrees of freedom
N = 200_000


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_uniform_statistics(dtype: str) -> None:
    b = mpsrt.rand(N, dtype=dtype, generator=_gen(11))
    x = _host_float(b)
    assert x.min() >= 0.0 and x.max() < 1.0
    assert abs(x.mean() - 0.5) < 0.005
    assert abs(x.var() - 1 / 12) < 0.002
    # 32 bins: a whole number of the 256 (bfloat16) or 2048 (float16) values in each
    assert _chi2_uniform(x, 0.0, 1.0, bins=32) < CHI2_31
    y = _host_float(mpsrt.empty(N, dtype).uniform_(-3.0, 5.0, generator=_gen(12)))
    assert y.min() >= -3.0 and y.max() <= 5.0
    assert abs(y.mean() - 1.0) < 0.05


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_normal_statistics(dtype: str) -> None:
    x = _host_float(mpsrt.randn(N, dtype=dtype, generator=_gen(13)))
    assert abs(x.mean()) < 0.01
    assert abs(x.var() - 1.0) < 0.02
    # Chi-square on the normal CDF of each value (uniform if the values are normal).
    from math import erf, sqrt

    u = np.array([0.5 * (1 + erf(v / sqrt(2))) for v in x[:50_000]])
    assert _chi2_uniform(u, 0.0, 1.0) < CHI2_49 * (1.5 if dtype in ("float16", "bfloat16") else 1)
    y = _host_float(mpsrt.empty(N, dtype).normal_(10.0, 2.0, generator=_gen(14)))
    assert abs(y.mean() - 10.0) < 0.05 and abs(y.std() - 2.0) < 0.05


@pytest.mark.parametrize(
    ("dtype", "low", "high"),
    [
        ("uint8", 0, 256),
        ("uint8", 3, 10),
        ("int32", -5, 45),
        ("int64", -(2**40), 2**40 + 7),
        ("int64", 0, 50),
        ("int32", -(2**31), 2**31),
    ],
)
def test_randint_statistics(dtype: str, low: int, high: int) -> None:
    x = mpsrt.randint(low, high, (N,), dtype=dtype, generator=_gen(15)).numpy().astype(np.float64)
    assert x.min() >= low and x.max() < high
    span = high - low
    assert abs(x.mean() - (low + (span - 1) / 2)) < 0.01 * span
    bins = min(50, span)
    width = span // bins  # whole integers per bin; values past bins * width are left out
    counts, _ = np.histogram(x, bins=bins, range=(low - 0.5, low - 0.5 + bins * width))
    expected = counts.sum() / bins
    assert float(((counts - expected) ** 2 / expected).sum()) < CHI2_49


@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "float16", "bfloat16", "uint8", "int32", "int64", "bool"]
)
def test_bernoulli_statistics(dtype: str) -> None:
    b = mpsrt.bernoulli(0.3, (N,), dtype=dtype, generator=_gen(16))
    x = _host_float(b)
    assert set(np.unique(x).tolist()) <= {0.0, 1.0}
    assert abs(x.mean() - 0.3) < 0.005
    assert _host_float(mpsrt.bernoulli(0.0, (100,), dtype=dtype)).sum() == 0
    assert _host_float(mpsrt.bernoulli(1.0, (100,), dtype=dtype)).sum() == 100


def _host_float(b: mpsrt.Buffer) -> np.ndarray:
    if b.dtype == "bfloat16":
        bits = b._raw().view("<u2").astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64)
    return b.numpy().astype(np.float64)


def test_seeds_and_state() -> None:
    mpsrt.manual_seed(42)
    a = mpsrt.rand(1000).numpy()
    mpsrt.manual_seed(42)
    assert np.array_equal(a, mpsrt.rand(1000).numpy())
    mpsrt.manual_seed(43)
    assert not np.array_equal(a, mpsrt.rand(1000).numpy())
    assert mpsrt.initial_seed() == 43
    mpsrt.manual_seed(-1)  # negative seeds wrap, as torch
    assert mpsrt.initial_seed() == 2**64 - 1
    mpsrt.manual_seed(0x0102030405060708)
    mpsrt.rand(10)  # 3 blocks
    s = mpsrt.get_rng_state()
    assert s.dtype == np.uint8 and s.shape == (44,)
    words = s[:28].view("<u4")
    assert words[0] == 1
    assert words[5] == 0x05060708 and words[6] == 0x01020304
    assert int(s[28:36].view("<u8")[0]) == 0x0102030405060708
    assert int(s[36:44].view("<u8")[0]) == 3
    # [1..4]: the last Philox output block (block 2 of this seed)
    g = _gen(0x0102030405060708, 2)
    assert np.array_equal(words[1:5], mpsrt.random_bits(4, generator=g).numpy())
    nxt = mpsrt.rand(100).numpy()
    mpsrt.set_rng_state(s)
    assert np.array_equal(nxt, mpsrt.rand(100).numpy())
    mpsrt.set_rng_state(bytes(s))
    assert np.array_equal(nxt, mpsrt.rand(100).numpy())
    mpsrt.seed()
    assert mpsrt.initial_seed() != 0x0102030405060708


def test_state_across_processes(backend: str) -> None:
    mpsrt.manual_seed(2024)
    mpsrt.randn(17)
    state = bytes(mpsrt.get_rng_state()).hex()
    here = mpsrt.rand(64).numpy()
    r = run_python(
        "import mpsrt, numpy as np\n"
        f"mpsrt.set_rng_state(bytes.fromhex('{state}'))\n"
        "print(mpsrt.rand(64).numpy().tobytes().hex())",
        backend=backend,
    )
    assert r.returncode == 0, r.stderr
    assert np.array_equal(np.frombuffer(bytes.fromhex(r.stdout.strip()), np.float32), here)


def test_state_all_and_generators(runtime_env) -> None:
    with runtime_env(MPSRT_CPU_DEVICES=2):
        n = mpsrt.device_count()
        mpsrt.manual_seed_all(7)
        states = mpsrt.get_rng_state_all()
        assert len(states) == n
        assert all(int(st[28:36].view("<u8")[0]) == 7 for st in states)
        mpsrt.seed_all()
        mpsrt.set_rng_state_all(states)
        assert all(np.array_equal(a, b) for a, b in zip(states, mpsrt.get_rng_state_all()))
        g = mpsrt.Generator()
        assert g.manual_seed(5) is g and g.initial_seed() == 5 and g.get_offset() == 0
        g.set_offset(9)
        st = g.get_state()
        g2 = mpsrt.Generator()
        g2.set_state(st)
        assert g2.initial_seed() == 5 and g2.get_offset() == 9
        assert isinstance(g.seed(), int)


def test_results_do_not_depend_on_threads_isa_or_stream(runtime_env) -> None:
    def draw() -> list[np.ndarray]:
        g = _gen(99, 5)
        out = [mpsrt.random_bits(3_000_001, generator=g).numpy().copy()]
        out.append(mpsrt.rand(1_000_003, generator=g).numpy().copy())
        out.append(_host_float(mpsrt.rand(1001, dtype="bfloat16", generator=g)))
        out.append(mpsrt.randint(-7, 2**35, (999,), generator=g).numpy().copy())
        out.append(mpsrt.randn(2_000_001, generator=g).numpy().copy())
        s = mpsrt.Stream()
        with mpsrt.stream(s):
            out.append(mpsrt.rand(5000, dtype="float64", generator=g).numpy().copy())
        return out

    ref = draw()
    settings = [{"MPSRT_CPU_THREADS": 1}, {"MPSRT_CPU_THREADS": 2}]
    if mpsrt.backend() == "cpu":
        settings += [{"MPSRT_CPU_ISA": "scalar"}, {"MPSRT_CPU_ISA": "avx2"}]
    for env in settings:
        try:
            with runtime_env(**env):
                got = draw()
        except ValueError as e:  # an instruction set this CPU lacks
            assert "not supported" in str(e)
            continue
        for i, (a, b) in enumerate(zip(ref, got)):
            if i == 4:  # normal: libm may differ, within 2 ulp of float32
                np.testing.assert_array_max_ulp(a, b, maxulp=2)
            else:
                assert np.array_equal(a, b), (env, i)


def test_concurrent_threads_never_overlap() -> None:
    g = _gen(31)
    results: list[np.ndarray] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(20):
            b = mpsrt.random_bits(100, generator=g)
            with lock:
                results.append(b.numpy().copy())

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert g.get_offset() == 4 * 20 * 25
    everything = np.sort(np.concatenate(results))
    serial = np.sort(mpsrt.random_bits(4 * 20 * 100, generator=_gen(31)).numpy())
    assert np.array_equal(everything, serial)


def test_in_place_methods_and_streams() -> None:
    b = mpsrt.empty(1000, "float32")
    assert b.uniform_(2.0, 3.0, generator=_gen(1)) is b
    assert ((b.numpy() >= 2.0) & (b.numpy() < 3.0)).all()
    i = mpsrt.empty(1000, "int32").random_(0, 10, generator=_gen(2)).numpy()
    assert i.min() >= 0 and i.max() <= 9
    u = mpsrt.empty(1000, "uint8").random_(generator=_gen(3)).numpy()
    assert u.max() > 200
    s = mpsrt.Stream()
    x = mpsrt.rand(100, generator=_gen(4), stream=s).numpy()
    assert np.array_equal(x, mpsrt.rand(100, generator=_gen(4)).numpy())


@pytest.mark.parametrize(
    ("call", "exc", "pattern"),
    [
        (lambda: mpsrt.set_rng_state(np.zeros(43, np.uint8)), ValueError, "44 bytes, got 43"),
        (lambda: mpsrt.set_rng_state(b"x" * 45), ValueError, "44 bytes, got 45"),
        (lambda: mpsrt.set_rng_state(np.zeros(44, np.int32)), TypeError, "uint8"),
        (lambda: mpsrt.set_rng_state([0] * 44), TypeError, "got list"),
        (lambda: mpsrt.set_rng_state("0" * 44), TypeError, "got str"),
        (lambda: mpsrt.manual_seed("1"), TypeError, "int seed"),
        (lambda: mpsrt.manual_seed(1.5), TypeError, "int seed"),
        (lambda: mpsrt.manual_seed(2**64), ValueError, "out of range"),
        (lambda: mpsrt.rand(4, dtype="int32"), TypeError, "floating-point"),
        (lambda: mpsrt.randn(4, dtype="uint8"), TypeError, "floating-point"),
        (lambda: mpsrt.randint(5, 5, (3,)), ValueError, "low < high"),
        (lambda: mpsrt.randint(0, 300, (3,), dtype="uint8"), ValueError, "does not fit"),
        (lambda: mpsrt.randint(0, 3), TypeError, "missing the size"),
        (lambda: mpsrt.bernoulli(1.5, (3,)), ValueError, r"p must be in \[0, 1\]"),
        (lambda: mpsrt.bernoulli(float("nan"), (3,)), ValueError, "finite"),
        (lambda: mpsrt.empty(3, "float32").uniform_(2.0, 1.0), ValueError, "low <= high"),
        (lambda: mpsrt.empty(3, "float32").normal_(0.0, -1.0), ValueError, "std must be >= 0"),
        (lambda: mpsrt.empty(3, "float32").uniform_(float("inf")), ValueError, "finite"),
        (lambda: mpsrt.rand(3, generator=object()), TypeError, "mpsrt.Generator"),
        (lambda: mpsrt.rand(), TypeError, "missing the size"),
    ],
)
def test_bad_inputs(call, exc: type, pattern: str) -> None:
    before = mpsrt.get_rng_state()
    with pytest.raises(exc, match=pattern):
        call()
    assert np.array_equal(before, mpsrt.get_rng_state())  # nothing drawn
    mpsrt.rand(4)  # and still usable


def test_torch_byte_tensor_state() -> None:
    torch = pytest.importorskip("torch")
    mpsrt.manual_seed(3)
    st = torch.from_numpy(mpsrt.get_rng_state().copy())
    a = mpsrt.rand(10).numpy()
    mpsrt.set_rng_state(st)
    assert np.array_equal(a, mpsrt.rand(10).numpy())
    with pytest.raises(TypeError, match="uint8"):
        mpsrt.set_rng_state(st.to(torch.int32))
