"""Collectives across the devices of the active backend (torch.cuda.comm, over Buffers).

Data moves through host memory: each source is read (``Buffer._raw()``) once its device's work
is done and written (``Buffer.copy_``) into the destination buffers -- aliases of the memory on
unified memory, staged copies on discrete memory, so devices of either model mix; a copy
between two buffers of one device is a device copy on that device's current stream. As in
torch, what already sits on the right device is not copied: broadcast returns the source itself
for its own device, and scatter returns a view of the source for a chunk that stays on the
source's device (a chunk along a later dimension is strided, which Buffers cannot be, so that
one is a copy).

The out= forms check their outputs with torch.cuda.comm's words; torch raises RuntimeError for
those and API.md says a wrong value is a ValueError, so they raise CommError, which is both.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

import numpy as np

from . import _C
from ._utils import DeviceLike, device_index
from .streams import stream as _stream_context

Buffer = _C.Buffer
Stream = _C.Stream


class CommError(RuntimeError, ValueError):
    """A wrong out=, devices=, chunk_sizes=, destination= or streams= combination or output
    shape: torch.cuda.comm's RuntimeError, and a ValueError as API.md has for wrong values (as
    numpy's AxisError is both a ValueError and an IndexError)."""


def _buffer(obj: object, caller: str) -> Buffer:
    if not isinstance(obj, Buffer):
        raise TypeError(f"{caller}() expected an mpsrt.Buffer, got {type(obj).__name__}")
    obj.data_ptr  # noqa: B018 -- raises ValueError for a released Buffer
    return obj


def _buffers(bufs: Sequence[Buffer], caller: str, what: str = "Buffers") -> list[Buffer]:
    if isinstance(bufs, (str, bytes)) or not isinstance(bufs, Sequence):
        raise TypeError(f"{caller}() expected a sequence of {what}, got {type(bufs).__name__}")
    if len(bufs) == 0:
        raise ValueError(f"{caller}() needs at least one Buffer")
    return [_buffer(b, caller) for b in bufs]


def _outputs(out: Sequence[Buffer], caller: str) -> list[Buffer]:
    if isinstance(out, (str, bytes)) or not isinstance(out, Sequence):
        raise TypeError(
            f"{caller}() expected out to be a sequence of Buffers, got {type(out).__name__}"
        )
    if len(out) == 0:
        raise CommError(f"Expected at least one output tensor to {caller} to")
    return [_buffer(b, caller) for b in out]


def _devices(devices: Sequence[DeviceLike], caller: str) -> list[int]:
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Sequence):
        raise TypeError(f"{caller}() expected a sequence of devices, got {type(devices).__name__}")
    if len(devices) == 0:
        raise ValueError(f"{caller}() needs at least one device")
    return [device_index(d, optional=False, caller=caller) for d in devices]


def _streams(streams: Sequence[Stream | None] | None, caller: str) -> list[Stream | None]:
    if streams is None:
        return []
    if isinstance(streams, (str, bytes)) or not isinstance(streams, Sequence):
        raise TypeError(
            f"{caller}(): streams must be None or a sequence of mpsrt.Stream or None, got "
            f"{type(streams).__name__}"
        )
    for s in streams:
        if s is not None and not isinstance(s, Stream):
            raise TypeError(
                f"{caller}(): streams must hold mpsrt.Stream or None, got {type(s).__name__}"
            )
    return list(streams)


def _check_stream(streams: list[Stream | None], i: int, device: int) -> Stream | None:
    s = streams[i] if i < len(streams) else None
    if s is not None and s.device != device:
        raise CommError(
            f"Expected the device associated with the stream at index {i} (was {s.device}) "
            f"to match the device supplied at that index (expected {device})"
        )
    return s


def _shape(shape: Sequence[int]) -> str:
    """A shape as torch prints sizes: [2, 3]."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _same_dtype(out: Buffer, src: Buffer, i: int | None, caller: str) -> None:
    if out.dtype != src.dtype:
        which = "the out Buffer" if i is None else f"the output Buffer at index {i}"
        raise ValueError(
            f"{caller}(): {which} has dtype {out.dtype} but the source {src.dtype}; mpsrt.comm "
            "copies bytes and does not convert dtypes"
        )


def _bits(buf: Buffer) -> np.ndarray:
    """The buffer's elements as unsigned integers of their width (exact for every dtype)."""
    raw = buf._raw()
    return raw.view(f"<u{buf.itemsize}").reshape(buf.shape)


def _new(bits: np.ndarray, dtype: str, device: int, stream: Stream | None = None) -> Buffer:
    out = _C.empty(tuple(bits.shape), dtype, device, stream)
    out.copy_(np.ascontiguousarray(bits))
    return out


def _dim(dim: int, ndim: int, caller: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{caller}(): dim must be an int, got {type(dim).__name__}")
    if not -ndim <= dim < ndim:
        raise ValueError(f"{caller}(): dim {dim} is out of range for {ndim} dimensions")
    return dim % ndim


def _part(buf: Buffer, dim: int, start: int, size: int) -> Buffer | None:
    """Indices [start, start + size) of `dim` as a view of `buf`, or None where that range is
    not contiguous in memory (a dimension before `dim` is longer than 1)."""
    if any(d != 1 for d in buf.shape[:dim]):
        return None
    row = prod(buf.shape[dim + 1 :]) * buf.itemsize
    shape = (*buf.shape[:dim], size, *buf.shape[dim + 1 :])
    return buf.view(start * row, shape)


def _copy_into(dst: Buffer, src: Buffer, stream: Stream | None = None) -> None:
    """dst <- src, equal shapes and dtypes: a device copy on one device (on `stream`, else the
    device's current stream), else through host memory; either way after the work already
    queued on every stream of the devices (as the host path always is)."""
    if dst.device == src.device:
        if dst.data_ptr == src.data_ptr and dst.nbytes == src.nbytes:
            return  # the same memory: nothing to do
        _C.synchronize(src.device)  # the copy's stream need not be the one the source used
        if stream is None:
            dst.copy_(src)
        else:
            with _stream_context(stream):
                dst.copy_(src)
    else:
        dst.copy_(_bits(src))


def broadcast(
    tensor: Buffer,
    devices: Sequence[DeviceLike] | None = None,
    *,
    out: Sequence[Buffer] | None = None,
) -> tuple[Buffer, ...]:
    """`tensor` on each device of `devices`: the Buffer itself on its own device, a copy
    elsewhere; or, with `out` (and no `devices`), copied into each Buffer of `out` (same shape
    and dtype), which are returned."""
    if (devices is None) == (out is None):
        raise CommError(
            "Exactly one of 'devices' and 'out' must be specified, but got "
            f"devices={devices} and out={out}"
        )
    src = _buffer(tensor, "broadcast")
    if out is None:
        result, bits = [], None
        for d in _devices(devices, "broadcast"):
            if d == src.device:
                result.append(src)
                continue
            if bits is None:
                bits = _bits(src)
            result.append(_new(bits, src.dtype, d))
        return tuple(result)
    outs = _outputs(out, "broadcast")
    for i, o in enumerate(outs):
        if o.shape != src.shape:
            raise CommError(
                "Expected all output tensors to have same shape as the source tensor "
                f"{_shape(src.shape)}, but output tensor at index {i} has shape {_shape(o.shape)}"
            )
        _same_dtype(o, src, i, "broadcast")
    for o in outs:
        _copy_into(o, src)
    return tuple(outs)


def scatter(
    tensor: Buffer,
    devices: Sequence[DeviceLike] | None = None,
    chunk_sizes: Sequence[int] | None = None,
    dim: int = 0,
    streams: Sequence[Stream | None] | None = None,
    *,
    out: Sequence[Buffer] | None = None,
) -> tuple[Buffer, ...]:
    """Splits `tensor` along `dim` into one chunk per device (equal chunks, as torch.chunk, unless
    `chunk_sizes` is given; they must add up to the size of that dimension). A chunk for the
    source's own device is a view of it where the chunk is contiguous (dim 0, or only
    dimensions of size 1 before dim), else a copy. `streams[i]` (an mpsrt.Stream of device i's
    device, or None) is the stream chunk i is allocated or copied on. With `out` (and no
    `devices` or `chunk_sizes`), the chunks are copied into `out`, whose sizes along `dim` give
    the chunk sizes, and `out` is returned."""
    if out is not None:
        if devices is not None:
            raise CommError(
                "'devices' must not be specified when 'out' is specified, but got "
                f"devices={devices}"
            )
        if chunk_sizes is not None:
            raise CommError(
                "'chunk_sizes' must not be specified when 'out' is specified, but got "
                f"chunk_sizes={chunk_sizes}"
            )
    buf = _buffer(tensor, "scatter")
    if out is None:
        devs = _devices(devices, "scatter")
    if not buf.shape:
        raise ValueError("scatter() needs a Buffer with at least one dimension")
    d = _dim(dim, len(buf.shape), "scatter")
    n = buf.shape[d]
    strms = _streams(streams, "scatter")
    if out is not None:
        return _scatter_out(buf, _outputs(out, "scatter"), d, strms)
    if chunk_sizes is None:
        # As torch.chunk: chunks of ceil(n / devices); the last devices may get none.
        step = max(1, -(-n // len(devs)))
        sizes = [min(step, n - i * step) for i in range(len(devs)) if n - i * step > 0]
        devs = devs[: len(sizes)]
    else:
        if isinstance(chunk_sizes, (str, bytes)) or not isinstance(chunk_sizes, Sequence):
            raise TypeError(
                f"scatter(): chunk sizes must be a sequence of ints, got "
                f"{type(chunk_sizes).__name__}"
            )
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
    src, out_bufs, start = None, [], 0
    for i, (dev, size) in enumerate(zip(devs, sizes)):
        if dev == buf.device:
            chunk = _part(buf, d, start, size)  # torch: chunks on the source's device are views
            if chunk is None:
                chunk = _C.empty((*buf.shape[:d], size, *buf.shape[d + 1 :]), buf.dtype, dev)
                _copy_into_strided(chunk, buf, d, start)
        else:
            s = _check_stream(strms, i, dev)
            if src is None:
                src = _bits(buf)
            part = np.take(src, np.arange(start, start + size), axis=d)
            chunk = _new(part, buf.dtype, dev, s)
        out_bufs.append(chunk)
        start += size
    return tuple(out_bufs)


def _copy_into_strided(dst: Buffer, src: Buffer, dim: int, start: int) -> None:
    """dst <- src's indices [start, start + dst.shape[dim]) of `dim`, through host memory."""
    part = np.take(_bits(src), np.arange(start, start + dst.shape[dim]), axis=dim)
    dst.copy_(np.ascontiguousarray(part))


def _scatter_out(
    buf: Buffer, outs: list[Buffer], d: int, strms: list[Stream | None]
) -> tuple[Buffer, ...]:
    n, total, sizes = buf.shape[d], 0, []
    for i, o in enumerate(outs):
        same_ndim = len(o.shape) == len(buf.shape)
        if same_ndim:
            total += o.shape[d]
            sizes.append(o.shape[d])
        if not same_ndim or (*o.shape[:d], n, *o.shape[d + 1 :]) != buf.shape:
            raise CommError(
                f"Output tensor at index {i} has incorrect shape: {_shape(o.shape)}. Expected "
                f"same shape except for scatter dim {d} as the source tensor: {_shape(buf.shape)}"
            )
        _same_dtype(o, buf, i, "scatter")
    if total != n:
        raise CommError(
            f"Total size for output tensors along scatter dim {d} does not match the source "
            f"tensor size at dim {d}. Expected {n}, but got total size {total}"
        )
    chosen = [_check_stream(strms, i, o.device) for i, o in enumerate(outs)]
    start = 0
    for o, size, s in zip(outs, sizes, chosen):
        chunk = _part(buf, d, start, size)
        if chunk is not None:
            _copy_into(o, chunk, s)
        else:
            _copy_into_strided(o, buf, d, start)
        start += size
    return tuple(outs)


def gather(
    tensors: Sequence[Buffer],
    dim: int = 0,
    destination: DeviceLike = None,
    *,
    out: Buffer | None = None,
) -> Buffer:
    """Concatenates `tensors` along `dim` into a new Buffer on `destination` (default: the
    current device), or, with `out` (and no `destination`), into `out` (its shape must be the
    concatenation's, its dtype theirs), which is returned."""
    if out is not None and destination is not None:
        raise CommError(
            "'destination' must not be specified when 'out' is specified, but got "
            f"destination={destination}"
        )
    bs = _buffers(tensors, "gather")
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
    if out is None:
        dest = device_index(destination, caller="gather")
        return _new(np.concatenate([_bits(b) for b in bs], axis=d), dtype, dest)
    o = _buffer(out, "gather")
    expected = (*bs[0].shape[:d], sum(b.shape[d] for b in bs), *bs[0].shape[d + 1 :])
    if o.shape != expected:
        raise CommError(
            f"Expected out tensor to have shape {_shape(expected)}, but got {_shape(o.shape)}"
        )
    _same_dtype(o, bs[0], None, "gather")
    if _part(o, d, 0, 0) is None:  # the pieces are strided in out: assemble on the host
        o.copy_(np.ascontiguousarray(np.concatenate([_bits(b) for b in bs], axis=d)))
        return o
    start = 0
    for b in bs:
        _copy_into(_part(o, d, start, b.shape[d]), b)
        start += b.shape[d]
    return o


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
