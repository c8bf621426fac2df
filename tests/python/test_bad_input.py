"""Bad input to every public function (API.md, "Errors"): wrong type -> TypeError, wrong value
-> ValueError, out of memory -> mpsrt.OutOfMemoryError, device/driver failure -> RuntimeError;
every message says what was wrong and what was expected.

Each row of the table makes one bad call and checks the exception type and a distinctive part of
its message (API.md's text where it quotes one). After every row the runtime must still work (an
allocation, a fill, a synchronize and a read-back succeed), nothing may leak (memory_allocated()
is back to its value before the row) and no setting may have changed (memory fraction, cache
limit, current device and stream).

Rows marked BUG are known defects, xfail(strict=True): fixing one turns its row into an XPASS,
which fails, so the mark must then be removed.
"""

from __future__ import annotations

import gc
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Callable

import mpsrt
import numpy as np
import pytest
from conftest import is_unified
from mpsrt import comm, memory, profiler

# --------------------------------------------------------------------------- objects for the rows


class Ctx:
    """What the rows call methods on: live and released buffers, a stream, events, a
    generator, and bad device values for the active backend."""

    def __init__(self) -> None:
        self.buf = mpsrt.empty(64, dtype="uint8")
        self.u64 = mpsrt.empty(4, dtype="uint64")
        self.f32 = mpsrt.empty(16, dtype="float32")
        self.f64 = mpsrt.empty(2, dtype="float64")
        self.i32 = mpsrt.empty(16, dtype="int32")
        self.i16 = mpsrt.empty(4, dtype="int16")
        self.bf16 = mpsrt.empty(4, dtype="bfloat16")
        self.scalar = mpsrt.empty((), dtype="float32")
        self.freed = mpsrt.empty(64, dtype="uint8")
        self.freed.free()
        self.freed_f32 = mpsrt.empty(16, dtype="float32")
        self.freed_f32.free()
        self.stream = mpsrt.Stream()
        self.event = mpsrt.Event()
        self.timed = mpsrt.Event(enable_timing=True)
        self.gen = mpsrt.Generator()
        self.n = mpsrt.device_count()
        self.other_backend = "cpu" if mpsrt.backend() != "cpu" else "vulkan"

    def release(self) -> None:
        for name in list(vars(self)):
            delattr(self, name)


@dataclass(frozen=True)
class Case:
    id: str
    call: Callable[[Ctx], Any]
    exc: type[BaseException]
    match: str  # a literal part of the message
    bug: str | None = None
    covers: tuple[str, ...] = ()  # public names the row exercises (for the coverage check)
    cleanup: Callable[[], None] | None = None


CASES: list[Case] = []


def case(
    id: str,
    call: Callable[[Ctx], Any],
    exc: type[BaseException],
    match: str,
    *covers: str,
    bug: str | None = None,
    cleanup: Callable[[], None] | None = None,
) -> None:
    CASES.append(Case(id, call, exc, match, bug, covers, cleanup))


# --------------------------------------------------------------------------- devices

# name -> (call with a device, the caller name its messages use)
DEVICE_FUNCS: dict[str, Callable[[Any], Any]] = {
    "synchronize": mpsrt.synchronize,
    "set_device": mpsrt.set_device,
    "device": mpsrt.device,
    "get_device_name": mpsrt.get_device_name,
    "get_device_properties": mpsrt.get_device_properties,
    "current_stream": mpsrt.current_stream,
    "default_stream": mpsrt.default_stream,
    "default_generator": mpsrt.default_generator,
    "get_rng_state": mpsrt.get_rng_state,
    "memory_stats": mpsrt.memory_stats,
    "memory_allocated": mpsrt.memory_allocated,
    "max_memory_allocated": mpsrt.max_memory_allocated,
    "memory_reserved": mpsrt.memory_reserved,
    "max_memory_reserved": mpsrt.max_memory_reserved,
    "reset_peak_memory_stats": mpsrt.reset_peak_memory_stats,
    "reset_max_memory_allocated": mpsrt.reset_max_memory_allocated,
    "memory_summary": mpsrt.memory_summary,
    "memory.snapshot": memory.snapshot,
    "get_per_process_memory_fraction": mpsrt.get_per_process_memory_fraction,
    "set_per_process_memory_fraction": lambda d: mpsrt.set_per_process_memory_fraction(0.5, d),
    "reset_accumulated_memory_stats": mpsrt.reset_accumulated_memory_stats,
    "mem_get_info": mpsrt.mem_get_info,
    "memory._record_memory_history": lambda d: memory._record_memory_history(device=d),
    "Stream": lambda d: mpsrt.Stream(device=d),
    "Generator": lambda d: mpsrt.Generator(device=d),
    "empty": lambda d: mpsrt.empty(8, device=d),
    "rand": lambda d: mpsrt.rand(8, device=d),
    "comm.broadcast": None,  # filled in below (needs a buffer)
    "comm.gather": None,
    "comm.reduce_add": None,
}

# bad device -> (value from ctx, exception, message part from ctx)
BAD_DEVICES: dict[str, tuple[Callable[[Ctx], Any], type, Callable[[Ctx], str]]] = {
    "count": (lambda c: c.n, ValueError, lambda c: f"invalid device index {c.n}: expected 0 <="),
    "minus1": (lambda c: -1, ValueError, lambda c: "invalid device index -1: expected 0 <="),
    "2**70": (lambda c: 2**70, ValueError, lambda c: f"invalid device index {2**70}"),
    "float": (lambda c: 1.5, TypeError, lambda c: "got float 1.5"),
    "bool": (lambda c: True, TypeError, lambda c: "got bool True"),
    "cuda-string": (lambda c: "cuda:0", ValueError, lambda c: "invalid device string 'cuda:0'"),
    "other-backend": (
        lambda c: f"{c.other_backend}:0",
        ValueError,
        lambda c: f"belongs to backend {c.other_backend}",
    ),
    "index-string": (lambda c: "mps:x", ValueError, lambda c: "must be a device index"),
    "torch-like": (
        lambda c: type("device", (), {"type": "mps", "index": 7})(),
        ValueError,
        lambda c: "invalid device index 7",
    ),
}


def _device_call(name: str, c: Ctx, dev: Any) -> Any:
    if name == "comm.broadcast":
        return comm.broadcast(c.buf, [dev])
    if name == "comm.gather":
        return comm.gather([c.buf], destination=dev)
    if name == "comm.reduce_add":
        return comm.reduce_add([c.buf], destination=dev)
    return DEVICE_FUNCS[name](dev)


class _Msg:
    """A message part that depends on the backend: resolved when the row runs."""

    def __init__(self, fn: Callable[[Ctx], str]) -> None:
        self.fn = fn


for _fname in DEVICE_FUNCS:
    for _bad, (_value, _exc, _msg) in BAD_DEVICES.items():
        CASES.append(
            Case(
                f"{_fname}-device-{_bad}",
                (lambda f, v: lambda c: _device_call(f, c, v(c)))(_fname, _value),
                _exc,
                _Msg(_msg),  # type: ignore[arg-type]
                None,
                (_fname,),
            )
        )

# --------------------------------------------------------------------------- sizes and dtypes

SIZE_FUNCS: dict[str, Callable[[Any], Any]] = {
    "empty": lambda s: mpsrt.empty(s),
    "rand": lambda s: mpsrt.rand(s),
    "randn": lambda s: mpsrt.randn(s),
    "randint": lambda s: mpsrt.randint(0, 10, s),
    "bernoulli": lambda s: mpsrt.bernoulli(0.5, s),
    "random_bits": lambda s: mpsrt.random_bits(s),
}
BAD_SIZES: dict[str, tuple[Any, type, str]] = {
    "negative": (-1, ValueError, "sizes must be >= 0 and fit in 64 bits, got -1"),
    "negative-dim": ((3, -2), ValueError, "sizes must be >= 0 and fit in 64 bits, got -2"),
    "2**64": (2**64, ValueError, f"fit in 64 bits, got {2**64}"),
    "elements-overflow": ((2**32, 2**32), ValueError, "the number of elements overflows 64 bits"),
    "huge": (2**40, mpsrt.OutOfMemoryError, "larger than the device's max_buffer_size"),
    "float": (1.5, TypeError, "size must be an int or a sequence of ints, got float"),
    "float-dim": ((2, 2.0), TypeError, "size must be an int or a sequence of ints, got float"),
    "str": ("10", TypeError, "size must be an int or a sequence of ints, got str"),
    "bool": (True, TypeError, "size must be an int or a sequence of ints, got bool"),
    "17-dims": ((1,) * 17, ValueError, "at most 16 dimensions are supported"),
}
for _fname, _f in SIZE_FUNCS.items():
    for _bad, (_size, _exc, _msg) in BAD_SIZES.items():
        case(f"{_fname}-size-{_bad}", (lambda f, s: lambda c: f(s))(_f, _size), _exc, _msg, _fname)

case(
    "empty-bytes-overflow",
    lambda c: mpsrt.empty(2**61, dtype="float64"),
    ValueError,
    "the size in bytes overflows 64 bits",
    "empty",
)
case(
    "empty-size-None",
    lambda c: mpsrt.empty(None),
    TypeError,
    "size must be an int or a sequence of ints, got NoneType",
    "empty",
)
case("rand-no-size", lambda c: mpsrt.rand(), TypeError, "rand() missing the size", "rand")
case("randint-no-size", lambda c: mpsrt.randint(0, 10), TypeError, "missing the size", "randint")
case(
    "empty-dtype-complex",
    lambda c: mpsrt.empty(4, dtype="complex64"),
    ValueError,
    "unsupported dtype 'complex64'; expected one of uint8",
    "empty",
)
case(
    "empty-dtype-numpy-complex",
    lambda c: mpsrt.empty(4, dtype=np.complex64),
    ValueError,
    "unsupported dtype",
    "empty",
)
case(
    "empty-dtype-int",
    lambda c: mpsrt.empty(4, dtype=3),
    TypeError,
    "dtype must be a str, a numpy dtype or a torch dtype, got int",
    "empty",
)
case(
    "empty-dtype-object",
    lambda c: mpsrt.empty(4, dtype=object()),
    TypeError,
    "dtype must be a str, a numpy dtype or a torch dtype, got object",
    "empty",
)
case(
    "rand-dtype-int32",
    lambda c: mpsrt.rand(4, dtype="int32"),
    TypeError,
    "uniform_() needs a floating-point Buffer, got int32",
    "rand",
)
case(
    "rand-dtype-unknown",
    lambda c: mpsrt.rand(4, dtype="float128"),
    ValueError,
    "unsupported dtype 'float128'",
    "rand",
)
case(
    "randn-dtype-uint8",
    lambda c: mpsrt.randn(4, dtype="uint8"),
    TypeError,
    "normal_() needs a floating-point Buffer, got uint8",
    "randn",
)
# Dtypes torch still refuses for an op (random_/randint take every dtype;
# bernoulli_ every dtype but uint16/uint32/uint64): torch's NotImplementedError, which is
# also a TypeError (the type these rows had before).
for _dt in ("uint16", "uint32", "uint64"):
    case(
        f"bernoulli-dtype-{_dt}",
        (lambda d: lambda c: mpsrt.bernoulli(0.5, 4, dtype=d))(_dt),
        NotImplementedError,
        f"bernoulli_() cannot write {_dt}",
        "bernoulli",
    )
for _dt in ("int8", "int16", "uint16", "uint64", "bool"):
    case(
        f"rand-dtype-{_dt}",
        (lambda d: lambda c: mpsrt.rand(4, dtype=d))(_dt),
        NotImplementedError,
        f"uniform_() needs a floating-point Buffer, got {_dt}",
        "rand",
    )
    case(
        f"randn-dtype-{_dt}-not-implemented",
        (lambda d: lambda c: mpsrt.randn(4, dtype=d))(_dt),
        NotImplementedError,
        f"normal_() needs a floating-point Buffer, got {_dt}",
        "randn",
    )
# Ranges past what the dtype holds exactly: ValueError naming the dtype's bounds.
for _dt, _lo, _hi, _msg in [
    ("float16", 0, 2050, "random_(): [0, 2050) does not fit in float16 ([-2048, 2049))"),
    ("bfloat16", -257, 0, "random_(): [-257, 0) does not fit in bfloat16 ([-256, 257))"),
    ("float32", 0, 2**24 + 2, "does not fit in float32 ([-16777216, 16777217))"),
    ("bool", 0, 3, "random_(): [0, 3) does not fit in bool ([0, 2))"),
    ("int8", 0, 129, "random_(): [0, 129) does not fit in int8 ([-128, 128))"),
    ("uint64", -1, 1, "random_(): [-1, 1) does not fit in uint64 ([0, 9223372036854775808))"),
    ("uint64", 0, 2**64, "random_(): [0, 18446744073709551616) does not fit in uint64"),
]:
    case(
        f"randint-dtype-{_dt}-range-{_lo}-{_hi}",
        (lambda d, lo, hi: lambda c: mpsrt.randint(lo, hi, (4,), dtype=d))(_dt, _lo, _hi),
        ValueError,
        _msg,
        "randint",
    )

# --------------------------------------------------------------------------- memory settings

FRACTION_TYPE = "Invalid type for fraction argument, must be `float`"
for _id, _value in [("int", 1), ("str", "0.5"), ("None", None), ("numpy-float32", np.float32(0.5))]:
    case(
        f"set_per_process_memory_fraction-{_id}",
        (lambda v: lambda c: mpsrt.set_per_process_memory_fraction(v))(_value),
        TypeError,
        FRACTION_TYPE,
        "set_per_process_memory_fraction",
    )
for _id, _value in [("negative", -0.5), ("2.5", 2.5), ("inf", float("inf")), ("-inf", -np.inf)]:
    case(
        f"set_per_process_memory_fraction-{_id}",
        (lambda v: lambda c: mpsrt.set_per_process_memory_fraction(v))(_value),
        ValueError,
        f"Invalid fraction value: {_value}. Allowed range: 0~2",
        "set_per_process_memory_fraction",
    )
case(
    "set_per_process_memory_fraction-nan",
    lambda c: mpsrt.set_per_process_memory_fraction(float("nan")),
    ValueError,
    "Invalid fraction value: nan. Allowed range: 0~2",
    "set_per_process_memory_fraction",
)
for _id, _value, _exc, _msg in [
    ("negative", -1, ValueError, "set_cache_limit(): the limit must be >= 0 bytes, got -1"),
    ("float", 1.5, TypeError, "set_cache_limit() expected an int number of bytes, got float"),
    ("nan", float("nan"), TypeError, "expected an int number of bytes, got float"),
    ("bool", True, TypeError, "expected an int number of bytes, got bool"),
    ("str", "1", TypeError, "expected an int number of bytes, got str"),
]:
    case(
        f"set_cache_limit-{_id}",
        (lambda v: lambda c: mpsrt.set_cache_limit(v))(_value),
        _exc,
        _msg,
        "set_cache_limit",
    )


def _oom_under_a_limit(c: Ctx) -> None:
    dev = mpsrt.current_device()
    prev = mpsrt._C.set_per_process_memory_fraction(0.0, dev)
    try:
        mpsrt.set_per_process_memory_fraction((64 << 20) / mpsrt.recommended_max_memory())
        mpsrt.empty(256 << 20)
    finally:
        mpsrt._C.set_per_process_memory_fraction(prev, dev)


case(
    "empty-over-the-memory-fraction",
    _oom_under_a_limit,
    mpsrt.OutOfMemoryError,
    "Raise it with set_per_process_memory_fraction()",
    "empty",
    "set_per_process_memory_fraction",
    "OutOfMemoryError",
)

# Functions that take no argument.
for _name, _f in [
    ("available_backends", mpsrt.available_backends),
    ("backend", mpsrt.backend),
    ("current_device", mpsrt.current_device),
    ("device_count", mpsrt.device_count),
    ("is_available", mpsrt.is_available),
]:
    case(
        f"{_name}-extra-argument",
        (lambda f: lambda c: f(0))(_f),
        TypeError,
        "incompatible function arguments",
        _name,
    )
for _name, _f in [
    ("current_allocated_memory", mpsrt.current_allocated_memory),
    ("driver_allocated_memory", mpsrt.driver_allocated_memory),
    ("recommended_max_memory", mpsrt.recommended_max_memory),
    ("empty_cache", mpsrt.empty_cache),
    ("options", mpsrt.options),
    ("backend_info", mpsrt.backend_info),
    ("seed", mpsrt.seed),
    ("seed_all", mpsrt.seed_all),
    ("initial_seed", mpsrt.initial_seed),
    ("get_rng_state_all", mpsrt.get_rng_state_all),
    ("profiler.stop", profiler.stop),
    ("profiler.range_pop", profiler.range_pop),
    ("profiler.is_metal_capture_enabled", profiler.is_metal_capture_enabled),
    ("profiler.is_capturing_metal", profiler.is_capturing_metal),
]:
    case(
        f"{_name}-extra-argument",
        (lambda f: lambda c: f(0))(_f),
        TypeError,
        "takes 0 positional arguments but 1 was given",
        _name,
    )

case(
    "add_reclaim_callback-not-callable",
    lambda c: memory.add_reclaim_callback(5),
    TypeError,
    "add_reclaim_callback() expected a callable, got int",
    "memory.add_reclaim_callback",
)
case(
    "remove_reclaim_callback-unknown-id",
    lambda c: memory.remove_reclaim_callback(123456),
    ValueError,
    "no reclaim callback with id 123456",
    "memory.remove_reclaim_callback",
)
case(
    "remove_reclaim_callback-str",
    lambda c: memory.remove_reclaim_callback("x"),
    TypeError,
    "remove_reclaim_callback(): incompatible function arguments",
    "memory.remove_reclaim_callback",
)
for _kw, _value, _msg in [
    ("enabled", "bogus", "enabled must be one of (None, 'state', 'all'), got 'bogus'"),
    ("context", "bogus", "context must be None, 'state', 'alloc' or 'all', got 'bogus'"),
    ("stacks", "bogus", "stacks must be 'python' or 'all', got 'bogus'"),
    ("max_entries", -1, "max_entries must be >= 0, got -1"),
]:
    case(
        f"_record_memory_history-{_kw}-{_value}",
        (lambda k, v: lambda c: memory._record_memory_history(**{k: v}))(_kw, _value),
        ValueError,
        _msg,
        "memory._record_memory_history",
    )
case(
    "_record_memory_history-max_entries-float",
    lambda c: memory._record_memory_history(max_entries=1.5),
    TypeError,
    "max_entries must be an int",
    "memory._record_memory_history",
)
# torch.cuda raises RuntimeError (TORCH_CHECK) for these values; mpsrt's is both that and the
# ValueError of API.md's rule.
for _kw, _value, _msg in [
    ("enabled", "bogus", "expected state to be 'state', 'all', or None"),
    ("context", "bogus", "expected context to be 'state', 'alloc', 'all', or None"),
    ("stacks", "bogus", "expected stacks to be 'python', or 'all'"),
    ("skip_actions", ["bogus"], "[allocator] skip_actions: unknown action 'bogus'; expected alloc"),
    ("skip_actions", ["alloc", "free"], "unknown action 'free'"),
]:
    for _exc in (ValueError, RuntimeError):
        case(
            f"_record_memory_history-{_kw}-{_value}-{_exc.__name__}",
            (lambda k, v: lambda c: memory._record_memory_history(**{k: v}))(_kw, _value),
            _exc,
            _msg,
            "memory._record_memory_history",
        )
for _kw, _value, _msg in [
    ("enabled", 5, "enabled must be a str or None, got int"),
    ("context", 1.0, "context must be a str or None, got float"),
    ("stacks", None, "stacks must be a str, got NoneType"),
    ("skip_actions", "alloc", "skip_actions must be None or a list of action names, got str"),
    ("skip_actions", [b"alloc"], "skip_actions must hold str action names, got bytes"),
    ("skip_actions", 3, "skip_actions must be None or a list of action names, got int"),
    ("clear_history", "yes", "clear_history must be a bool, got str"),
    ("compile_context", 1, "compile_context must be a bool, got int"),
]:
    case(
        f"_record_memory_history-{_kw}-{_value!r}-type",
        (lambda k, v: lambda c: memory._record_memory_history(**{k: v}))(_kw, _value),
        TypeError,
        _msg,
        "memory._record_memory_history",
    )
case(
    "_record_memory_history-legacy-negative-entries",
    lambda c: memory._record_memory_history(True, trace_alloc_max_entries=-1),
    ValueError,
    "trace_alloc_max_entries must be >= 0, got -1",
    "memory._record_memory_history",
)
case(
    "_record_memory_history-legacy-record_context-str",
    lambda c: memory._record_memory_history(True, record_context="all"),
    TypeError,
    "record_context must be a bool, got str",
    "memory._record_memory_history",
)
case(
    "set_per_process_memory_fraction-device-first",
    lambda c: mpsrt.set_per_process_memory_fraction("x", device=c.n),  # torch.cuda's order
    ValueError,
    "invalid device index",
    "set_per_process_memory_fraction",
)
case(
    "_dump_snapshot-missing-directory",
    lambda c: memory._dump_snapshot("/nonexistent-mpsrt-dir/snap.pickle"),
    FileNotFoundError,
    "No such file or directory",
    "memory._dump_snapshot",
)
case(
    "_dump_snapshot-int",
    lambda c: memory._dump_snapshot(10**6),
    TypeError,
    "filename",
    "memory._dump_snapshot",
)

# --------------------------------------------------------------------------- Buffer


RELEASED = "this buffer was released (free()); allocate a new one"
for _id, _call in [
    ("fill_", lambda c: c.freed.fill_(1)),
    ("copy_-into", lambda c: c.freed.copy_(c.buf)),
    ("copy_-from", lambda c: c.buf.copy_(c.freed)),
    ("numpy", lambda c: c.freed.numpy()),
    ("data_ptr", lambda c: c.freed.data_ptr),
    ("__dlpack__", lambda c: c.freed.__dlpack__()),
    ("numpy.from_dlpack", lambda c: np.from_dlpack(c.freed)),
    ("record_stream", lambda c: c.freed.record_stream(c.stream)),
    ("uniform_", lambda c: c.freed_f32.uniform_()),
    ("normal_", lambda c: c.freed_f32.normal_()),
    ("random_", lambda c: c.freed.random_(0, 10)),
    ("bernoulli_", lambda c: c.freed_f32.bernoulli_(0.5)),
    ("comm.broadcast", lambda c: comm.broadcast(c.freed, [0])),
    ("comm.scatter", lambda c: comm.scatter(c.freed, [0])),
    ("comm.gather", lambda c: comm.gather([c.freed])),
    ("comm.reduce_add", lambda c: comm.reduce_add([c.freed])),
]:
    case(f"released-buffer-{_id}", _call, ValueError, RELEASED, "Buffer", _id.split("-")[0])

case(
    "Buffer-constructor",
    lambda c: mpsrt.Buffer(),
    TypeError,
    "no constructor defined",
    "Buffer",
)
case("Buffer-len-0d", lambda c: len(c.scalar), TypeError, "len() of a 0-d Buffer", "Buffer")
case(
    "Buffer-numpy-bfloat16",
    lambda c: c.bf16.numpy(),
    TypeError,
    "numpy has no bfloat16",
    "Buffer",
)
case(
    "Buffer-free-with-a-view-alive",
    # A numpy view on unified memory; a DLPack export of the device memory on discrete memory
    # (numpy() is a copy there).
    lambda c: (lambda view: c.buf.free())(c.buf.numpy() if is_unified() else c.buf.__dlpack__()),
    BufferError,
    "free(): numpy/DLPack views are alive",
    "Buffer",
)
case(
    "Buffer-__dlpack__-copy",
    lambda c: c.buf.__dlpack__(copy="yes"),
    TypeError,
    "copy must be None or a bool",
    "Buffer",
)
case(
    "Buffer-__dlpack__-stream",
    lambda c: c.buf.__dlpack__(stream="default"),
    TypeError,
    "stream must be None, -1 or an int >= 0",
    "Buffer",
)
case(
    "Buffer-__dlpack__-dl_device",
    lambda c: c.buf.__dlpack__(dl_device=(2, 0)),
    BufferError,
    _Msg(
        lambda c: (
            "can only be exported to the device "
            + ("(kDLCPU, 0)" if is_unified() else f"(7, {c.buf.device}) (its own device)")
        )
    ),
    "Buffer",
)
case(
    "Buffer-__dlpack__-max_version",
    lambda c: c.buf.__dlpack__(max_version="1.0"),
    TypeError,
    "max_version must be None or tuple[int, int]",
    "Buffer",
)
case(
    "Buffer-__dlpack__-unknown-keyword",
    lambda c: c.buf.__dlpack__(bogus=1),
    TypeError,
    "unsupported keyword argument 'bogus'",
    "Buffer",
)

# fill_
for _id, _buf, _value, _exc, _msg in [
    ("nan-into-uint8", "buf", float("nan"), TypeError, "a float cannot fill a buffer of uint8"),
    ("inf-into-int32", "i32", float("inf"), TypeError, "a float cannot fill a buffer of int32"),
    ("256-into-uint8", "buf", 256, ValueError, "value 256 is out of range for uint8"),
    ("-1-into-uint8", "buf", -1, ValueError, "value -1 is out of range for uint8"),
    ("2**64-into-uint64", "u64", 2**64, ValueError, f"value {2**64} is out of range for uint64"),
    ("2**2000-into-float64", "f64", 2**2000, ValueError, "value is out of range for float64"),
    ("str", "buf", "1", TypeError, "value must be a bool, int or float, got str"),
    ("complex", "f32", 1j, TypeError, "value must be a bool, int or float, got complex"),
    ("list", "f32", [1.0], TypeError, "value must be a bool, int or float, got list"),
]:
    case(
        f"fill_-{_id}",
        (lambda b, v: lambda c: getattr(c, b).fill_(v))(_buf, _value),
        _exc,
        _msg,
        "Buffer",
    )
case(
    "fill_-None",
    lambda c: c.buf.fill_(None),
    TypeError,
    "value must be a bool, int or float, got NoneType",
    "Buffer",
)

# copy_
case(
    "copy_-buffer-size-mismatch",
    lambda c: c.buf.copy_(c.f64),
    ValueError,
    "the source has 16 bytes but the destination 64; sizes must match",
    "Buffer",
)
case(
    "copy_-numpy-size-mismatch",
    lambda c: c.buf.copy_(np.zeros(10, np.uint8)),
    ValueError,
    "the source has 10 bytes but the buffer 64; sizes must match",
    "Buffer",
)
case(
    "copy_-object",
    lambda c: c.f64.copy_(np.array([object(), object()])),
    TypeError,
    "object",
    "Buffer",
)
case(
    "copy_-str",
    lambda c: c.buf.copy_("abc"),
    TypeError,
    "str",
    "Buffer",
)
case(
    "copy_-None",
    lambda c: c.buf.copy_(None),
    TypeError,
    "mpsrt.Buffer",
    "Buffer",
)

# random fills
for _id, _call, _exc, _msg in [
    ("uniform_-low-nan", lambda c: c.f32.uniform_(float("nan")), ValueError, "low must be finite"),
    ("uniform_-high-inf", lambda c: c.f32.uniform_(0, np.inf), ValueError, "high must be finite"),
    ("uniform_-low-str", lambda c: c.f32.uniform_("0"), TypeError, "low must be a number, got str"),
    ("uniform_-reversed", lambda c: c.f32.uniform_(1, 0), ValueError, "expected low <= high"),
    ("uniform_-int-buffer", lambda c: c.i32.uniform_(), TypeError, "needs a floating-point"),
    (
        "uniform_-generator-str",
        lambda c: c.f32.uniform_(generator="g"),
        TypeError,
        "generator must be an mpsrt.Generator or None, got str",
    ),
    ("normal_-mean-nan", lambda c: c.f32.normal_(float("nan")), ValueError, "mean must be finite"),
    ("normal_-std-inf", lambda c: c.f32.normal_(0, np.inf), ValueError, "std must be finite"),
    ("normal_-std-negative", lambda c: c.f32.normal_(0, -1), ValueError, "std must be >= 0"),
    ("normal_-int-buffer", lambda c: c.i32.normal_(), TypeError, "needs a floating-point"),
    (
        "random_-float-buffer-past-2**24",
        lambda c: c.f32.random_(0, 2**24 + 2),
        ValueError,
        "does not fit in float32",
    ),
    ("random_-empty-range", lambda c: c.buf.random_(5, 5), ValueError, "expected low < high"),
    ("random_-too-wide", lambda c: c.buf.random_(0, 300), ValueError, "does not fit in uint8"),
    ("random_-high-float", lambda c: c.i32.random_(0, 9.5), TypeError, "high must be an int"),
    ("random_-low-nan", lambda c: c.i32.random_(float("nan")), TypeError, "low must be an int"),
    ("bernoulli_-p-2", lambda c: c.f32.bernoulli_(2), ValueError, "p must be in [0, 1], got 2.0"),
    ("bernoulli_-p-nan", lambda c: c.f32.bernoulli_(np.nan), ValueError, "p must be finite"),
    ("bernoulli_-p-inf", lambda c: c.f32.bernoulli_(np.inf), ValueError, "p must be finite"),
    ("bernoulli_-p-str", lambda c: c.f32.bernoulli_("a"), TypeError, "p must be a number"),
    ("bernoulli_-uint64", lambda c: c.u64.bernoulli_(0.5), NotImplementedError, "write uint64"),
    ("uniform_-int16", lambda c: c.i16.uniform_(), NotImplementedError, "got int16"),
]:
    case(_id, _call, _exc, _msg, "Buffer")

for _id, _call, _exc, _msg, _name in [
    ("bernoulli-p-nan", lambda c: mpsrt.bernoulli(np.nan, 4), ValueError, "finite", "bernoulli"),
    ("bernoulli-p-1.5", lambda c: mpsrt.bernoulli(1.5, 4), ValueError, "in [0, 1]", "bernoulli"),
    ("randint-reversed", lambda c: mpsrt.randint(10, 0, (4,)), ValueError, "low < high", "randint"),
    (
        "randint-range-too-wide",
        lambda c: mpsrt.randint(0, 2**70, (4,)),
        ValueError,
        "does not fit in int64",
        "randint",
    ),
    (
        "randint-high-float",
        lambda c: mpsrt.randint(0, 10.5, (4,)),
        TypeError,
        "high must be an int, got float",
        "randint",
    ),
    (
        "rand-generator-int",
        lambda c: mpsrt.rand(4, generator=5),
        TypeError,
        "generator must be an mpsrt.Generator or None, got int",
        "rand",
    ),
    (
        "randn-generator-list",
        lambda c: mpsrt.randn(4, generator=[c.gen]),
        TypeError,
        "got list",
        "randn",
    ),
    (
        "random_bits-generator-list",
        lambda c: mpsrt.random_bits(4, generator=[1]),
        TypeError,
        "generator must be an mpsrt.Generator or None, got list",
        "random_bits",
    ),
    (
        "rand-stream-int",
        lambda c: mpsrt.rand(4, stream=5),
        TypeError,
        "stream must be an mpsrt.Stream or None, got int",
        "rand",
    ),
    (
        "random_bits-stream-str",
        lambda c: mpsrt.random_bits(4, stream="s"),
        TypeError,
        "stream must be an mpsrt.Stream or None, got str",
        "random_bits",
    ),
    (
        "empty-stream-event",
        lambda c: mpsrt.empty(4, stream=c.event),
        TypeError,
        "stream must be an mpsrt.Stream or None, got mpsrt._C.Event",
        "empty",
    ),
]:
    case(_id, _call, _exc, _msg, _name)

# Foreign objects where a Buffer is expected.
for _id, _call, _msg, _bug in [
    ("comm.broadcast-list", lambda c: comm.broadcast([1, 2], [0]), "got list", None),
    ("comm.broadcast-ndarray", lambda c: comm.broadcast(np.zeros(3), [0]), "got ndarray", None),
    ("comm.scatter-list", lambda c: comm.scatter([1, 2], [0]), "got list", None),
    ("comm.gather-not-a-sequence", lambda c: comm.gather(np.zeros(3)), "got ndarray", None),
    ("comm.reduce_add-list", lambda c: comm.reduce_add([[1, 2]]), "got list", None),
    (
        "Buffer.free-ndarray",
        lambda c: mpsrt.Buffer.free(np.zeros(3)),
        "free(): incompatible function arguments",
        None,
    ),
    (
        "Buffer.record_stream-list",
        lambda c: mpsrt.Buffer.record_stream([1], c.stream),
        "record_stream(): incompatible function arguments",
        None,
    ),
    (
        "Buffer.fill_-ndarray",
        lambda c: mpsrt.Buffer.fill_(np.zeros(4, np.float32), 1.0),
        "Buffer",
        "Buffer.fill_/copy_/numpy/_raw/__dlpack__ take `self` as nb::handle and nb::cast it: a "
        "foreign self (numpy array, list) raises RuntimeError('std::bad_cast'), not TypeError",
    ),
    (
        "Buffer.copy_-ndarray",
        lambda c: mpsrt.Buffer.copy_(np.zeros(64, np.uint8), c.buf),
        "Buffer",
        "same as Buffer.fill_: RuntimeError('std::bad_cast') for a foreign self",
    ),
    (
        "Buffer.numpy-list",
        lambda c: mpsrt.Buffer.numpy([1, 2]),
        "Buffer",
        "same as Buffer.fill_: RuntimeError('std::bad_cast') for a foreign self",
    ),
    (
        "Buffer.__dlpack__-ndarray",
        lambda c: mpsrt.Buffer.__dlpack__(np.zeros(3)),
        "Buffer",
        "same as Buffer.fill_: RuntimeError('std::bad_cast') for a foreign self",
    ),
    (
        "Buffer.uniform_-list",
        lambda c: mpsrt.Buffer.uniform_([1.0, 2.0]),
        "Buffer",
        "the Python-level Buffer methods (uniform_, normal_, random_, bernoulli_) do not check "
        "self: a list gives AttributeError(\"'list' object has no attribute 'dtype'\")",
    ),
    (
        "Buffer.normal_-ndarray",
        lambda c: mpsrt.Buffer.normal_(np.zeros(4, np.float32)),
        "Buffer",
        "a float32 numpy array passes the dtype check (np.dtype('float32') == 'float32') and "
        "fails inside with 'default_generator(): incompatible function arguments', a message "
        "about a function the user did not call",
    ),
    (
        "Buffer.random_-ndarray",
        lambda c: mpsrt.Buffer.random_(np.zeros(4, np.int32)),
        "Buffer",
        "an int32 numpy array gets the misleading 'random_() writes uint8, int32 or int64 "
        "Buffers, got int32'",
    ),
]:
    case(_id, _call, TypeError, "mpsrt.Buffer" if _bug else _msg, _id.split("-")[0])

# comm values
for _id, _call, _exc, _msg in [
    ("broadcast-devices-int", lambda c: comm.broadcast(c.buf, 0), TypeError, "sequence of devices"),
    # torch.cuda.comm's texts (broadcast to no device returns (), as torch's).
    (
        "scatter-no-devices",
        lambda c: comm.scatter(c.buf, []),
        ValueError,
        "Expected at least one device to scatter to",
    ),
    ("broadcast-device-None", lambda c: comm.broadcast(c.buf, [None]), TypeError, "got None"),
    (
        "scatter-negative-chunk",
        lambda c: comm.scatter(c.buf, [0], chunk_sizes=[-1]),
        ValueError,
        "split_with_sizes expects split_sizes have only non-negative entries, but got "
        "split_sizes=[-1]",
    ),
    (
        "scatter-float-chunk",
        lambda c: comm.scatter(c.buf, [0], chunk_sizes=[1.5]),
        TypeError,
        "chunk sizes must be ints",
    ),
    (
        "scatter-chunks-sum",
        lambda c: comm.scatter(c.buf, [0], chunk_sizes=[3]),
        ValueError,
        "split_with_sizes expects split_sizes to sum exactly to 64 (input tensor's size at "
        "dimension 0), but got split_sizes=[3]",
    ),
    (
        "scatter-chunk-count",
        lambda c: comm.scatter(c.buf, [0], chunk_sizes=[32, 32]),
        ValueError,
        "Expected devices and chunk_sizes to be of same length, but got len(devices) = 1 and "
        "len(chunk_sizes) = 2",
    ),
    (
        "scatter-dim",
        lambda c: comm.scatter(c.buf, [0], dim=1),
        IndexError,
        "Dimension out of range (expected to be in range of [-1, 0], but got 1)",
    ),
    ("scatter-dim-float", lambda c: comm.scatter(c.buf, [0], dim=0.0), TypeError, "dim must be"),
    (
        "scatter-0d",
        lambda c: comm.scatter(c.scalar, [0]),
        ValueError,
        "chunk expects at least a 1-dimensional tensor",
    ),
    (
        "gather-empty",
        lambda c: comm.gather([]),
        ValueError,
        "Expected at least one tensor to gather from",
    ),
    (
        "gather-dim",
        lambda c: comm.gather([c.buf], dim=3),
        IndexError,
        "Dimension out of range (expected to be in range of [-1, 0], but got 3)",
    ),
    ("gather-dtypes", lambda c: comm.gather([c.buf, c.f32]), ValueError, "same dtype"),
    (
        "gather-ndarray",  # torch: a CPU tensor among the inputs is a RuntimeError
        lambda c: comm.gather([c.buf, np.zeros(3)]),
        ValueError,
        "Expected all input tensors to be mpsrt Buffers, but tensor at index 1 has device 'cpu'",
    ),
    (
        "reduce_add-empty",
        lambda c: comm.reduce_add([]),
        IndexError,
        "list index out of range: expected at least one Buffer",
    ),
    (
        "reduce_add-shapes",
        lambda c: comm.reduce_add([c.buf, c.f32]),
        ValueError,
        "input 1 has invalid size: got 16, but expected 64",
    ),
    (
        "reduce_add-ndarray",
        lambda c: comm.reduce_add(np.zeros(3)),
        TypeError,
        "expected a sequence of Buffers, got ndarray",
    ),
]:
    case(f"comm.{_id}", _call, _exc, _msg, "comm." + _id.split("-")[0])

# comm out= forms: torch.cuda.comm's words; CommError is a RuntimeError (torch) and a ValueError
# (API.md), so the rows expect ValueError and test_comm.py checks RuntimeError and the full texts.
for _id, _call, _exc, _msg in [
    (
        "broadcast-no-devices-no-out",
        lambda c: comm.broadcast(c.buf),
        ValueError,
        "Exactly one of 'devices' and 'out' must be specified, but got devices=None and out=None",
    ),
    (
        "broadcast-devices-and-out",
        lambda c: comm.broadcast(c.buf, [0], out=[c.buf]),
        ValueError,
        "Exactly one of 'devices' and 'out' must be specified, but got devices=[0] and out=",
    ),
    (
        "broadcast-out-shape",
        lambda c: comm.broadcast(c.buf, out=[c.f32]),
        ValueError,
        "Expected all output tensors to have same shape as the source tensor [64], but output "
        "tensor at index 0 has shape [16]",
    ),
    (
        "broadcast-out-dtype",
        lambda c: comm.broadcast(c.u64, out=[c.f64.view(0, (4,), "float32")]),
        ValueError,
        "has dtype float32 but the source uint64; mpsrt.comm copies bytes",
    ),
    (
        "broadcast-out-not-a-sequence",
        lambda c: comm.broadcast(c.buf, out=c.buf),
        TypeError,
        "expected out to be a sequence of Buffers, got Buffer",
    ),
    (
        "broadcast-out-host-array",
        lambda c: comm.broadcast(c.buf, out=[np.zeros(64, np.uint8)]),
        ValueError,
        "Expected all output tensors to be mpsrt Buffers, but output tensor at index 0 has "
        "device 'cpu'",
    ),
    (
        "broadcast-out-released",
        lambda c: comm.broadcast(c.buf, out=[c.freed]),
        ValueError,
        RELEASED,
    ),
    (
        "scatter-devices-and-out",
        lambda c: comm.scatter(c.buf, [0], out=[c.buf]),
        ValueError,
        "'devices' must not be specified when 'out' is specified, but got devices=[0]",
    ),
    (
        "scatter-chunk_sizes-and-out",
        lambda c: comm.scatter(c.buf, chunk_sizes=[64], out=[c.buf]),
        ValueError,
        "'chunk_sizes' must not be specified when 'out' is specified, but got chunk_sizes=[64]",
    ),
    (
        "scatter-out-empty",
        lambda c: comm.scatter(c.buf, out=[]),
        ValueError,
        "Expected at least one output tensor to scatter to",
    ),
    (
        "scatter-out-shape",
        lambda c: comm.scatter(c.f32, out=[c.scalar]),
        ValueError,
        "Output tensor at index 0 has incorrect shape: []. Expected same shape except for "
        "scatter dim 0 as the source tensor: [16]",
    ),
    (
        "scatter-out-total",
        lambda c: comm.scatter(c.buf, out=[c.buf[:10], c.buf[10:20]]),
        ValueError,
        "Total size for output tensors along scatter dim 0 does not match the source tensor "
        "size at dim 0. Expected 64, but got total size 20",
    ),
    (
        "scatter-streams-type",
        lambda c: comm.scatter(c.buf, [0], streams=c.stream),
        TypeError,
        "streams must be None or a sequence of mpsrt.Stream or None, got Stream",
    ),
    (
        "gather-destination-and-out",
        lambda c: comm.gather([c.buf], destination=0, out=c.buf),
        ValueError,
        "'destination' must not be specified when 'out' is specified, but got destination=0",
    ),
    (
        "gather-out-shape",
        lambda c: comm.gather([c.buf, c.buf], out=c.buf),
        ValueError,
        "Expected out tensor to have shape [128], but got [64]",
    ),
    (
        "gather-out-list",
        lambda c: comm.gather([c.buf], out=[c.buf]),
        TypeError,
        "gather() expected an mpsrt.Buffer, got list",
    ),
]:
    case(f"comm.{_id}", _call, _exc, _msg, "comm." + _id.split("-")[0])

# --------------------------------------------------------------------------- Buffer views

for _id, _call, _exc, _msg in [
    (
        "view-past-the-end",
        lambda c: c.buf.view(60, (8,)),
        ValueError,
        "[buffer] view: bytes [60, 60 + 8) are outside the buffer's 64 bytes; a view must lie "
        "within [0, 64)",
    ),
    (
        "view-offset-past-the-end",
        lambda c: c.buf.view(65),
        ValueError,
        "bytes [65, 65 + 0) are outside the buffer's 64 bytes",
    ),
    (
        "view-of-a-view-past-its-end",
        lambda c: c.buf[16:32].view(8, (9,)),
        ValueError,
        "bytes [8, 8 + 9) are outside the buffer's 16 bytes; a view must lie within [0, 16)",
    ),
    (
        "view-negative-offset",
        lambda c: c.buf.view(-1),
        ValueError,
        "view(): offset must be >= 0 and fit in 64 bits, got -1",
    ),
    ("view-offset-float", lambda c: c.buf.view(1.0), TypeError, "offset must be an int (bytes)"),
    ("view-offset-bool", lambda c: c.buf.view(True), TypeError, "offset must be an int (bytes)"),
    (
        "view-misaligned",
        lambda c: c.f32.view(2, (3,)),
        ValueError,
        "[buffer] view: byte offset 2 from the start of the memory is not a multiple of the "
        "float32 itemsize 4",
    ),
    (
        "view-misaligned-dtype",
        lambda c: c.buf[1:].view(0, (4,), "int32"),
        ValueError,
        "byte offset 1 from the start of the memory is not a multiple of the int32 itemsize 4",
    ),
    (
        "view-not-whole-elements",
        lambda c: c.buf.view(4, dtype="float64"),
        ValueError,
        "view(): the 60 bytes from offset 4 are not a whole number of float64 elements",
    ),
    ("view-shape-negative", lambda c: c.buf.view(0, (-1,)), ValueError, "view(): sizes must be"),
    ("view-shape-str", lambda c: c.buf.view(0, "4"), TypeError, "view(): size must be an int"),
    ("view-dtype", lambda c: c.buf.view(0, (4,), "complex64"), ValueError, "unsupported dtype"),
    ("view-released", lambda c: c.freed.view(0, (1,)), ValueError, RELEASED),
    ("view-released-index", lambda c: c.freed[0], ValueError, RELEASED),
    (
        "index-out-of-range",
        lambda c: c.buf[64],
        IndexError,
        "index 64 is out of bounds for dimension 0 with size 64",
    ),
    (
        "index-negative-out-of-range",
        lambda c: c.f32[-17],
        IndexError,
        "index -17 is out of bounds for dimension 0 with size 16",
    ),
    ("index-huge", lambda c: c.buf[1 << 70], IndexError, "is out of bounds for dimension 0"),
    ("index-0d", lambda c: c.scalar[0], TypeError, "invalid index of a 0-d Buffer"),
    (
        "index-step",
        lambda c: c.buf[::2],
        ValueError,
        "[buffer] a Buffer slice must have step 1 (Buffers are contiguous), got step 2",
    ),
    ("index-float", lambda c: c.buf[1.0], TypeError, "Buffer indices must be ints or slices"),
    ("index-tuple", lambda c: c.buf[0, 1], TypeError, "Buffer indices must be ints or slices"),
    ("index-bool", lambda c: c.buf[True], TypeError, "Buffer indices must be ints or slices"),
]:
    case(f"Buffer.{_id}", _call, _exc, _msg, "Buffer")

# --------------------------------------------------------------------------- random state

for _id, _call, _exc, _msg, _name in [
    ("manual_seed-str", lambda c: mpsrt.manual_seed("1"), TypeError, "got str", "manual_seed"),
    ("manual_seed-float", lambda c: mpsrt.manual_seed(1.0), TypeError, "got float", "manual_seed"),
    ("manual_seed-nan", lambda c: mpsrt.manual_seed(np.nan), TypeError, "got float", "manual_seed"),
    ("manual_seed-bool", lambda c: mpsrt.manual_seed(True), TypeError, "got bool", "manual_seed"),
    (
        "manual_seed-2**64",
        lambda c: mpsrt.manual_seed(2**64),
        ValueError,
        "is out of range: expected -2**63 <= seed < 2**64",
        "manual_seed",
    ),
    (
        "manual_seed-below-int64",
        lambda c: mpsrt.manual_seed(-(2**63) - 1),
        ValueError,
        "is out of range",
        "manual_seed",
    ),
    (
        "manual_seed_all-2**64",
        lambda c: mpsrt.manual_seed_all(2**64),
        ValueError,
        "manual_seed_all(): seed 18446744073709551616 is out of range",
        "manual_seed_all",
    ),
    (
        "manual_seed_all-None",
        lambda c: mpsrt.manual_seed_all(None),
        TypeError,
        "manual_seed_all() expected an int seed, got NoneType",
        "manual_seed_all",
    ),
    (
        "set_rng_state-43-bytes",
        lambda c: mpsrt.set_rng_state(bytes(43)),
        ValueError,
        "the state must be 44 bytes, got 43",
        "set_rng_state",
    ),
    (
        "set_rng_state-45-uint8",
        lambda c: mpsrt.set_rng_state(np.zeros(45, np.uint8)),
        ValueError,
        "the state must be 44 bytes, got 45",
        "set_rng_state",
    ),
    (
        "set_rng_state-float32",
        lambda c: mpsrt.set_rng_state(np.zeros(11, np.float32)),
        TypeError,
        "got a numpy array of float32",
        "set_rng_state",
    ),
    (
        "set_rng_state-list",
        lambda c: mpsrt.set_rng_state([0] * 44),
        TypeError,
        "expected a contiguous uint8 buffer of 44 bytes",
        "set_rng_state",
    ),
    (
        "set_rng_state-None",
        lambda c: mpsrt.set_rng_state(None),
        TypeError,
        "got NoneType",
        "set_rng_state",
    ),
    (
        "set_rng_state-strided",
        lambda c: mpsrt.set_rng_state(np.zeros(88, np.uint8)[::2]),
        ValueError,
        "the state array must be contiguous",
        "set_rng_state",
    ),
    (
        "set_rng_state_all-count",
        lambda c: mpsrt.set_rng_state_all([]),
        ValueError,
        "0 states for",
        "set_rng_state_all",
    ),
    (
        "set_rng_state_all-int-state",
        lambda c: mpsrt.set_rng_state_all([5] * c.n),
        TypeError,
        "set_rng_state_all() expected a contiguous uint8 buffer of 44 bytes",
        "set_rng_state_all",
    ),
    (
        "Generator.set_state-43-bytes",
        lambda c: c.gen.set_state(bytes(43)),
        ValueError,
        "Generator.set_state(): the state must be 44 bytes, got 43",
        "Generator",
    ),
    (
        "Generator.set_state-list",
        lambda c: c.gen.set_state([0] * 44),
        TypeError,
        "got list",
        "Generator",
    ),
    (
        "Generator.manual_seed-str",
        lambda c: c.gen.manual_seed("1"),
        TypeError,
        "Generator.manual_seed() expected an int seed",
        "Generator",
    ),
    (
        "Generator.manual_seed-float",
        lambda c: c.gen.manual_seed(1.5),
        TypeError,
        "Generator.manual_seed() expected an int seed",
        "Generator",
    ),
    (
        "Generator.set_offset-str",
        lambda c: c.gen.set_offset("0"),
        TypeError,
        "Generator.set_offset() expected an int",
        "Generator",
    ),
]:
    case(_id, _call, _exc, _msg, _name)

case(
    "set_rng_state_all-int",
    lambda c: mpsrt.set_rng_state_all(5),
    TypeError,
    "set_rng_state_all() expected",
    "set_rng_state_all",
)
for _id, _call in [
    ("Generator.manual_seed-2**64", lambda c: c.gen.manual_seed(2**64)),
    ("Generator.manual_seed-below-int64", lambda c: c.gen.manual_seed(-(2**63) - 1)),
]:
    case(
        _id,
        _call,
        ValueError,
        "out of range",
        "Generator",
    )
for _id, _call in [
    ("Generator.set_offset-negative", lambda c: c.gen.set_offset(-1)),
    ("Generator.set_offset-2**64", lambda c: c.gen.set_offset(2**64)),
]:
    case(
        _id,
        _call,
        ValueError,
        "offset",
        "Generator",
    )
case(
    "Generator.set_state-unbound-list",
    lambda c: mpsrt.Generator.set_state([1], bytes(44)),
    TypeError,
    "Generator",
    "Generator",
)

# --------------------------------------------------------------------------- streams and events

for _id, _call, _exc, _msg, _name in [
    (
        "Stream-priority-str",
        lambda c: mpsrt.Stream(priority="high"),
        TypeError,
        "priority: int",
        "Stream",
    ),
    ("Stream-priority-float", lambda c: mpsrt.Stream(priority=1.5), TypeError, "int", "Stream"),
    (
        "set_stream-int",
        lambda c: mpsrt.set_stream(5),
        TypeError,
        "set_stream() expected an mpsrt.Stream, got int",
        "set_stream",
    ),
    (
        "set_stream-event",
        lambda c: mpsrt.set_stream(c.event),
        TypeError,
        "got Event",
        "set_stream",
    ),
    (
        "stream-ndarray",
        lambda c: mpsrt.stream(np.zeros(3)),
        TypeError,
        "stream() expected an mpsrt.Stream or None, got ndarray",
        "stream",
    ),
    (
        "StreamContext-str",
        lambda c: mpsrt.StreamContext("s"),
        TypeError,
        "expected an mpsrt.Stream or None, got str",
        "StreamContext",
    ),
    (
        "Stream.wait_stream-int",
        lambda c: c.stream.wait_stream(5),
        TypeError,
        "wait_stream(): expected an mpsrt.Stream, got int",
        "Stream",
    ),
    (
        "Stream.wait_event-stream",
        lambda c: c.stream.wait_event(c.stream),
        TypeError,
        "wait_event(): expected an mpsrt.Event, got mpsrt._C.Stream",
        "Stream",
    ),
    (
        "Stream.record_event-int",
        lambda c: c.stream.record_event(5),
        TypeError,
        "record_event(): expected an mpsrt.Event or None, got int",
        "Stream",
    ),
    (
        "Stream.add_callback-int",
        lambda c: c.stream.add_callback(5),
        TypeError,
        "Callable",
        "Stream",
    ),
    (
        "Stream.synchronize-ndarray-self",
        lambda c: mpsrt.Stream.synchronize(np.zeros(3)),
        TypeError,
        "synchronize(): incompatible function arguments",
        "Stream",
    ),
    (
        "Buffer.record_stream-int",
        lambda c: c.buf.record_stream(5),
        TypeError,
        "record_stream(): expected an mpsrt.Stream, got int",
        "Buffer",
    ),
    (
        "Event-enable_timing-str",
        lambda c: mpsrt.Event(enable_timing="yes"),
        TypeError,
        "enable_timing: bool",
        "Event",
    ),
    (
        "Event.record-str",
        lambda c: c.event.record("s"),
        TypeError,
        "Event.record(): expected an mpsrt.Stream, got str",
        "Event",
    ),
    (
        "Event.wait-event",
        lambda c: c.event.wait(c.event),
        TypeError,
        "Event.wait(): expected an mpsrt.Stream, got mpsrt._C.Event",
        "Event",
    ),
    (
        "Event.elapsed_time-int",
        lambda c: c.timed.elapsed_time(5),
        TypeError,
        "elapsed_time(): expected an mpsrt.Event, got int",
        "Event",
    ),
    (
        "Event.elapsed_time-without-timing",
        lambda c: c.event.elapsed_time(c.event),
        ValueError,
        "enable_timing=True",
        "Event",
    ),
    (
        "Event.elapsed_time-not-recorded",
        lambda c: c.timed.elapsed_time(mpsrt.Event(enable_timing=True)),
        ValueError,
        "Both events must be recorded before calculating elapsed time",
        "Event",
    ),
    (
        "Event.query-list-self",
        lambda c: mpsrt.Event.query([1]),
        TypeError,
        "query(): incompatible function arguments",
        "Event",
    ),
]:
    case(_id, _call, _exc, _msg, _name)

case(
    "Stream.wait_stream-None",
    lambda c: c.stream.wait_stream(None),
    TypeError,
    "wait_stream(): expected an mpsrt.Stream, got NoneType",
    "Stream",
)

# --------------------------------------------------------------------------- profiler

for _id, _call, _exc, _msg in [
    (
        "start-mode",
        lambda c: profiler.start(mode="bogus"),
        ValueError,
        "invalid signpost trace mode 'bogus'",
    ),
    ("start-mode-int", lambda c: profiler.start(mode=5), TypeError, "mode must be a str, got int"),
    (
        "start-wait-str",
        lambda c: profiler.start(wait_until_completed="yes"),
        TypeError,
        "wait_until_completed must be a bool, got str",
    ),
    (
        "profile-mode",
        lambda c: profiler.profile("interval,bogus").__enter__(),
        ValueError,
        "invalid signpost trace mode",
    ),
    ("mark-None", lambda c: profiler.mark(None), TypeError, "msg must be a str, got NoneType"),
    ("range_push-bytes", lambda c: profiler.range_push(b"x"), TypeError, "got bytes"),
    (
        "range_pop-nothing-open",
        lambda c: profiler.range_pop(),
        RuntimeError,
        "no range is open on this thread",
    ),
    ("range-int", lambda c: profiler.range(5), TypeError, "range(): msg must be a str, got int"),
    ("range_start-None", lambda c: profiler.range_start(None), TypeError, "got NoneType"),
    (
        "range_end-unknown",
        lambda c: profiler.range_end(987654321),
        ValueError,
        "[profiler] range_end: no range with id 987654321 is open",
    ),
    ("range_end-str", lambda c: profiler.range_end("1"), TypeError, "range_id must be an int"),
    ("range_end-bool", lambda c: profiler.range_end(True), TypeError, "got bool"),
    ("range_end-huge", lambda c: profiler.range_end(-(2**63) - 1), OverflowError, "64 bits"),
    (
        "export_trace-int",
        lambda c: profiler.export_trace(5),
        TypeError,
        "path must be a str or os.PathLike, got int",
    ),
    (
        "export_trace-missing-directory",
        lambda c: profiler.export_trace("/nonexistent-mpsrt-dir/t.json"),
        RuntimeError,
        "cannot open '/nonexistent-mpsrt-dir/t.json'",
    ),
    (
        "metal_capture-int",
        lambda c: profiler.metal_capture(5).__enter__(),
        TypeError,
        "msg must be a str, got int",
    ),
    (
        "metal_capture-not-metal",
        lambda c: profiler.metal_capture("x").__enter__(),
        RuntimeError,
        "metal_capture(): Metal GPU capture",
    ),
]:
    case(f"profiler.{_id}", _call, _exc, _msg, "profiler." + _id.split("-")[0])


def _start_twice(c: Ctx) -> None:
    profiler.start()
    profiler.start()


case(
    "profiler.start-twice",
    _start_twice,
    RuntimeError,
    "a session is already running; stop() it first",
    "profiler.start",
    cleanup=profiler.stop,
)

# --------------------------------------------------------------------------- the test


def _params() -> list[Any]:
    out = []
    for c in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=f"BUG: {c.bug}")] if c.bug else []
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


def _settle() -> None:
    gc.collect()
    mpsrt.synchronize()


def _fraction() -> float:
    dev = mpsrt.current_device()
    prev = mpsrt._C.set_per_process_memory_fraction(0.0, dev)
    mpsrt._C.set_per_process_memory_fraction(prev, dev)
    return prev


def _cache_limit() -> int:
    dev = mpsrt.current_device()
    prev = mpsrt._C.set_cache_limit(2**64 - 1, dev)
    mpsrt._C.set_cache_limit(prev, dev)
    return prev


@pytest.fixture
def ctx() -> Iterator[Ctx]:
    c = Ctx()
    try:
        yield c
    finally:
        c.release()
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, name):  # a failed row's traceback holds its frames' buffers
                setattr(sys, name, None)
        mpsrt.set_stream(mpsrt.default_stream())
        _settle()


def _assert_still_works(allocated_before: int) -> None:
    b = mpsrt.empty(4096, dtype="uint32")
    b.fill_(0xC0FFEE)
    mpsrt.synchronize()
    assert (b.numpy() == 0xC0FFEE).all(), "the runtime no longer fills correctly"
    g = mpsrt.Generator().manual_seed(7)
    r = mpsrt.random_bits(8, generator=g).numpy()
    assert r.tolist() == mpsrt.random_bits(8, generator=g.manual_seed(7)).numpy().tolist()
    del b, r
    _settle()
    assert mpsrt.memory_allocated() == allocated_before


@pytest.mark.parametrize("row", _params())
def test_bad_input(row: Case, ctx: Ctx) -> None:
    _settle()
    allocated = mpsrt.memory_allocated()
    fraction, cache_limit = _fraction(), _cache_limit()
    device, stream = mpsrt.current_device(), mpsrt.current_stream()
    match = row.match.fn(ctx) if isinstance(row.match, _Msg) else row.match
    try:
        # The exception (and its traceback, which holds the frames of the failed call and any
        # buffer they made) is dropped at the end of the block: the leak check sees only leaks.
        with pytest.raises(row.exc, match=re.escape(match)):
            row.call(ctx)
    finally:
        if row.cleanup is not None:
            row.cleanup()
    _settle()
    assert mpsrt.memory_allocated() == allocated, "the failed call leaked device memory"
    assert _fraction() == fraction, "the failed call changed the memory fraction"
    assert _cache_limit() == cache_limit, "the failed call changed the cache limit"
    assert mpsrt.current_device() == device, "the failed call changed the current device"
    assert mpsrt.current_stream() == stream, "the failed call changed the current stream"
    _assert_still_works(allocated)


def test_out_of_memory_is_a_runtime_error() -> None:
    assert issubclass(mpsrt.OutOfMemoryError, RuntimeError)
    with pytest.raises(RuntimeError, match="max_buffer_size"):
        mpsrt.empty(2**40)


def test_stream_priorities_outside_the_classes_clamp() -> None:
    assert mpsrt.Stream(priority=2**40).priority == 1
    assert mpsrt.Stream(priority=-(2**70)).priority == -1
    assert mpsrt.Stream(priority=0).priority == 0


def test_generator_manual_seed_accepts_what_manual_seed_accepts() -> None:
    mpsrt.manual_seed(-1)
    want = mpsrt.initial_seed()
    assert mpsrt.Generator().manual_seed(-1).initial_seed() == want == 2**64 - 1


def _public_names() -> set[str]:
    names = {n for n in mpsrt.__all__ if callable(getattr(mpsrt, n))}
    names -= {"DeviceProperties"}  # a read-only record: nothing to pass a bad value to
    names |= {f"comm.{n}" for n in comm.__all__}
    names |= {f"profiler.{n}" for n in profiler.__all__}
    names |= {
        f"memory.{n}"
        for n in (
            "add_reclaim_callback",
            "remove_reclaim_callback",
            "snapshot",
            "_record_memory_history",
            "_dump_snapshot",
        )
    }
    names |= {"profiler.is_capturing_metal", "profiler.is_metal_capture_enabled"}
    return names


def test_every_public_function_has_a_bad_input_row() -> None:
    covered = {name for c in CASES for name in c.covers}
    missing = sorted(_public_names() - covered)
    assert not missing, f"public functions without a bad-input row: {missing}"
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), "row ids must be unique"
