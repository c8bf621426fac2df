"""torch's autoload hook (entry point group ``torch.backends``): ``import torch`` calls
:func:`load`, which registers the PyTorch device "mpsrt" as ``import mpsrt.torch`` does.

Opt out with ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` (torch's switch). A failure here (for instance
no C++ compiler to build the glue) must not break ``import torch``: it becomes a warning that
says how to see the error, and ``import mpsrt.torch`` then raises it. It lives outside the
``mpsrt.torch`` package so that loading the entry point itself cannot fail.
"""

from __future__ import annotations

import warnings


def load() -> None:
    try:
        import mpsrt.torch  # noqa: F401  (registers the device)
    except Exception as e:  # pragma: no cover - needs a broken environment
        warnings.warn(
            f"[torch] mpsrt's PyTorch device was not loaded with torch ({type(e).__name__}: {e}); "
            "`import mpsrt.torch` shows the full error; TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns "
            "this autoload off",
            RuntimeWarning,
            stacklevel=2,
        )
