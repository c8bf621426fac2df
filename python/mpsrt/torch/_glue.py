"""Builds (once, cached) and loads the torch glue, and hands it mpsrt's C API table."""

from __future__ import annotations

import ctypes
import hashlib
import re
from pathlib import Path

import torch

import mpsrt
from mpsrt import _C

_HERE = Path(__file__).resolve().parent
# Installed layout: mpsrt/torch/csrc/mpsrt_torch.cpp and mpsrt/include/mpsrt/c_api.h.
_SOURCE = _HERE / "csrc" / "mpsrt_torch.cpp"
_INCLUDE = _HERE.parent / "include"


def extension_name() -> str:
    """The cached build's name: one per (mpsrt version, torch version, glue source).

    The versions are in the name so that another mpsrt or torch gets its own build instead of
    a stale ABI; the source's digest, so that two installs of one version with different glue
    sources (a development checkout beside a release) do not rebuild over each other.
    """
    tv = re.sub(r"[^0-9A-Za-z]", "_", torch.__version__)
    mv = re.sub(r"[^0-9A-Za-z]", "_", mpsrt.__version__)
    digest = hashlib.sha256(_SOURCE.read_bytes() + (_INCLUDE / "mpsrt" / "c_api.h").read_bytes())
    return f"mpsrt_torch_{mv}_torch{tv}_{digest.hexdigest()[:12]}"


def _capsule_address() -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return int(get(_C._c_api, b"mpsrt._C._c_api"))


def load(verbose: bool = False) -> None:
    """Compiles the glue if needed (torch's file lock serialises concurrent builds) and loads it."""
    if not _SOURCE.is_file():
        raise ImportError(
            f"[torch] the torch glue's source is missing ({_SOURCE}); reinstall mpsrt"
        )
    from torch.utils import cpp_extension

    cpp_extension.load(
        name=extension_name(),
        sources=[str(_SOURCE)],
        extra_include_paths=[str(_INCLUDE)],
        extra_cflags=["-O2", "-fvisibility=hidden"],
        is_python_module=False,
        verbose=verbose,
    )
    torch.ops.mpsrt_torch._init(_capsule_address())
