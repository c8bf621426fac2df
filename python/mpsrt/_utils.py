"""Argument checking shared by the mpsrt modules (torch.mps / torch.cuda conventions)."""

from __future__ import annotations

from typing import Any, Union

from . import _C

DeviceLike = Union[int, str, Any, None]

_BACKENDS = ("cpu", "vulkan", "metal")


def _type_name(obj: object) -> str:
    return type(obj).__name__


def device_index(device: DeviceLike, *, optional: bool = True, caller: str = "device") -> int:
    """Returns the device index `device` names, checked against device_count().

    Accepts an int, a string ('mps', 'mps:N', '<backend>' or '<backend>:N' for the active
    backend), a device context manager (`mpsrt.device(d)`, anything with an int `.idx`), an
    object with `.type` and `.index` (a torch.device), or None when `optional` (meaning the
    current device). Every function that takes a device uses this one rule.
    Wrong type -> TypeError; bad value -> ValueError.
    """
    if device is None:
        if optional:
            return _C.current_device()
        raise TypeError(
            f"{caller}() expected a device index (int) or a device string such as 'mps:0'; got None"
        )
    if isinstance(device, bool) or not isinstance(device, (int, str)):
        ctx_idx = getattr(device, "idx", None)
        if isinstance(ctx_idx, int) and not isinstance(ctx_idx, bool):
            # A device context manager (mpsrt.device(d), torch.cuda.device-like): its index;
            # -1 is device(None), which names no device.
            return device_index(
                None if ctx_idx == -1 else ctx_idx, optional=optional, caller=caller
            )
        dev_type = getattr(device, "type", None)
        if isinstance(dev_type, str) and hasattr(device, "index"):
            idx = device.index
            return device_index(
                dev_type if idx is None else f"{dev_type}:{idx}", optional=optional, caller=caller
            )
        raise TypeError(
            f"{caller}() expected a device index (int), a device string such as "
            f"'mps:0', or None; got {_type_name(device)} {device!r}"
        )
    if isinstance(device, str):
        return _parse_device_string(device, caller)
    return check_index(device, caller)


def check_index(index: int, caller: str = "device") -> int:
    n = _C.device_count()
    if index < 0 or index >= n:
        raise ValueError(
            f"{caller}(): invalid device index {index}: expected 0 <= index < {n} "
            f"(the device count of backend {_C.backend()})"
        )
    return index


def _parse_device_string(text: str, caller: str) -> int:
    kind, sep, rest = text.partition(":")
    kind = kind.strip()
    active = _C.backend()
    if kind not in ("mps", *_BACKENDS):
        raise ValueError(
            f"{caller}(): invalid device string {text!r}: expected 'mps', 'mps:N', "
            f"'{active}' or '{active}:N'"
        )
    if kind != "mps" and kind != active:
        raise ValueError(
            f"{caller}(): device {text!r} belongs to backend {kind}, but the active "
            f"backend is {active}; use 'mps:N' or '{active}:N'"
        )
    if not sep:
        return _C.current_device()
    try:
        index = int(rest)
    except ValueError:
        raise ValueError(
            f"{caller}(): invalid device string {text!r}: the part after ':' must be a device index"
        ) from None
    return check_index(index, caller)
