"""Philox random numbers through the public API: known answers, agreement with randomgen,
statistics, state handling, independence from threads/ISA/streams, bad inputs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

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


def test_rng_state_offset_private_pair_is_torch_cudas(runtime_env) -> None:
    # torch.cuda's _get_rng_state_offset / _set_rng_state_offset (test_cuda_multigpu's
    # test_rng_state_offset): the offset set is the offset read, per device, and the state
    # restored afterwards takes the old offset back.
    with runtime_env(MPSRT_CPU_DEVICES=2):
        before = mpsrt.get_rng_state()
        mpsrt._set_rng_state_offset(100)
        assert mpsrt._get_rng_state_offset() == 100
        assert int(mpsrt.get_rng_state()[36:44].view("<u8")[0]) == 100
        mpsrt.set_rng_state(before)
        assert mpsrt._get_rng_state_offset() == int(before[36:44].view("<u8")[0])
        last = mpsrt.device_count() - 1
        mpsrt.manual_seed_all(3)
        mpsrt._set_rng_state_offset(5, f"mps:{last}")
        assert mpsrt._get_rng_state_offset(last) == 5
        if last != 0:
            assert mpsrt._get_rng_state_offset(0) == 0  # only the named device moved
        # The offset picks the Philox blocks: back to 0, the same numbers again.
        mpsrt.manual_seed(11)
        a = mpsrt.rand(40).numpy().copy()  # a copy: no view keeps the Buffer alive
        assert mpsrt._get_rng_state_offset() == 10
        mpsrt._set_rng_state_offset(0)
        assert np.array_equal(mpsrt.rand(40).numpy(), a)
        with pytest.raises(ValueError, match=r"out of range \[0, 2\*\*64\)"):
            mpsrt._set_rng_state_offset(-1)
        with pytest.raises(TypeError, match="expected an int"):
            mpsrt._set_rng_state_offset(1.5)
        with pytest.raises(ValueError):
            mpsrt._get_rng_state_offset(mpsrt.device_count())
        assert mpsrt._get_rng_state_offset() == 10  # a refused call changed nothing


def _draws_under_every_setting(
    runtime_env: Any, draw: Callable[[], list[Any]]
) -> Iterator[tuple[dict[str, int | str], list[Any]]]:
    """(env, draw()) in a runtime re-created with 1 and 2 threads and, on cpu, each instruction
    set this CPU has (one it lacks is skipped after checking the refusal says so)."""
    settings: list[dict[str, int | str]] = [{"MPSRT_CPU_THREADS": 1}, {"MPSRT_CPU_THREADS": 2}]
    if mpsrt.backend() == "cpu":
        settings += [{"MPSRT_CPU_ISA": "scalar"}, {"MPSRT_CPU_ISA": "avx2"}]
    for env in settings:
        try:
            with runtime_env(**env):
                got = draw()
        except ValueError as e:  # an instruction set this CPU lacks
            assert "not supported" in str(e)
            continue
        yield env, got


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
    for env, got in _draws_under_every_setting(runtime_env, draw):
        for i, (a, b) in enumerate(zip(ref, got)):
            if i == 4 and mpsrt.backend() != "cpu":  # normal: within 2 ulp of float32
                np.testing.assert_array_max_ulp(a, b, maxulp=2)
            else:  # the cpu tables compute normal with one algorithm: the same bits
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


# =========================================================================== random: every dtype
# numbers on every dtype torch allows, Generator.clone_state. Each exact test computes the
# expected values from the Philox words (randomgen) with the mapping of docs/random.md ("Random
# numbers"), so it checks every backend bit for bit.

ALL_DTYPES = [
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
]
FLOAT_DIGITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
# torch.Tensor.random_()'s range [0, high) per dtype (DistributionTemplates.h: floats
# [0, 2**digits], integers [0, max], bool [0, 1]).
DEFAULT_HIGH = {
    "bool": 2,
    "uint8": 2**8,
    "int8": 2**7,
    "int16": 2**15,
    "int32": 2**31,
    "int64": 2**63,
    "uint16": 2**16,
    "uint32": 2**32,
    "uint64": 2**63,
    **{d: 2**k + 1 for d, k in FLOAT_DIGITS.items()},
}


def _words(seed: int, offset: int, n: int) -> np.ndarray:
    return _randomgen(seed, offset).random_raw(n).astype(np.uint64)


def _ref_ints(seed: int, offset: int, n: int, low: int, high: int) -> list[int]:
    """low + w % r (r <= 2**32, one word each) or low + ((hi << 32) | lo) % r (two words)."""
    r = high - low
    if r <= 2**32:
        x = [int(w) % r for w in _words(seed, offset, n)]
    else:
        w = _words(seed, offset, 2 * n)
        x = [((int(hi) << 32) | int(lo)) % r for lo, hi in zip(w[0::2], w[1::2])]
    return [low + v for v in x]


def _values(b: mpsrt.Buffer) -> list:
    """The Buffer's elements as Python numbers (bool as 0/1, bfloat16 through its bits)."""
    if b.dtype == "bfloat16":
        return _host_float(b).tolist()
    if b.dtype == "bool":
        return b.numpy().astype(np.int64).tolist()
    return b.numpy().tolist()


def _torch_accepts(op: str, dtype: str) -> bool:
    torch = pytest.importorskip("torch")
    t = torch.zeros(4, dtype=getattr(torch, dtype))
    calls = {
        "int": lambda: t.random_(0, 2),
        "bernoulli": lambda: t.bernoulli_(0.5),
        "uniform": lambda: t.uniform_(),
        "normal": lambda: t.normal_(),
    }
    try:
        calls[op]()
    except (NotImplementedError, RuntimeError, TypeError):
        return False
    return True


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("op", ["int", "bernoulli", "uniform", "normal"])
def test_dtype_rules_are_torchs(op: str, dtype: str) -> None:
    """mpsrt::random_supported (the core's one rule) accepts exactly what torch accepts, and a
    refused dtype raises torch's NotImplementedError (still a TypeError, as before)."""
    ok = _torch_accepts(op, dtype)
    assert mpsrt._C._random_supported(op, dtype) == ok
    b = mpsrt.empty(8, dtype)
    call = {
        "int": lambda: b.random_(0, 2, generator=_gen(1)),
        "bernoulli": lambda: b.bernoulli_(0.5, generator=_gen(1)),
        "uniform": lambda: b.uniform_(generator=_gen(1)),
        "normal": lambda: b.normal_(generator=_gen(1)),
    }[op]
    if ok:
        assert call() is b
    else:
        before = mpsrt.get_rng_state()
        with pytest.raises(NotImplementedError, match=f"write {dtype}|got {dtype}"):
            call()
        with pytest.raises(TypeError):
            call()
        assert np.array_equal(before, mpsrt.get_rng_state())


BERNOULLI_DTYPES = [d for d in ALL_DTYPES if d not in ("uint16", "uint32", "uint64")]


@pytest.mark.parametrize("dtype", BERNOULLI_DTYPES)
def test_bernoulli_every_dtype_exact(dtype: str) -> None:
    """Element j = 1 when word j < ceil(p * 2**32), else 0, as the dtype's 1 and 0."""
    seed, offset, n, p = 0xC0FFEE, 5, 1003, 0.37
    b = mpsrt.bernoulli(p, (n,), dtype=dtype, generator=_gen(seed, offset))
    t = int(np.ceil(p * 2**32))
    want = [1 if int(w) < t else 0 for w in _words(seed, offset, n)]
    assert _values(b) == want
    if dtype in ("int8", "int16"):  # the bytes: exactly 1 or 0 per element, nothing else
        assert b._raw().tobytes() == np.array(want, dtype=dtype).tobytes()


@pytest.mark.parametrize("dtype", ["int8", "int16"])
def test_bernoulli_int8_int16_statistics(dtype: str) -> None:
    x = _host_float(mpsrt.bernoulli(0.3, (N,), dtype=dtype, generator=_gen(16)))
    assert set(np.unique(x).tolist()) == {0.0, 1.0}
    assert abs(x.mean() - 0.3) < 0.005  # sd of the mean ~0.001: 5 sigma
    buf = mpsrt.empty(100, dtype)
    assert _host_float(buf.bernoulli_(0.0)).sum() == 0
    assert _host_float(buf.bernoulli_(1.0)).sum() == 100


RANDOM_CASES = [
    # (dtype, low, high): high None is random_()'s default (torch's range)
    ("float16", 0, None),
    ("float16", -2048, 2049),
    ("bfloat16", 0, None),
    ("bfloat16", -256, 257),
    ("float32", 0, None),
    ("float32", -7, 20),
    ("float32", -(2**24), 2**24 + 1),
    ("float64", 0, None),  # [0, 2**53]: two words per value
    ("float64", -1000, 3000),
    ("bool", 0, None),
    ("bool", 0, 2),
    ("bool", 1, 2),
    ("int8", 0, None),
    ("int8", -128, 128),
    ("int8", -5, 6),
    ("int16", 0, None),
    ("int16", -32768, 32768),
    ("uint16", 0, 65536),
    ("uint32", 0, 2**32),
    ("uint32", 10, None),
    ("uint64", 0, None),  # [0, 2**63): two words per value
    ("uint64", 2**40, 2**40 + 9),
]


@pytest.mark.parametrize(("dtype", "low", "high"), RANDOM_CASES)
def test_random_every_dtype_exact(dtype: str, low: int, high: int | None) -> None:
    """Element j = low + w_j % (high - low) written as the dtype (exact for floats, != 0 for
    bool); the generator advances by the blocks the words used."""
    seed, offset, n = 0x5EED_0016, 3, 1001
    g = _gen(seed, offset)
    b = mpsrt.empty(n, dtype).random_(low, high, generator=g)
    hi = DEFAULT_HIGH[dtype] if high is None else high
    want = _ref_ints(seed, offset, n, low, hi)
    if dtype == "bool":
        want = [int(v != 0) for v in want]
    got = _values(b)
    assert [float(v) for v in got] == [float(v) for v in want]
    if dtype not in FLOAT_DIGITS:
        assert got == want
    words = n if hi - low <= 2**32 else 2 * n
    assert g.get_offset() == offset + (words + 3) // 4


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "bool"])
def test_randint_dtypes_exact(dtype: str) -> None:
    """torch.randint(low, high, size, dtype=...) for float and bool dtypes: same mapping."""
    low, high = (0, 2) if dtype == "bool" else (-50, 77)
    b = mpsrt.randint(low, high, (999,), dtype=dtype, generator=_gen(77, 1))
    want = _ref_ints(77, 1, 999, low, high)
    if dtype == "bool":
        want = [int(v != 0) for v in want]
    assert [float(v) for v in _values(b)] == [float(v) for v in want]
    b2 = mpsrt.randint(high, (999,), dtype=dtype, generator=_gen(77, 1))  # randint(high, size)
    b3 = mpsrt.randint(0, high, (999,), dtype=dtype, generator=_gen(77, 1))
    assert _values(b2) == _values(b3)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8", "bool"])
def test_random_default_range_statistics(dtype: str) -> None:
    """random_() on a small dtype covers torch's whole range [0, high) uniformly."""
    hi = DEFAULT_HIGH[dtype]
    x = np.array(_values(mpsrt.empty(N, dtype).random_(generator=_gen(21))), dtype=np.float64)
    assert x.min() == 0 and x.max() == hi - 1  # both ends are drawn
    assert len(np.unique(x)) == hi  # every value: 2049 for float16, 257 for bfloat16
    counts = np.bincount(x.astype(np.int64), minlength=hi)
    expected = N / hi
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # p = 1e-6 critical value of chi-square with hi - 1 degrees of freedom (Wilson-Hilferty)
    k = hi - 1
    crit = k * (1 - 2 / (9 * k) + 4.753 * np.sqrt(2 / (9 * k))) ** 3
    assert chi2 < crit


@pytest.mark.parametrize(("dtype", "high"), [("float32", 2**24 + 1), ("float64", 2**53 + 1)])
def test_random_default_range_wide_floats(dtype: str, high: int) -> None:
    x = np.array(_values(mpsrt.empty(N, dtype).random_(generator=_gen(22))), dtype=np.float64)
    assert x.min() >= 0 and x.max() <= high - 1
    assert np.array_equal(x, np.floor(x))  # integers only
    assert abs(x.mean() / (high - 1) - 0.5) < 0.005  # sd ~0.00065 of the scaled mean
    assert abs(x.var() / (high - 1) ** 2 - 1 / 12) < 0.002
    assert x.max() > 0.999 * (high - 1)  # the top of the range is reached


@pytest.mark.parametrize(
    ("dtype", "low", "high", "msg"),
    [
        ("float16", 0, 2**11 + 2, r"\[0, 2050\) does not fit in float16 \(\[-2048, 2049\)\)"),
        ("bfloat16", -257, 0, "does not fit in bfloat16"),
        ("float32", 0, 2**24 + 2, "does not fit in float32"),
        ("float64", -(2**53) - 1, 0, "does not fit in float64"),
        ("bool", 0, 3, r"\[0, 3\) does not fit in bool \(\[0, 2\)\)"),
        ("bool", -1, 1, "does not fit in bool"),
        ("int8", -129, 0, r"does not fit in int8 \(\[-128, 128\)\)"),
        ("int16", 0, 2**15 + 1, "does not fit in int16"),
        ("uint16", -1, 5, "does not fit in uint16"),
        ("uint64", 0, 2**63 + 1, "does not fit in uint64"),
        ("float32", 5, 5, "expected low < high"),
    ],
)
def test_random_new_dtypes_bad_ranges(dtype: str, low: int, high: int, msg: str) -> None:
    """Ranges past a dtype's exact integers are ValueErrors (torch raises for from/to outside
    the dtype, and only warns past 2**digits: mpsrt refuses, so every value is exact)."""
    before = mpsrt.get_rng_state()
    with pytest.raises(ValueError, match=msg):
        mpsrt.empty(4, dtype).random_(low, high)
    with pytest.raises(ValueError, match=msg):
        mpsrt.randint(low, high, (4,), dtype=dtype)
    assert np.array_equal(before, mpsrt.get_rng_state())


def test_new_dtypes_do_not_depend_on_threads_isa_or_stream(runtime_env) -> None:
    def draw() -> list[bytes]:
        g = _gen(0xABCDEF, 9)
        out = [mpsrt.bernoulli(0.4, (70_001,), dtype="int8", generator=g)]
        out.append(mpsrt.bernoulli(0.6, (30_003,), dtype="int16", generator=g))
        out.append(mpsrt.empty(50_001, "float16").random_(-2048, 2049, generator=g))
        out.append(mpsrt.empty(20_001, "float64").random_(generator=g))  # two words
        out.append(mpsrt.empty(40_003, "bool").random_(generator=g))
        out.append(mpsrt.randint(-3, 1000, (60_007,), dtype="int16", generator=g))
        out.append(mpsrt.randint(0, 2**63, (9_999,), dtype="uint64", generator=g))
        s = mpsrt.Stream()
        with mpsrt.stream(s):
            out.append(mpsrt.randint(-99, 99, (5_001,), dtype="bfloat16", generator=g))
        return [b._raw().tobytes() for b in out]

    ref = draw()
    for env, got in _draws_under_every_setting(runtime_env, draw):
        for i, (a, b) in enumerate(zip(ref, got)):
            assert a == b, (env, i)


def test_normal_is_bit_identical_across_isas_and_threads(runtime_env) -> None:
    """normal_ in every dtype, with and without mean / std, odd first elements through odd
    sizes: the scalar, AVX2 and AVX-512 tables and thread counts give the same bits."""

    def draw() -> list[bytes]:
        g = _gen(0x5EED, 3)
        out = []
        for dtype in ("float32", "float64", "float16", "bfloat16"):
            out.append(mpsrt.randn(200_001, dtype=dtype, generator=g))
            out.append(mpsrt.empty(4_099, dtype).normal_(-1.5, 3.25, generator=g))
        return [b._raw().tobytes() for b in out]

    ref = draw()
    for env, got in _draws_under_every_setting(runtime_env, draw):
        for i, (a, b) in enumerate(zip(ref, got)):
            if mpsrt.backend() == "cpu":
                assert a == b, (env, i)


def test_generator_clone_state() -> None:
    """torch.Generator.clone_state(): a new Generator with a copy of the state."""
    g = _gen(1234, 17)
    mpsrt.rand(10, generator=g)
    c = g.clone_state()
    assert isinstance(c, mpsrt.Generator) and c is not g
    assert c.device == g.device
    assert c.initial_seed() == 1234 and c.get_offset() == g.get_offset() == 20
    assert np.array_equal(c.get_state(), g.get_state())
    a = mpsrt.random_bits(100, generator=g).numpy()
    b = mpsrt.random_bits(100, generator=c).numpy()
    assert np.array_equal(a, b)  # the same numbers from the same state
    mpsrt.rand(8, generator=c)  # the clone advances on its own
    assert c.get_offset() == 20 + 25 + 2 and g.get_offset() == 20 + 25
    c.manual_seed(5)
    assert g.initial_seed() == 1234
    # the default generator: a clone of it is a snapshot, not the default itself
    mpsrt.manual_seed(42)
    snap = mpsrt.default_generator().clone_state()
    first = mpsrt.rand(16).numpy()
    assert np.array_equal(first, mpsrt.rand(16, generator=snap).numpy())
    assert mpsrt.default_generator().get_offset() == 4 and snap.get_offset() == 4
    with pytest.raises(TypeError, match=r"expected an mpsrt\.Generator"):
        mpsrt.Generator.clone_state(object())


def test_generator_graphsafe_state_is_not_supported() -> None:
    """mpsrt has no graph capture: graphsafe_get_state / graphsafe_set_state raise torch's
    NotImplementedError (as torch's generators without graph support do) and change nothing."""
    g = _gen(3, 2)
    st = g.get_state()
    with pytest.raises(NotImplementedError, match="graphsafe_get_state is not supported"):
        g.graphsafe_get_state()
    with pytest.raises(NotImplementedError, match="graphsafe_set_state is not supported"):
        g.graphsafe_set_state(g.clone_state())
    assert np.array_equal(st, g.get_state())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8", "uint8", "bool"])
def test_default_high_is_torchs(dtype: str) -> None:
    """random_()'s default range is the one torch draws from: its largest value is reached by
    torch on a large tensor, and it is mpsrt's (core's) default high - 1."""
    torch = pytest.importorskip("torch")
    t = torch.empty(N, dtype=getattr(torch, dtype)).random_(
        generator=torch.Generator().manual_seed(0)
    )
    torch_max = int(t.to(torch.float64).max().item())
    assert int(t.to(torch.float64).min().item()) == 0
    assert mpsrt._C._random_int_bounds(dtype)[1] - 1 == torch_max == DEFAULT_HIGH[dtype] - 1
    x = np.array(_values(mpsrt.empty(N, dtype).random_(generator=_gen(5))), dtype=np.float64)
    assert x.max() == torch_max and x.min() == 0
