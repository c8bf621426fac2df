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
    """A device's default generator: the one random functions use without ``generator=``.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Returns:
        mpsrt.Generator: The generator (the same object for the same device).

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> g = mpsrt.default_generator()
        >>> g.initial_seed() == mpsrt.initial_seed(), g.device == mpsrt.current_device()
        (True, True)
    """
    return _C.default_generator(_rng_device(device, "default_generator"))


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator and resets its offset to 0.

    Args:
        seed: An int, -2**63 <= seed < 2**64 (negative seeds wrap, as torch's).

    Raises:
        TypeError: ``seed`` is not an int.
        ValueError: ``seed`` is out of range.

    Example:
        >>> import mpsrt
        >>> state = mpsrt.get_rng_state()  # to restore it afterwards
        >>> mpsrt.manual_seed(42)
        >>> mpsrt.initial_seed(), mpsrt.default_generator().get_offset()
        (42, 0)
        >>> mpsrt.set_rng_state(state)
    """
    _C.default_generator(_C.current_device()).manual_seed(_seed_value(seed, "manual_seed"))


def manual_seed_all(seed: int) -> None:
    """Seeds the default generator of every device and resets their offsets to 0.

    Args:
        seed: An int, -2**63 <= seed < 2**64 (negative seeds wrap, as torch's).

    Raises:
        TypeError: ``seed`` is not an int.
        ValueError: ``seed`` is out of range.

    Example:
        >>> import mpsrt
        >>> states = mpsrt.get_rng_state_all()
        >>> mpsrt.manual_seed_all(7)
        >>> {mpsrt.default_generator(d).initial_seed() for d in range(mpsrt.device_count())}
        {7}
        >>> mpsrt.set_rng_state_all(states)
    """
    s = _seed_value(seed, "manual_seed_all")
    for d in range(_C.device_count()):
        _C.default_generator(d).manual_seed(s)


def seed() -> None:
    """Seeds the current device's default generator nondeterministically.

    Returns None, as torch.mps.seed(); initial_seed() then gives the seed.

    Example:
        >>> import mpsrt
        >>> state = mpsrt.get_rng_state()
        >>> mpsrt.seed()
        >>> 0 <= mpsrt.initial_seed() < 2**64
        True
        >>> mpsrt.set_rng_state(state)
    """
    _C.default_generator(_C.current_device()).seed()


def seed_all() -> None:
    """Seeds every device's default generator nondeterministically.

    Example:
        >>> import mpsrt
        >>> states = mpsrt.get_rng_state_all()
        >>> mpsrt.seed_all()
        >>> mpsrt.default_generator().get_offset()
        0
        >>> mpsrt.set_rng_state_all(states)
    """
    for d in range(_C.device_count()):
        _C.default_generator(d).seed()


def initial_seed() -> int:
    """The seed of the current device's default generator.

    Returns:
        int: The seed last set (manual_seed(), seed() or set_rng_state()), 0 <= seed < 2**64.

    Example:
        >>> import mpsrt
        >>> state = mpsrt.get_rng_state()
        >>> mpsrt.manual_seed(-1)  # negative seeds wrap
        >>> mpsrt.initial_seed() == 2**64 - 1
        True
        >>> mpsrt.set_rng_state(state)
    """
    return _C.default_generator(_C.current_device()).initial_seed()


def get_rng_state(device: DeviceLike = "mps") -> np.ndarray:
    """A device's default generator's state, as torch.mps.get_rng_state.

    Args:
        device: A device index, a device string (``"mps"``, ``"mps:0"``), a torch.device, or
            None for the current device.

    Returns:
        numpy.ndarray: 44 bytes (uint8) in torch.mps's layout: bytes 0-27 ``uint32
        state[7]``, 28-35 the ``uint64`` seed, 36-43 the ``uint64`` offset (little-endian).

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> state = mpsrt.get_rng_state()
        >>> state.dtype, state.shape
        (dtype('uint8'), (44,))
        >>> int.from_bytes(state[28:36].tobytes(), "little") == mpsrt.initial_seed()
        True
    """
    return _C.default_generator(_rng_device(device, "get_rng_state")).get_state()


def set_rng_state(new_state: Any, device: DeviceLike = "mps") -> None:
    """Restores a device's default generator's state from get_rng_state() (seed and offset).

    Args:
        new_state: A contiguous uint8 buffer of 44 bytes: a numpy array, bytes, a torch
            ByteTensor.
        device: A device index, a device string (``"mps"``, ``"mps:0"``), a torch.device, or
            None for the current device.

    Raises:
        TypeError: ``new_state`` is not such a buffer, or ``device`` has a wrong type.
        ValueError: ``new_state`` is not 44 bytes long (the message names the expected 44),
            or ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> state = mpsrt.get_rng_state()
        >>> a = mpsrt.rand(4).numpy()
        >>> mpsrt.set_rng_state(state)
        >>> bool((mpsrt.rand(4).numpy() == a).all())
        True
        >>> mpsrt.set_rng_state(state)
    """
    data = _state_bytes(new_state, "set_rng_state")
    _C.default_generator(_rng_device(device, "set_rng_state"))._set_state_bytes(data)


def _get_rng_state_offset(device: DeviceLike = "mps") -> int:
    """A device's default generator's Philox offset, as torch.cuda._get_rng_state_offset.

    Args:
        device: A device index, a device string (``"mps"``, ``"mps:0"``), a torch.device, or
            None for the current device.

    Returns:
        int: The offset, in 128-bit Philox blocks (``Generator.get_offset()``).

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> state = mpsrt.get_rng_state()
        >>> mpsrt._set_rng_state_offset(100)
        >>> mpsrt._get_rng_state_offset()
        100
        >>> mpsrt.set_rng_state(state)
    """
    return _C.default_generator(_rng_device(device, "_get_rng_state_offset")).get_offset()


def _set_rng_state_offset(offset: int, device: DeviceLike = "mps") -> None:
    """Sets a device's default generator's Philox offset (its seed stays), as
    torch.cuda._set_rng_state_offset.

    Args:
        offset: The new offset, in 128-bit Philox blocks: an int in [0, 2**64).
        device: A device index, a device string (``"mps"``, ``"mps:0"``), a torch.device, or
            None for the current device.

    Raises:
        TypeError: ``offset`` is not an int, or ``device`` has a wrong type.
        ValueError: ``offset`` is out of range, or ``device`` names no device of the active
            backend.

    Example:
        >>> import mpsrt
        >>> mpsrt.manual_seed(7)
        >>> a = mpsrt.rand(4).numpy()
        >>> mpsrt._set_rng_state_offset(0)
        >>> bool((mpsrt.rand(4).numpy() == a).all())
        True
    """
    _C.default_generator(_rng_device(device, "_set_rng_state_offset")).set_offset(offset)


def get_rng_state_all() -> list[np.ndarray]:
    """The default generator's state of every device.

    Returns:
        list[numpy.ndarray]: One 44-byte uint8 state (get_rng_state()) per device.

    Example:
        >>> import mpsrt
        >>> states = mpsrt.get_rng_state_all()
        >>> len(states) == mpsrt.device_count(), states[0].nbytes
        (True, 44)
    """
    return [_C.default_generator(d).get_state() for d in range(_C.device_count())]


def set_rng_state_all(new_states: Sequence[Any]) -> None:
    """Restores every device's default generator's state from get_rng_state_all().

    Args:
        new_states: One 44-byte state per device, in device order.

    Raises:
        TypeError: ``new_states`` is not a sequence, or a state is not a uint8 buffer.
        ValueError: The number of states is not the device count, or a state is not 44
            bytes long.

    Example:
        >>> import mpsrt
        >>> states = mpsrt.get_rng_state_all()
        >>> mpsrt.manual_seed_all(3)
        >>> mpsrt.set_rng_state_all(states)
        >>> all((a == b).all() for a, b in zip(mpsrt.get_rng_state_all(), states))
        True
    """
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


def _new(op: str, size: Any, dtype: str, device: DeviceLike, stream: Any) -> Buffer:
    # Allocated in the op's own native function: the snapshots' native frames name it.
    return _C._new_random(op, size, dtype, device, stream)


def _on(stream: Any) -> StreamContext:
    return StreamContext(stream)


def rand(
    *size: Any,
    dtype: str = "float32",
    generator: Generator | None = None,
    device: DeviceLike = None,
    stream: Any = None,
) -> Buffer:
    """A new Buffer of numbers uniform in [0, 1), as torch.rand.

    Args:
        *size: The shape: ints, or one tuple or list of ints.
        dtype: The element type (a name such as ``"float32"``, a numpy dtype or type).
        generator: An :class:`mpsrt.Generator` of the device; None: the device's default one.
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device (or ``stream``'s).
        stream: The :class:`mpsrt.Stream` that allocates and fills the Buffer; None: the
            current stream.

    Returns:
        mpsrt.Buffer: The numbers (a floating-point dtype), the same on every backend for the
        same seed and offset.

    Raises:
        TypeError: The size is missing, an argument has a wrong type, or ``dtype`` is not a
            floating-point type (a DTypeNotImplementedError, also a NotImplementedError).
        ValueError: A size is negative, the dtype is unknown, the device does not exist, or
            the stream is on another device.
        mpsrt.OutOfMemoryError: The allocator cannot provide the memory.

    Example:
        >>> import mpsrt
        >>> g = mpsrt.Generator().manual_seed(0)
        >>> mpsrt.rand(2, 3, generator=g).numpy().round(4)
        array([[0.399 , 0.8805, 0.7357],
               [0.6055, 0.9722, 0.3621]], dtype=float32)
    """
    buf = _new("rand", _shape(size, "rand"), dtype, device, stream)
    with _on(stream):
        return buf.uniform_(0.0, 1.0, generator)


def randn(
    *size: Any,
    dtype: str = "float32",
    generator: Generator | None = None,
    device: DeviceLike = None,
    stream: Any = None,
) -> Buffer:
    """A new Buffer of standard normal numbers, as torch.randn.

    Args:
        *size: The shape: ints, or one tuple or list of ints.
        dtype: The element type (a name such as ``"float32"``, a numpy dtype or type).
        generator: An :class:`mpsrt.Generator` of the device; None: the device's default one.
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device (or ``stream``'s).
        stream: The :class:`mpsrt.Stream` that allocates and fills the Buffer; None: the
            current stream.

    Returns:
        mpsrt.Buffer: The numbers (a floating-point dtype; Box-Muller on pairs of uniforms,
        within 2 ulp of float32 on every backend).

    Raises:
        TypeError: The size is missing, an argument has a wrong type, or ``dtype`` is not a
            floating-point type (a DTypeNotImplementedError, also a NotImplementedError).
        ValueError: A size is negative, the dtype is unknown, the device does not exist, or
            the stream is on another device.
        mpsrt.OutOfMemoryError: The allocator cannot provide the memory.

    Example:
        >>> import mpsrt
        >>> g = mpsrt.Generator().manual_seed(0)
        >>> mpsrt.randn(4, generator=g).numpy().round(3)
        array([ 0.991, -0.925, -0.618, -0.482], dtype=float32)
    """
    buf = _new("randn", _shape(size, "randn"), dtype, device, stream)
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
    """A new Buffer of integers uniform in [low, high), as torch.randint.

    ``randint(high, size)`` draws from [0, high).

    Args:
        low: The lowest value (or ``high``, when ``size`` comes second).
        high: One past the highest value.
        size: The shape: an int or a sequence of ints.
        dtype: The element type: any (integers, floats, bool), as torch.randint.
        generator: An :class:`mpsrt.Generator` of the device; None: the device's default one.
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device (or ``stream``'s).
        stream: The :class:`mpsrt.Stream` that allocates and fills the Buffer; None: the
            current stream.

    Returns:
        mpsrt.Buffer: The integers, written as ``dtype``.

    Raises:
        TypeError: ``size`` or ``high`` is missing, or an argument has a wrong type.
        ValueError: ``low >= high``, the range does not fit in ``dtype``, a size is negative,
            the dtype is unknown, the device does not exist, or the stream is on another
            device.
        mpsrt.OutOfMemoryError: The allocator cannot provide the memory.

    Example:
        >>> import mpsrt
        >>> g = mpsrt.Generator().manual_seed(0)
        >>> mpsrt.randint(0, 10, (8,), generator=g).numpy().tolist()
        [1, 3, 8, 0, 4, 9, 3, 3]
        >>> mpsrt.randint(6, (2,), dtype="int8", generator=g).dtype
        'int8'
    """
    if size is None:
        if isinstance(high, (tuple, list)):
            low, high, size = 0, low, high
        else:
            raise TypeError("randint() missing the size")
    if high is None:
        raise TypeError("randint() missing high")
    buf = _new("randint", size, dtype, device, stream)
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
    """A new Buffer of 1s with probability ``p``, else 0s.

    Args:
        p: The probability of a 1, in [0, 1].
        size: The shape: an int or a sequence of ints.
        dtype: The element type (a name such as ``"float32"``, a numpy dtype or type).
        generator: An :class:`mpsrt.Generator` of the device; None: the device's default one.
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device (or ``stream``'s).
        stream: The :class:`mpsrt.Stream` that allocates and fills the Buffer; None: the
            current stream.

    Returns:
        mpsrt.Buffer: The 0s and 1s, written as ``dtype``.

    Raises:
        TypeError: An argument has a wrong type.
        ValueError: ``p`` is not in [0, 1], a size is negative, the dtype is unknown, the
            device does not exist, or the stream is on another device.
        mpsrt.OutOfMemoryError: The allocator cannot provide the memory.

    Example:
        >>> import mpsrt
        >>> g = mpsrt.Generator().manual_seed(0)
        >>> mpsrt.bernoulli(0.5, 8, generator=g).numpy()
        array([1., 0., 0., 0., 0., 1., 0., 1.], dtype=float32)
    """
    buf = _new("bernoulli", size, dtype, device, stream)
    with _on(stream):
        return buf.bernoulli_(p, generator)


def random_bits(
    size: Any, *, generator: Generator | None = None, device: DeviceLike = None, stream: Any = None
) -> Buffer:
    """A new Buffer of raw Philox4x32-10 words (uint32).

    Word j of the op is Random123's philox4x32-10 output for the generator's key and the
    counter ``offset + j // 4``, lane ``j % 4``.

    Args:
        size: The shape: an int or a sequence of ints.
        generator: An :class:`mpsrt.Generator` of the device; None: the device's default one.
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device (or ``stream``'s).
        stream: The :class:`mpsrt.Stream` that allocates and fills the Buffer; None: the
            current stream.

    Returns:
        mpsrt.Buffer: The words (uint32).

    Raises:
        TypeError: An argument has a wrong type.
        ValueError: A size is negative, the device does not exist, or the stream is on
            another device.
        mpsrt.OutOfMemoryError: The allocator cannot provide the memory.

    Example:
        >>> import mpsrt
        >>> g = mpsrt.Generator().manual_seed(0)
        >>> mpsrt.random_bits(4, generator=g).numpy()
        array([1713891541, 3781805453, 3159862348, 2600524760], dtype=uint32)
    """
    buf = _new("random_bits", size, "uint32", device, stream)
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
