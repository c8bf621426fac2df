"""Streams and the current stream (torch.cuda names)."""

from __future__ import annotations

from typing import Any

from . import _C
from ._utils import DeviceLike, device_index

Stream = _C.Stream
Event = _C.Event


def current_stream(device: DeviceLike = None) -> Stream:
    """The calling thread's current stream on a device, as torch.cuda.current_stream.

    Work without an explicit stream (fills, copies, random fills, :func:`mpsrt.empty`) goes
    there.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Returns:
        mpsrt.Stream: The current stream: the default stream until set_stream() or a
        stream() block changes it.

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> mpsrt.current_stream() == mpsrt.default_stream()
        True
        >>> s = mpsrt.Stream()
        >>> with mpsrt.stream(s):
        ...     mpsrt.current_stream() == s
        True
    """
    return _C.current_stream(device_index(device, caller="current_stream"))


def default_stream(device: DeviceLike = None) -> Stream:
    """A device's default stream, as torch.cuda.default_stream.

    Args:
        device: A device index, a device string (``"mps:0"``), a torch.device, or None for the
            current device.

    Returns:
        mpsrt.Stream: The default stream (``stream_id`` 0).

    Raises:
        TypeError: ``device`` has a wrong type.
        ValueError: ``device`` names no device of the active backend.

    Example:
        >>> import mpsrt
        >>> s = mpsrt.default_stream(0)
        >>> s.stream_id, s.device
        (0, 0)
    """
    return _C.default_stream(device_index(device, caller="default_stream"))


def set_stream(stream: Stream | None) -> None:
    """Makes a stream the calling thread's current stream on its device, as
    torch.cuda.set_stream.

    Prefer a ``with mpsrt.stream(s):`` block, which restores the previous stream.

    Args:
        stream: An :class:`mpsrt.Stream`, or None, which changes nothing.

    Raises:
        TypeError: ``stream`` is neither an :class:`mpsrt.Stream` nor None.

    Example:
        >>> import mpsrt
        >>> previous = mpsrt.current_stream()
        >>> s = mpsrt.Stream()
        >>> mpsrt.set_stream(s)
        >>> mpsrt.current_stream() == s
        True
        >>> mpsrt.set_stream(previous)
    """
    if stream is None:
        return
    if not isinstance(stream, Stream):
        raise TypeError(f"set_stream() expected an mpsrt.Stream, got {type(stream).__name__}")
    _C.set_stream(stream)


class StreamContext:
    """Context manager that makes a stream current on its device (and its device current)
    for a ``with`` block, then restores both; what :func:`mpsrt.stream` returns.

    Args:
        stream: An :class:`mpsrt.Stream`, or None, which changes nothing.

    Raises:
        TypeError: ``stream`` is neither an :class:`mpsrt.Stream` nor None.

    Example:
        >>> import mpsrt
        >>> s = mpsrt.Stream()
        >>> with mpsrt.StreamContext(s) as entered:
        ...     entered is s, mpsrt.current_stream() == s
        (True, True)
        >>> mpsrt.current_stream() == mpsrt.default_stream()
        True
    """

    def __init__(self, stream: Stream | None) -> None:
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(
                f"stream() expected an mpsrt.Stream or None, got {type(stream).__name__}"
            )
        self.stream = stream
        self._prev_stream: Stream | None = None
        self._prev_device = -1

    def __enter__(self) -> Stream | None:
        s = self.stream
        if s is not None:
            self._prev_device = _C.set_device(s.device)
            self._prev_stream = _C.set_stream(s)
        return s

    def __exit__(self, *exc: Any) -> None:
        if self.stream is not None:
            _C.set_stream(self._prev_stream)
            _C.set_device(self._prev_device)


def stream(stream: Stream | None) -> StreamContext:
    """Context manager that makes a stream current for a ``with`` block, as
    torch.cuda.stream.

    ``with mpsrt.stream(s):`` makes ``s`` current on its device and its device current, then
    restores the previous ones.

    Args:
        stream: An :class:`mpsrt.Stream`, or None, which changes nothing.

    Returns:
        mpsrt.StreamContext: The context manager.

    Raises:
        TypeError: ``stream`` is neither an :class:`mpsrt.Stream` nor None.

    Example:
        >>> import mpsrt
        >>> s = mpsrt.Stream()
        >>> with mpsrt.stream(s):
        ...     buf = mpsrt.empty(4, dtype="int32").fill_(3)  # on s
        >>> s.synchronize()
        >>> buf.numpy()
        array([3, 3, 3, 3], dtype=int32)
    """
    return StreamContext(stream)
