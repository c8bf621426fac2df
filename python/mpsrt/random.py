"""Random numbers: Philox4x32-10 generators and random Buffers (torch.mps / torch.cuda names).

Every op follows the stream definition of mpsrt/philox.h, so its numbers do not depend on
the backend, the stream, the thread count or the machine.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _C
from ._utils import DeviceLike, device_index
from .streams import StreamContext

Generator = _C.Generator
Buffer = _C.Buffer

RNG_STATE_SIZE = 44
# Which op writes which dtype, and every value rule of the random fills (finite parameters,
# low <= high, std >= 0, p in [0, 1], integer ranges that fit the dtype), live in the core
# (mpsrt::random_fill); this module converts arguments and raises the TypeErrors.
_supports = _C._random_supported
_int_bounds = _C._random_int_bounds


class _DTypeNotImplementedError(NotImplementedError, TypeError):
    """An op cannot write a dtype: torch's NotImplementedError, and a TypeError as before."""


def _seed_value(seed: Any, caller: str) -> int:
    if isinstance(seed, bool):
        raise TypeError(f"{caller}() expected an int seed, got bool")
    try:
        s = operator.index(seed)
    except TypeError:
        raise TypeError(f"{caller}() expected an int seed, got {type(seed).__name__}") from None
    if not -(1 << 63) <= s < (1 << 64):
        raise ValueError(f"{caller}(): seed {s} is out of range: expected -2**63 <= seed < 2**64")
    return s & 0xFFFF_FFFF_FFFF_FFFF


def _rng_device(device: DeviceLike, caller: str) -> int:
    return device_index(device, caller=caller)


def default_generator(device: DeviceLike = None) -> Generator:
    """The device's default generator."""
    return _C.default_generator(_rng_device(device, "default_generator"))


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator and resets its offset to 0."""
    _C.default_generator(_C.current_device()).manual_seed(_seed_value(seed, "manual_seed"))


def manual_seed_all(seed: int) -> None:
    """Seeds the default generator of every device."""
    s = _seed_value(seed, "manual_seed_all")
    for d in range(_C.device_count()):
        _C.default_generator(d).manual_seed(s)


def seed() -> None:
    """Seeds the current device's default generator nondeterministically."""
    _C.default_generator(_C.current_device()).seed()


def seed_all() -> None:
    """Seeds every device's default generator nondeterministically."""
    for d in range(_C.device_count()):
        _C.default_generator(d).seed()


def initial_seed() -> int:
    """The seed of the current device's default generator."""
    return _C.default_generator(_C.current_device()).initial_seed()


def _state_bytes(new_state: Any, caller: str) -> bytes:
    expected = (
        "a contiguous uint8 buffer of 44 bytes (bytes, a numpy uint8 array or a torch ByteTensor)"
    )
    if isinstance(new_state, (bytes, bytearray, memoryview)):
        data = bytes(new_state)
    elif isinstance(new_state, np.ndarray):
        if new_state.dtype != np.uint8:
            raise TypeError(
                f"{caller}() expected {expected}, got a numpy array of {new_state.dtype}"
            )
        if not new_state.flags.c_contiguous:
            raise ValueError(f"{caller}(): the state array must be contiguous")
        data = new_state.tobytes()
    elif type(new_state).__module__.startswith("torch") and hasattr(new_state, "dtype"):
        if str(new_state.dtype) != "torch.uint8":
            raise TypeError(f"{caller}() expected {expected}, got a tensor of {new_state.dtype}")
        data = new_state.detach().cpu().contiguous().numpy().tobytes()
    else:
        raise TypeError(f"{caller}() expected {expected}, got {type(new_state).__name__}")
    if len(data) != RNG_STATE_SIZE:
        raise ValueError(f"{caller}(): the state must be {RNG_STATE_SIZE} bytes, got {len(data)}")
    return data


def get_rng_state(device: DeviceLike = "mps") -> np.ndarray:
    """The default generator's state: 44 bytes, uint8 (layout in mpsrt/generator.h)."""
    return _C.default_generator(_rng_device(device, "get_rng_state")).get_state()


def set_rng_state(new_state: Any, device: DeviceLike = "mps") -> None:
    """Restores a state from get_rng_state()."""
    data = _state_bytes(new_state, "set_rng_state")
    _C.default_generator(_rng_device(device, "set_rng_state"))._set_state_bytes(data)


def get_rng_state_all() -> list[np.ndarray]:
    return [_C.default_generator(d).get_state() for d in range(_C.device_count())]


def set_rng_state_all(new_states: Sequence[Any]) -> None:
    try:
        states = list(new_states)
    except TypeError:
        raise TypeError(
            "set_rng_state_all() expected a sequence of 44-byte states (one per device), got "
            f"{type(new_states).__name__}"
        ) from None
    if len(states) != _C.device_count():
        raise ValueError(
            f"set_rng_state_all(): {len(states)} states for {_C.device_count()} devices"
        )
    data = [_state_bytes(s, "set_rng_state_all") for s in states]
    for d, blob in enumerate(data):
        _C.default_generator(d)._set_state_bytes(blob)


def _check_buffer(self: Any, caller: str) -> None:
    if not isinstance(self, Buffer):
        raise TypeError(f"{caller}() expected an mpsrt.Buffer, got {type(self).__name__}")


def _check_generator(self: Any, caller: str) -> None:
    if not isinstance(self, Generator):
        raise TypeError(f"{caller}() expected an mpsrt.Generator, got {type(self).__name__}")


def _generator_set_state(self: Generator, new_state: Any) -> None:
    """Restores a state from get_state()."""
    _check_generator(self, "Generator.set_state")
    self._set_state_bytes(_state_bytes(new_state, "Generator.set_state"))


_native_manual_seed = Generator.manual_seed
_native_set_offset = Generator.set_offset


def _generator_manual_seed(self: Generator, seed: int) -> Generator:
    """Sets the seed (as mpsrt.manual_seed: -2**63 <= seed < 2**64, negative seeds wrap) and
    resets the offset to 0; returns the generator."""
    _check_generator(self, "Generator.manual_seed")
    return _native_manual_seed(self, _seed_value(seed, "Generator.manual_seed"))


def _generator_set_offset(self: Generator, offset: int) -> None:
    """Sets the Philox offset (in 128-bit blocks), 0 <= offset < 2**64."""
    _check_generator(self, "Generator.set_offset")
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"Generator.set_offset() expected an int, got {type(offset).__name__}")
    if not 0 <= offset < (1 << 64):
        raise ValueError(f"Generator.set_offset(): offset {offset} is out of range [0, 2**64)")
    _native_set_offset(self, offset)


def _generator_clone_state(self: Generator) -> Generator:
    """A new Generator on the same device with a copy of this one's state (seed and offset);
    the two then advance independently (torch.Generator.clone_state())."""
    _check_generator(self, "Generator.clone_state")
    return _native_clone_state(self)


def _generator_graphsafe_get_state(self: Generator) -> Generator:
    """Not supported: mpsrt has no graph capture (torch's CPU generators raise the same)."""
    raise NotImplementedError(
        "graphsafe_get_state is not supported in this Generator: mpsrt has no graph capture; "
        "use clone_state() or get_state()"
    )


def _generator_graphsafe_set_state(self: Generator, state: Generator) -> None:
    """Not supported: mpsrt has no graph capture (torch's CPU generators raise the same)."""
    raise NotImplementedError(
        "graphsafe_set_state is not supported in this Generator: mpsrt has no graph capture; "
        "use set_state(other.get_state())"
    )


_native_clone_state = Generator.clone_state
Generator.clone_state = _generator_clone_state
Generator.graphsafe_get_state = _generator_graphsafe_get_state
Generator.graphsafe_set_state = _generator_graphsafe_set_state
Generator.set_state = _generator_set_state
Generator.manual_seed = _generator_manual_seed
Generator.set_offset = _generator_set_offset


# ---------------------------------------------------------------- random fills


def _generator_for(buf: Buffer, generator: Generator | None, caller: str) -> Generator:
    if generator is None:
        return _C.default_generator(buf.device)
    if not isinstance(generator, Generator):
        raise TypeError(
            f"{caller}(): generator must be an mpsrt.Generator or None, got "
            f"{type(generator).__name__}"
        )
    return generator


def _float(x: Any, name: str, caller: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{caller}(): {name} must be a number, got {type(x).__name__}")
    try:
        return float(x)
    except OverflowError:  # an int beyond the float range: not finite, as the core says
        return float("inf") if x > 0 else float("-inf")


def _fill(
    buf: Buffer,
    op: str,
    generator: Generator | None,
    caller: str,
    *,
    a: float = 0.0,
    b: float = 1.0,
    low: int = 0,
    rng: int = 1,
    p: float = 0.5,
) -> Buffer:
    gen = _generator_for(buf, generator, caller)
    _C._random_fill(buf, op, a, b, low, rng, p, gen)
    return buf


def _uniform_(
    self: Buffer, low: float = 0.0, high: float = 1.0, generator: Generator | None = None
) -> Buffer:
    """Fills with numbers uniform in [low, high), on the current stream."""
    _check_buffer(self, "uniform_")
    if not _supports("uniform", self.dtype):
        raise _DTypeNotImplementedError(
            f"uniform_() needs a floating-point Buffer, got {self.dtype}"
        )
    lo, hi = _float(low, "low", "uniform_"), _float(high, "high", "uniform_")
    return _fill(self, "uniform", generator, "uniform_", a=lo, b=hi)


def _normal_(
    self: Buffer, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None
) -> Buffer:
    """Fills with normal numbers of the given mean and standard deviation."""
    _check_buffer(self, "normal_")
    if not _supports("normal", self.dtype):
        raise _DTypeNotImplementedError(
            f"normal_() needs a floating-point Buffer, got {self.dtype}"
        )
    m, s = _float(mean, "mean", "normal_"), _float(std, "std", "normal_")
    return _fill(self, "normal", generator, "normal_", a=m, b=s)


def _int_arg(x: Any, name: str, caller: str) -> int:
    if isinstance(x, bool):
        raise TypeError(f"{caller}(): {name} must be an int, got bool")
    try:
        return operator.index(x)
    except TypeError:
        raise TypeError(f"{caller}(): {name} must be an int, got {type(x).__name__}") from None


def _random_(
    self: Buffer, low: int = 0, high: int | None = None, generator: Generator | None = None
) -> Buffer:
    """Fills with integers uniform in [low, high), written as the Buffer's dtype (every dtype:
    integers, floats and bool, as torch's Tensor.random_). The default high is torch's
    random_() range: the dtype's maximum + 1 for integers, 2**digits + 1 for floats (every
    integer the dtype holds exactly), 2 for bool."""
    _check_buffer(self, "random_")
    if not _supports("int", self.dtype):
        raise _DTypeNotImplementedError(f"random_() cannot write {self.dtype}")
    dmin, dmax = _int_bounds(self.dtype)
    lo = _int_arg(low, "low", "random_")
    hi = dmax if high is None else high
    hi = _int_arg(hi, "high", "random_")
    if not (hi < lo or lo < -(1 << 63) or lo >= (1 << 63) or hi - lo >= (1 << 64)):
        # The core checks the range (non-empty, within the dtype).
        return _fill(self, "int", generator, "random_", low=lo, rng=hi - lo)
    # Values the C++ API cannot carry (int64 low, uint64 range): refused here in its words.
    if hi < lo:
        raise ValueError(f"random_(): expected low < high, got low={lo}, high={hi}")
    if lo < dmin or hi > dmax:
        raise ValueError(f"random_(): [{lo}, {hi}) does not fit in {self.dtype} ([{dmin}, {dmax}))")
    raise ValueError(f"random_(): [{lo}, {hi}) has 2**64 values; at most 2**64 - 1 are supported")


def _bernoulli_(self: Buffer, p: float = 0.5, generator: Generator | None = None) -> Buffer:
    """Fills with 1 with probability p, else 0."""
    _check_buffer(self, "bernoulli_")
    if not _supports("bernoulli", self.dtype):
        raise _DTypeNotImplementedError(f"bernoulli_() cannot write {self.dtype}")
    pv = _float(p, "p", "bernoulli_")
    return _fill(self, "bernoulli", generator, "bernoulli_", p=pv)


Buffer.uniform_ = _uniform_
Buffer.normal_ = _normal_
Buffer.random_ = _random_
Buffer.bernoulli_ = _bernoulli_


def _shape(size: tuple[Any, ...], caller: str) -> Any:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    if len(size) == 0:
        raise TypeError(f"{caller}() missing the size")
    return size


def _new(size: Any, dtype: str, device: DeviceLike, stream: Any) -> Buffer:
    return _C.empty(size, dtype, device, stream)


def _on(stream: Any) -> StreamContext:
    return StreamContext(stream)


def rand(
    *size: Any,
    dtype: str = "float32",
    generator: Generator | None = None,
    device: DeviceLike = None,
    stream: Any = None,
) -> Buffer:
    """Numbers uniform in [0, 1)."""
    buf = _new(_shape(size, "rand"), dtype, device, stream)
    with _on(stream):
        return _uniform_(buf, 0.0, 1.0, generator)


def randn(
    *size: Any,
    dtype: str = "float32",
    generator: Generator | None = None,
    device: DeviceLike = None,
    stream: Any = None,
) -> Buffer:
    """Standard normal numbers."""
    buf = _new(_shape(size, "randn"), dtype, device, stream)
    with _on(stream):
        return _normal_(buf, 0.0, 1.0, generator)


def randint(
    low: int,
    high: Any = None,
    size: Any = None,
    *,
    dtype: str = "int64",
    generator: Generator | None = None,
    device: DeviceLike = None,
    stream: Any = None,
) -> Buffer:
    """Integers uniform in [low, high); randint(high, size) draws from [0, high). dtype: any
    (integers, floats, bool), as torch.randint."""
    if size is None:
        if isinstance(high, (tuple, list)):
            low, high, size = 0, low, high
        else:
            raise TypeError("randint() missing the size")
    if high is None:
        raise TypeError("randint() missing high")
    buf = _new(size, dtype, device, stream)
    with _on(stream):
        return _random_(buf, low, high, generator)


def bernoulli(
    p: float,
    size: Any,
    *,
    dtype: str = "float32",
    generator: Generator | None = None,
    device: DeviceLike = None,
    stream: Any = None,
) -> Buffer:
    """1 with probability p, else 0."""
    buf = _new(size, dtype, device, stream)
    with _on(stream):
        return _bernoulli_(buf, p, generator)


def random_bits(
    size: Any, *, generator: Generator | None = None, device: DeviceLike = None, stream: Any = None
) -> Buffer:
    """Raw Philox words (uint32): word j of the op is the Random123 output for its counter."""
    buf = _new(size, "uint32", device, stream)
    with _on(stream):
        return _fill(buf, "bits", generator, "random_bits")


__all__ = [
    "Generator",
    "bernoulli",
    "default_generator",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "rand",
    "randint",
    "randn",
    "random_bits",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
]
