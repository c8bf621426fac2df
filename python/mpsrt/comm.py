"""Collectives across the devices of the active backend (torch.cuda.comm, over Buffers).

Data moves with ``Buffer.copy_``: between two devices a cross-device copy (through host memory:
a memmove between unified memories, staged where a side is discrete, so devices of either
model mix), within one device a device copy on that device's current stream (or the given
stream); each comes after the work already queued on every stream of the source's device. As
in torch, what already sits on the right device is not copied: broadcast returns the source
itself for its own device, and scatter returns views of the source for the chunks that stay on
its device (``Buffer.narrow``: strided views for chunks along a later dimension, as torch's).

Errors are torch.cuda.comm's types and texts. torch raises RuntimeError where API.md says a
wrong value is a ValueError: those raise CommError, which is both; torch's IndexErrors (a dim
out of range, reduce_add of nothing) are CommIndexError, both IndexError and ValueError.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import _C
from ._utils import DeviceLike, device_index
from .streams import stream as _stream_context

Buffer = _C.Buffer
Stream = _C.Stream


class CommError(RuntimeError, ValueError):
    """A wrong out=, devices=, chunk_sizes=, destination= or streams= combination, an empty
    input, or a wrong output shape: torch.cuda.comm's RuntimeError, and a ValueError as API.md
    has for wrong values (as numpy's AxisError is both a ValueError and an IndexError)."""


class CommIndexError(IndexError, ValueError):
    """A dim out of range, or reduce_add() of no Buffer: torch's IndexError, and a ValueError as
    API.md has for wrong values."""


def _buffer(obj: object, caller: str) -> Buffer:
    if not isinstance(obj, Buffer):
        raise TypeError(f"{caller}() expected an mpsrt.Buffer, got {type(obj).__name__}")
    obj.data_ptr  # noqa: B018 -- raises ValueError for a released Buffer
    return obj


def _sequence(obj: object, caller: str, what: str) -> list:
    if isinstance(obj, (str, bytes)) or not isinstance(obj, Sequence):
        raise TypeError(f"{caller}() expected {what}, got {type(obj).__name__}")
    return list(obj)


def _is_host_array(obj: object) -> bool:
    """Host data torch would take as a CPU tensor: a numpy array, or any object with the array
    interface or a CPU DLPack device (a torch CPU tensor)."""
    if isinstance(obj, (np.ndarray, np.generic)) or hasattr(obj, "__array_interface__"):
        return True
    dl_device = getattr(obj, "__dlpack_device__", None)
    if dl_device is None:
        return False
    try:
        kind = dl_device()[0]
    except Exception:  # not a DLPack producer we can ask
        return False
    return kind == 1  # kDLCPU


def _device_buffers(items: Sequence[Buffer], caller: str, what: str, role: str) -> list[Buffer]:
    """The Buffers of an input (role "input") or out= (role "output") sequence: a host array
    among them is torch's RuntimeError (device tensors only), anything else not a Buffer a
    TypeError."""
    bufs = _sequence(items, caller, what)
    name = "tensor" if role == "input" else "output tensor"
    for i, b in enumerate(bufs):
        if not isinstance(b, Buffer) and _is_host_array(b):
            raise CommError(
                f"Expected all {role} tensors to be mpsrt Buffers, but {name} at index {i} has "
                f"device 'cpu' (a {type(b).__module__}.{type(b).__name__})"
            )
    return [_buffer(b, caller) for b in bufs]


def _inputs(tensors: Sequence[Buffer], caller: str) -> list[Buffer]:
    return _device_buffers(tensors, caller, "a sequence of Buffers", "input")


def _outputs(out: Sequence[Buffer], caller: str) -> list[Buffer]:
    return _device_buffers(out, caller, "out to be a sequence of Buffers", "output")


def _devices(devices: Sequence[DeviceLike], caller: str) -> list[int]:
    devs = _sequence(devices, caller, "a sequence of devices")
    return [device_index(d, optional=False, caller=caller) for d in devs]


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


def _dim(dim: int, ndim: int, caller: str) -> int:
    """dim wrapped as torch's maybe_wrap_dim does, with its IndexError text."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{caller}(): dim must be an int, got {type(dim).__name__}")
    if not -ndim <= dim < ndim:
        raise CommIndexError(
            f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got "
            f"{dim})"
        )
    return dim % ndim


def _copy(dst: Buffer, src: Buffer, stream: Stream | None = None) -> None:
    """dst <- src (equal shapes and dtypes; either may be a strided view; any two devices) on
    `stream` (of dst's device), else on dst's device's current stream; after the work already
    queued on every stream of src's device (comm reads what any stream wrote, as it always
    has)."""
    if (
        dst.device == src.device
        and dst.data_ptr == src.data_ptr
        and dst.shape == src.shape
        and dst.stride() == src.stride()
    ):
        return  # the same elements: nothing to do
    _C.synchronize(src.device)
    if stream is None:
        dst.copy_(src)
    else:
        with _stream_context(stream):
            dst.copy_(src)


def _copy_to(src: Buffer, device: int, stream: Stream | None = None) -> Buffer:
    """A new contiguous Buffer on `device` (allocated on `stream` when given) holding src."""
    out = _C.empty(src.shape, src.dtype, device, stream)
    _copy(out, src, stream)
    return out


def _bits(buf: Buffer) -> np.ndarray:
    """The buffer's elements as unsigned integers of their width (exact for every dtype)."""
    if not buf.is_contiguous():
        buf = _copy_to(buf, buf.device)
    raw = buf._raw()
    return raw.view(f"<u{buf.itemsize}").reshape(buf.shape)


def _new(bits: np.ndarray, dtype: str, device: int, stream: Stream | None = None) -> Buffer:
    out = _C.empty(tuple(bits.shape), dtype, device, stream)
    out.copy_(np.ascontiguousarray(bits))
    return out


def broadcast(
    tensor: Buffer,
    devices: Sequence[DeviceLike] | None = None,
    *,
    out: Sequence[Buffer] | None = None,
) -> tuple[Buffer, ...]:
    """Copies a Buffer to each of several devices, as torch.cuda.comm.broadcast.

    Args:
        tensor: The source :class:`mpsrt.Buffer`.
        devices: The devices (indices, device strings or torch.devices): the result holds the
            Buffer itself for its own device and a copy for each other. Not with ``out``.
        out: Buffers of the source's shape and dtype to copy into, on any devices. Not with
            ``devices``.

    Returns:
        tuple[mpsrt.Buffer, ...]: One Buffer per device, or ``out``'s Buffers; () for an empty
        ``devices`` or ``out``, as in torch.

    Raises:
        TypeError: ``tensor`` is not a Buffer, or ``devices`` / ``out`` is not a sequence of
            devices / Buffers.
        ValueError: Both or neither of ``devices`` and ``out`` are given, a device does not
            exist, an ``out`` Buffer has another shape or dtype or is host memory, or
            ``tensor`` was released. Where torch raises a RuntimeError, the error is a
            ``mpsrt.comm.CommError``, both a RuntimeError and a ValueError.

    Example:
        >>> import mpsrt
        >>> src = mpsrt.empty(4, dtype="float32").fill_(2.0)
        >>> copies = mpsrt.comm.broadcast(src, range(mpsrt.device_count()))
        >>> [c.device for c in copies] == list(range(mpsrt.device_count()))
        True
        >>> copies[src.device] is src  # no copy on the source's own device
        True
        >>> out = mpsrt.empty(4, dtype="float32")
        >>> mpsrt.comm.broadcast(src, out=[out])[0].numpy()
        array([2., 2., 2., 2.], dtype=float32)
    """
    if (devices is None) == (out is None):
        raise CommError(
            "Exactly one of 'devices' and 'out' must be specified, but got "
            f"devices={devices} and out={out}"
        )
    src = _buffer(tensor, "broadcast")
    if out is None:
        return tuple(
            src if d == src.device else _copy_to(src, d) for d in _devices(devices, "broadcast")
        )
    outs = _outputs(out, "broadcast")
    for i, o in enumerate(outs):
        if o.shape != src.shape:
            raise CommError(
                "Expected all output tensors to have same shape as the source tensor "
                f"{_shape(src.shape)}, but output tensor at index {i} has shape {_shape(o.shape)}"
            )
        _same_dtype(o, src, i, "broadcast")
    for o in outs:
        _copy(o, src)
    return tuple(outs)


def _chunk_sizes(chunk_sizes: Sequence[int], n: int, d: int, devices: int) -> list[int]:
    """chunk_sizes checked as torch's scatter and split_with_sizes check them."""
    if isinstance(chunk_sizes, (str, bytes)) or not isinstance(chunk_sizes, Sequence):
        raise TypeError(
            f"scatter(): chunk sizes must be a sequence of ints, got {type(chunk_sizes).__name__}"
        )
    sizes = list(chunk_sizes)
    if any(isinstance(s, bool) or not isinstance(s, int) for s in sizes):
        raise TypeError("scatter(): chunk sizes must be ints")
    if len(sizes) != devices:
        raise CommError(
            "Expected devices and chunk_sizes to be of same length, but got len(devices) = "
            f"{devices} and len(chunk_sizes) = {len(sizes)}"
        )
    if any(s < 0 for s in sizes):
        raise CommError(
            "split_with_sizes expects split_sizes have only non-negative entries, but got "
            f"split_sizes={_shape(sizes)}"
        )
    if sum(sizes) != n:
        raise CommError(
            f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at "
            f"dimension {d}), but got split_sizes={_shape(sizes)}"
        )
    return sizes


def scatter(
    tensor: Buffer,
    devices: Sequence[DeviceLike] | None = None,
    chunk_sizes: Sequence[int] | None = None,
    dim: int = 0,
    streams: Sequence[Stream | None] | None = None,
    *,
    out: Sequence[Buffer] | None = None,
) -> tuple[Buffer, ...]:
    """Splits a Buffer along a dimension into one chunk per device, as
    torch.cuda.comm.scatter.

    A chunk for the source's own device is a view of it (``Buffer.narrow``: strided along a
    later dimension), as in torch; the others are copies.

    Args:
        tensor: The source :class:`mpsrt.Buffer` (at least 1-D).
        devices: The devices (indices, device strings or torch.devices), one per chunk. Not
            with ``out``.
        chunk_sizes: The chunks' sizes along ``dim``, adding up to its size; None: equal
            chunks, as torch.chunk (the last devices may get none). Not with ``out``.
        dim: The dimension to split (negative: from the end).
        streams: ``streams[i]``, an :class:`mpsrt.Stream` of device i or None, is the stream
            chunk i is allocated and copied on.
        out: Buffers to copy the chunks into, whose sizes along ``dim`` give the chunk sizes.

    Returns:
        tuple[mpsrt.Buffer, ...]: The chunks, or ``out``'s Buffers.

    Raises:
        TypeError: An argument has a wrong type.
        ValueError: ``out`` is given with ``devices`` or ``chunk_sizes``, no device or
            ``out`` Buffer is given, the chunk sizes do not add up or do not match the
            devices, a shape or dtype does not match, a stream is on another device, or a
            device does not exist (``mpsrt.comm.CommError``, also a RuntimeError, where torch
            raises a RuntimeError).
        IndexError: ``dim`` is out of range (``mpsrt.comm.CommIndexError``, also a
            ValueError).

    Example:
        >>> import numpy as np
        >>> import mpsrt
        >>> src = mpsrt.empty((4, 2), dtype="int32").copy_(np.arange(8, dtype=np.int32))
        >>> chunks = mpsrt.comm.scatter(src, [0, 0], chunk_sizes=[1, 3])
        >>> [c.shape for c in chunks]
        [(1, 2), (3, 2)]
        >>> chunks[1].numpy()
        array([[2, 3],
               [4, 5],
               [6, 7]], dtype=int32)
    """
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
        if not devs:
            raise CommError("Expected at least one device to scatter to")
    else:
        outs = _outputs(out, "scatter")
        if not outs:
            raise CommError("Expected at least one output tensor to scatter to")
    if not buf.shape:
        raise CommError("chunk expects at least a 1-dimensional tensor")
    d = _dim(dim, len(buf.shape), "scatter")
    n = buf.shape[d]
    strms = _streams(streams, "scatter")
    if out is not None:
        return _scatter_out(buf, outs, d, strms)
    if chunk_sizes is None:
        # As torch.chunk: chunks of ceil(n / devices); the last devices may get none.
        step = max(1, -(-n // len(devs)))
        sizes = [min(step, n - i * step) for i in range(len(devs)) if n - i * step > 0]
        devs = devs[: len(sizes)]
    else:
        sizes = _chunk_sizes(chunk_sizes, n, d, len(devs))
    result, start = [], 0
    for i, (dev, size) in enumerate(zip(devs, sizes)):
        chunk = buf.narrow(d, start, size)  # torch: chunks on the source's device are views
        if dev != buf.device:
            chunk = _copy_to(chunk, dev, _check_stream(strms, i, dev))
        result.append(chunk)
        start += size
    return tuple(result)


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
        _copy(o, buf.narrow(d, start, size), s)
        start += size
    return tuple(outs)


def _gather_shape(bs: list[Buffer], d: int) -> tuple[int, ...]:
    """The concatenation's shape, with torch's checks and texts for the inputs' shapes."""
    expected = list(bs[0].shape)
    total = 0
    for i, b in enumerate(bs):
        if len(b.shape) != len(expected):
            raise CommError(
                "Expected all input tensors to have the same number of dimensions, but tensor at "
                f"index {i} has {len(b.shape)} dimensions, (expected {len(expected)})"
            )
        expected[d] = b.shape[d]
        if tuple(expected) != b.shape:
            raise CommError(
                f"Input tensor at index {i} has invalid shape {_shape(b.shape)}, but expected "
                f"{_shape(expected)}"
            )
        total += b.shape[d]
    expected[d] = total
    return tuple(expected)


def gather(
    tensors: Sequence[Buffer],
    dim: int = 0,
    destination: DeviceLike = None,
    *,
    out: Buffer | np.ndarray | None = None,
) -> Buffer | np.ndarray:
    """Concatenates Buffers of any devices along a dimension, as torch.cuda.comm.gather.

    Args:
        tensors: The :class:`mpsrt.Buffer` objects, of one dtype and of equal shapes except
            along ``dim``.
        dim: The dimension to concatenate along (negative: from the end).
        destination: The device of the new Buffer (an index, a device string, a
            torch.device), or None for the current device. Not with ``out``.
        out: A Buffer, or a host numpy array (as torch's gather takes a CPU tensor), of the
            concatenation's shape and the Buffers' dtype, to write into.

    Returns:
        mpsrt.Buffer | numpy.ndarray: The new Buffer, or ``out``.

    Raises:
        TypeError: An argument has a wrong type.
        ValueError: ``out`` is given with ``destination``, ``tensors`` is empty or holds a
            host array (torch: a CPU tensor), the dtypes differ, a shape does not match,
            ``out`` is read-only, or the device does not exist (``mpsrt.comm.CommError``, also
            a RuntimeError, where torch raises a RuntimeError).
        IndexError: ``dim`` is out of range, or the Buffers are 0-d
            (``mpsrt.comm.CommIndexError``, also a ValueError).

    Example:
        >>> import numpy as np
        >>> import mpsrt
        >>> a = mpsrt.empty(2, dtype="float32").fill_(1.0)
        >>> b = mpsrt.empty(3, dtype="float32").fill_(2.0)
        >>> mpsrt.comm.gather([a, b]).numpy()
        array([1., 1., 2., 2., 2.], dtype=float32)
        >>> host = np.zeros(5, dtype=np.float32)
        >>> mpsrt.comm.gather([a, b], out=host) is host
        True
    """
    if out is not None and destination is not None:
        raise CommError(
            "'destination' must not be specified when 'out' is specified, but got "
            f"destination={destination}"
        )
    bs = _inputs(tensors, "gather")
    if not bs:
        raise CommError("Expected at least one tensor to gather from")
    dtype = bs[0].dtype
    if any(b.dtype != dtype for b in bs):
        raise ValueError("gather(): all Buffers must have the same dtype")
    if not bs[0].shape:
        raise CommIndexError("Dimension specified as 0 but tensor has no dimensions")
    d = _dim(dim, len(bs[0].shape), "gather")
    expected = _gather_shape(bs, d)
    if out is None:
        o = _C.empty(expected, dtype, device_index(destination, caller="gather"))
    elif isinstance(out, np.ndarray):
        return _gather_host(bs, d, expected, out)
    else:
        o = _buffer(out, "gather")
        if o.shape != expected:
            raise CommError(
                f"Expected out tensor to have shape {_shape(expected)}, but got {_shape(o.shape)}"
            )
        _same_dtype(o, bs[0], None, "gather")
    start = 0
    for b in bs:
        _copy(o.narrow(d, start, b.shape[d]), b)
        start += b.shape[d]
    return o


def _gather_host(
    bs: list[Buffer], d: int, expected: tuple[int, ...], out: np.ndarray
) -> np.ndarray:
    """gather into a host array (torch's gather into a CPU tensor)."""
    if out.shape != expected:
        raise CommError(
            f"Expected out tensor to have shape {_shape(expected)}, but got {_shape(out.shape)}"
        )
    if bs[0].dtype == "bfloat16" or out.dtype != np.dtype(bs[0].dtype):
        raise ValueError(
            f"gather(): the out array has dtype {out.dtype} but the Buffers {bs[0].dtype}; "
            "mpsrt.comm copies bytes and does not convert dtypes"
        )
    if not out.flags.writeable:
        raise ValueError("gather(): the out array is read-only")
    start = 0
    for b in bs:
        index = [slice(None)] * len(expected)
        index[d] = slice(start, start + b.shape[d])
        out[tuple(index)] = _bits(b).view(out.dtype)
        start += b.shape[d]
    return out


def _to_float32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _from_float32(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
    nan = np.isnan(x)
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


def reduce_add(bufs: Sequence[Buffer], destination: DeviceLike = None) -> Buffer:
    """The element-wise sum of Buffers of any devices, as torch.cuda.comm.reduce_add.

    Args:
        bufs: The :class:`mpsrt.Buffer` objects, of one shape and dtype.
        destination: The device of the result (an index, a device string, a torch.device),
            or None for the current device.

    Returns:
        mpsrt.Buffer: A new Buffer holding the sum.

    Raises:
        TypeError: ``bufs`` is not a sequence of Buffers, or ``destination`` has a wrong
            type.
        ValueError: The shapes or dtypes differ, or the device does not exist.
        IndexError: ``bufs`` is empty (``mpsrt.comm.CommIndexError``, also a ValueError).

    Example:
        >>> import mpsrt
        >>> a = mpsrt.empty(3, dtype="float32").fill_(1.5)
        >>> b = mpsrt.empty(3, dtype="float32").fill_(2.0)
        >>> mpsrt.comm.reduce_add([a, b]).numpy()
        array([3.5, 3.5, 3.5], dtype=float32)
    """
    bs = [_buffer(b, "reduce_add") for b in _sequence(bufs, "reduce_add", "a sequence of Buffers")]
    if not bs:
        # torch indexes inputs[0]: IndexError("list index out of range"); said plainly here.
        raise CommIndexError("reduce_add(): list index out of range: expected at least one Buffer")
    dtype, shape = bs[0].dtype, bs[0].shape
    for i, b in enumerate(bs):
        if b.shape != shape:
            raise ValueError(
                f"input {i} has invalid size: got {'x'.join(map(str, b.shape))}, but expected "
                f"{'x'.join(map(str, shape))}"
            )
        if b.dtype != dtype:
            raise ValueError(
                f"reduce_add(): Buffers must share their dtype; got {dtype} and {b.dtype}"
            )
    dest = device_index(destination, caller="reduce_add")
    if dtype == "bfloat16":
        total = _to_float32(_bits(bs[0])).copy()
        for b in bs[1:]:
            total += _to_float32(_bits(b))
        return _new(_from_float32(total), dtype, dest)
    total = _bits(bs[0]).view(np.dtype(dtype)).copy()
    for b in bs[1:]:
        total += _bits(b).view(total.dtype)
    return _new(total.view(f"<u{bs[0].itemsize}"), dtype, dest)


__all__ = ["broadcast", "gather", "reduce_add", "scatter"]
