"""Collectives across the devices of the active backend (torch.cuda.comm, over Buffers).

Data moves through host-visible memory: each source is read once its device's work is done
and written into new buffers on the destination devices.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import _C
from ._utils import DeviceLike, device_index

Buffer = _C.Buffer


def _buffer(obj: object, caller: str) -> Buffer:
    if not isinstance(obj, Buffer):
        raise TypeError(f"{caller}() expected an mpsrt.Buffer, got {type(obj).__name__}")
    return obj


def _buffers(bufs: Sequence[Buffer], caller: str) -> list[Buffer]:
    if isinstance(bufs, (str, bytes)) or not isinstance(bufs, Sequence):
        raise TypeError(f"{caller}() expected a sequence of Buffers, got {type(bufs).__name__}")
    if len(bufs) == 0:
        raise ValueError(f"{caller}() needs at least one Buffer")
    return [_buffer(b, caller) for b in bufs]


def _devices(devices: Sequence[DeviceLike], caller: str) -> list[int]:
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Sequence):
        raise TypeError(f"{caller}() expected a sequence of devices, got {type(devices).__name__}")
    if len(devices) == 0:
        raise ValueError(f"{caller}() needs at least one device")
    return [device_index(d, optional=False, caller=caller) for d in devices]


def _bits(buf: Buffer) -> np.ndarray:
    """The buffer's elements as unsigned integers of their width (exact for every dtype)."""
    raw = buf._raw()
    return raw.view(f"<u{buf.itemsize}").reshape(buf.shape)


def _new(bits: np.ndarray, dtype: str, device: int) -> Buffer:
    out = _C.empty(tuple(bits.shape), dtype, device)
    out.copy_(np.ascontiguousarray(bits))
    return out


def _dim(dim: int, ndim: int, caller: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{caller}(): dim must be an int, got {type(dim).__name__}")
    if not -ndim <= dim < ndim:
        raise ValueError(f"{caller}(): dim {dim} is out of range for {ndim} dimensions")
    return dim % ndim


def broadcast(buf: Buffer, devices: Sequence[DeviceLike]) -> tuple[Buffer, ...]:
    """A copy of `buf` on each device of `devices`."""
    src = _bits(_buffer(buf, "broadcast"))
    return tuple(_new(src, buf.dtype, d) for d in _devices(devices, "broadcast"))


def scatter(
    buf: Buffer,
    devices: Sequence[DeviceLike],
    chunk_sizes: Sequence[int] | None = None,
    dim: int = 0,
) -> tuple[Buffer, ...]:
    """Splits `buf` along `dim` into one chunk per device (equal chunks, as torch.chunk, unless
    `chunk_sizes` is given; they must add up to the size of that dimension)."""
    _buffer(buf, "scatter")
    devs = _devices(devices, "scatter")
    if not buf.shape:
        raise ValueError("scatter() needs a Buffer with at least one dimension")
    d = _dim(dim, len(buf.shape), "scatter")
    n = buf.shape[d]
    if chunk_sizes is None:
        # As torch.chunk: chunks of ceil(n / devices); the last devices may get none.
        step = max(1, -(-n // len(devs)))
        sizes = [min(step, n - i * step) for i in range(len(devs)) if n - i * step > 0]
        devs = devs[: len(sizes)]
    else:
        sizes = list(chunk_sizes)
        if len(sizes) != len(devs):
            raise ValueError(f"scatter(): {len(sizes)} chunk sizes for {len(devs)} devices")
        if any(isinstance(s, bool) or not isinstance(s, int) for s in sizes):
            raise TypeError("scatter(): chunk sizes must be ints")
        if any(s < 0 for s in sizes):
            raise ValueError("scatter(): chunk sizes must be >= 0")
        if sum(sizes) != n:
            raise ValueError(
                f"scatter(): chunk sizes add up to {sum(sizes)}, but dimension {d} has size {n}"
            )
    src = _bits(buf)
    out, start = [], 0
    for dev, size in zip(devs, sizes):
        part = np.take(src, np.arange(start, start + size), axis=d)
        out.append(_new(part, buf.dtype, dev))
        start += size
    return tuple(out)


def gather(bufs: Sequence[Buffer], dim: int = 0, destination: DeviceLike = None) -> Buffer:
    """Concatenates `bufs` along `dim` into a new Buffer on `destination` (default: the
    current device)."""
    bs = _buffers(bufs, "gather")
    dtype = bs[0].dtype
    if any(b.dtype != dtype for b in bs):
        raise ValueError("gather(): all Buffers must have the same dtype")
    if not bs[0].shape:
        raise ValueError("gather() needs Buffers with at least one dimension")
    d = _dim(dim, len(bs[0].shape), "gather")
    for b in bs:
        if len(b.shape) != len(bs[0].shape) or any(
            x != y for i, (x, y) in enumerate(zip(b.shape, bs[0].shape)) if i != d
        ):
            raise ValueError(
                f"gather(): shapes {bs[0].shape} and {b.shape} differ outside dimension {d}"
            )
    dest = device_index(destination, caller="gather")
    return _new(np.concatenate([_bits(b) for b in bs], axis=d), dtype, dest)


def _to_float32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _from_float32(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
    nan = np.isnan(x)
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


def reduce_add(bufs: Sequence[Buffer], destination: DeviceLike = None) -> Buffer:
    """The element-wise sum of `bufs` (same shape and dtype) in a new Buffer on
    `destination` (default: the current device)."""
    bs = _buffers(bufs, "reduce_add")
    dtype, shape = bs[0].dtype, bs[0].shape
    for b in bs:
        if b.dtype != dtype or b.shape != shape:
            raise ValueError(
                f"reduce_add(): Buffers must share shape and dtype; got "
                f"{shape} {dtype} and {b.shape} {b.dtype}"
            )
    dest = device_index(destination, caller="reduce_add")
    if dtype == "bfloat16":
        total = _to_float32(_bits(bs[0])).copy()
        for b in bs[1:]:
            total += _to_float32(_bits(b))
        return _new(_from_float32(total), dtype, dest)
    total = bs[0].numpy().copy()
    for b in bs[1:]:
        total += b.numpy()
    return _new(total.view(f"<u{bs[0].itemsize}"), dtype, dest)


__all__ = ["broadcast", "gather", "reduce_add", "scatter"]
