"""What the tests of the PyTorch device's kernels share (test_torch_kernels_*.py).

The fixture `device_kernels` (conftest.py) makes the device's ops run on mpsrt's kernels
wherever the device has them (``torch.mpsrt._set_kernels("device")``, as
``MPSRT_TORCH_KERNELS=device``), so that on lavapipe every kernel is checked; on the cpu
backend the ops run through the fallback and the same comparisons check that path. `check`
runs a function on CPU tensors and on their mpsrt copies and compares the results (values,
dtypes, shapes), and where the device runs kernels, that the op ran without the fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch")
import mpsrt.torch  # noqa: E402,F401  (after the importorskip)

# Tolerances per dtype (relative, absolute): float32 within 1e-5 relative (the goal),
# float16 / bfloat16 as torch's own tests compare them.
TOLERANCES = {
    torch.float32: (1e-5, 1e-6),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float64: (1e-5, 1e-6),  # computed in float32 on the device
}


def to_device(value: Any) -> Any:
    """CPU tensors (also in lists, tuples and dicts) as mpsrt tensors; anything else as is."""
    if isinstance(value, torch.Tensor):
        return value.to("mpsrt")
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v) for k, v in value.items()}
    return value


def assert_close(
    got: Any, expected: Any, atol: float | None = None, rtol: float | None = None
) -> None:
    """got (mpsrt results) equals expected (CPU results): values within the dtype's tolerance,
    same dtypes and shapes; lists and tuples element by element."""
    if isinstance(expected, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_close(g, e, atol, rtol)
        return
    if not isinstance(expected, torch.Tensor):
        assert got == expected
        return
    assert got.device.type == "mpsrt", f"the result is on {got.device}, not on mpsrt"
    assert got.dtype == expected.dtype and got.shape == expected.shape
    r, a = TOLERANCES.get(expected.dtype, (0.0, 0.0))
    torch.testing.assert_close(
        got.cpu(),
        expected,
        rtol=rtol if rtol is not None else r,
        atol=atol if atol is not None else a,
        equal_nan=True,
    )


def check(
    fn: Callable[..., Any],
    *args: Any,
    kernels: bool,
    atol: float | None = None,
    rtol: float | None = None,
    fallbacks: tuple[str, ...] = (),
) -> Any:
    """fn(*args) on the device equals fn on the CPU; where the device runs kernels (`kernels`,
    the fixture's value), no op but those named in `fallbacks` ran through the fallback.
    Returns the device's result."""
    expected = fn(*args)
    torch.mpsrt.reset_fallback_counts()
    got = fn(*to_device(args))
    if kernels:
        ran = {k: v for k, v in torch.mpsrt.fallback_counts().items() if k not in fallbacks}
        assert ran == {}, f"ops ran through the fallback: {ran}"
    assert_close(got, expected, atol, rtol)
    return got
