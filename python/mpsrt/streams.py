"""Streams and the current stream (torch.cuda names)."""

from __future__ import annotations

from typing import Any

from . import _C
from ._utils import DeviceLike, device_index

Stream = _C.Stream
Event = _C.Event


def current_stream(device: DeviceLike = None) -> Stream:
    """The calling thread's current stream on the device (the default stream until set)."""
    return _C.current_stream(device_index(device, caller="current_stream"))


def default_stream(device: DeviceLike = None) -> Stream:
    """The device's default stream."""
    return _C.default_stream(device_index(device, caller="default_stream"))


def set_stream(stream: Stream | None) -> None:
    """Makes `stream` the calling thread's current stream on its device (None: no-op)."""
    if stream is None:
        return
    if not isinstance(stream, Stream):
        raise TypeError(f"set_stream() expected an mpsrt.Stream, got {type(stream).__name__}")
    _C.set_stream(stream)


class StreamContext:
    """Makes a stream current on its device (and its device current) for a `with` block.

    ``stream(None)`` changes nothing.
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
    """Context manager: `with mpsrt.stream(s):` makes s current, then restores."""
    return StreamContext(stream)
