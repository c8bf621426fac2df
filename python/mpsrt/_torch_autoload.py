"""torch's autoload hook (entry point group ``torch.backends``): ``import torch`` calls
:func:`load`, which registers the PyTorch device "mpsrt" as ``import mpsrt.torch`` does, but
only where the glue loads with no compiler (a prebuilt glue for the running torch, or a finished
build from an earlier ``import mpsrt.torch``). Otherwise it registers nothing and says nothing:
``import torch`` never compiles; ``import mpsrt.torch`` then builds the glue.

Opt out with ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` (torch's switch). A failure here must not
break ``import torch``: it becomes a warning that says how to see the error, and
``import mpsrt.torch`` then raises it. It lives outside the ``mpsrt.torch`` package so that
loading the entry point itself cannot fail.
"""

from __future__ import annotations

import warnings

_loading = False


class NoGlueWithoutBuild(ImportError):
    """Raised by ``mpsrt.torch`` while autoloading where the glue would need a build: before
    it registers anything, so that a later ``import mpsrt.torch`` registers the device."""


def autoloading() -> bool:
    """Whether ``mpsrt.torch`` is being imported by torch's autoload (which never builds)."""
    return _loading


def load() -> None:
    global _loading
    _loading = True
    try:
        import mpsrt.torch  # noqa: F401  (registers the device)
    except NoGlueWithoutBuild:
        pass
    except Exception as e:  # pragma: no cover - needs a broken environment
        warnings.warn(
            f"[torch] mpsrt's PyTorch device was not loaded with torch ({type(e).__name__}: {e}); "
            "`import mpsrt.torch` shows the full error; TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns "
            "this autoload off",
            RuntimeWarning,
            stacklevel=2,
        )
    finally:
        _loading = False
