"""Random numbers: Philox4x32-10 generators and random Buffers (torch.mps / torch.cuda names).

Every op follows the stream definition of mpsrt/philox.h, so its numbers do not depend on
the backend, the stream, the thread count or the machine.
"""

from __future__ import annotations

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
# (mpsrt::random_fill); the fills are Buffer methods bound in C++ (uniform_, normal_, random_,
# bernoulli_), as are the seed and state conversions these functions share with Generator.
_seed_value = _C._seed_value
_state_bytes = _C._rng_state_bytes


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
        return buf.uniform_(0.0, 1.0, generator)


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
        return buf.normal_(0.0, 1.0, generator)


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
        return buf.random_(low, high, generator)


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
        return buf.bernoulli_(p, generator)


def random_bits(
    size: Any, *, generator: Generator | None = None, device: DeviceLike = None, stream: Any = None
) -> Buffer:
    """Raw Philox words (uint32): word j of the op is the Random123 output for its counter."""
    buf = _new(size, "uint32", device, stream)
    with _on(stream):
        return _C._random_fill(buf, "bits", generator=generator, caller="random_bits")


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
