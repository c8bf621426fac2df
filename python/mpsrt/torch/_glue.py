"""Builds (once, cached) and loads the torch glue, and hands it mpsrt's C API table.

The build is cached under ``$TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``) in
``mpsrt/<extension_name()>``. A process that finds a finished build loads it without taking
any lock. Builders are serialised by an OS file lock (``filelock``, one of torch's own
dependencies), which the kernel releases when its holder dies: a build killed half way (Ctrl-C,
the OOM killer, a CI timeout) never leaves later imports waiting on it. A build counts as
finished only once its stamp names the library's size and modification time, so a library cut
short by a killed link is rebuilt rather than loaded.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import sys
from pathlib import Path

import torch

import mpsrt
from mpsrt import _C

_HERE = Path(__file__).resolve().parent
# Installed layout: the glue's translation units and their headers in mpsrt/torch/csrc/ (the
# entry point module.cpp among them), and mpsrt/include/mpsrt/c_api.h.
_CSRC = _HERE / "csrc"
_ENTRY = _CSRC / "module.cpp"
_INCLUDE = _HERE.parent / "include"
# How long an import waits for another process's build (one build takes about 60 s of a core,
# spread over the cores by ninja).
BUILD_WAIT_SECONDS = 900.0
_STAMP = "mpsrt-build-stamp"
_BUILD_LOCK = "mpsrt-build.lock"
# The lock file torch's cpp_extension.load creates while it builds and removes after; a build
# killed in between leaves it behind, and torch then waits on it forever.
_TORCH_BATON = "lock"


def _sources() -> list[Path]:
    """The glue's translation units, compiled together into one library."""
    return sorted(_CSRC.glob("*.cpp"))


def _source_digest() -> str:
    """A digest of every file the build reads from this package: the glue's sources and headers
    (names and contents) and the C API header."""
    digest = hashlib.sha256()
    for path in sorted([*_CSRC.glob("*.cpp"), *_CSRC.glob("*.h")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update((_INCLUDE / "mpsrt" / "c_api.h").read_bytes())
    return digest.hexdigest()


def extension_name() -> str:
    """The cached build's name: one per (mpsrt version, torch version, Python, glue source).

    The versions are in the name so that another mpsrt, torch or Python gets its own build
    instead of a stale ABI; the sources' digest, so that two installs of one version with
    different glue sources (a development checkout beside a release) do not rebuild over each
    other.
    """
    tv = re.sub(r"[^0-9A-Za-z]", "_", torch.__version__)
    mv = re.sub(r"[^0-9A-Za-z]", "_", mpsrt.__version__)
    py = re.sub(r"[^0-9A-Za-z]", "_", sys.implementation.cache_tag or "py")
    return f"mpsrt_torch_{mv}_torch{tv}_{py}_{_source_digest()[:12]}"


def build_directory() -> Path:
    """Where the glue is built and cached (see the module's docstring)."""
    from torch.utils import cpp_extension

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()
    return Path(root) / "mpsrt" / extension_name()


def _library(directory: Path) -> Path:
    return directory / f"{directory.name}.so"


def _stamp_text(library: Path) -> str:
    st = library.stat()
    return f"{st.st_size} {st.st_mtime_ns}\n"


def _is_built(directory: Path) -> bool:
    try:
        return (directory / _STAMP).read_text() == _stamp_text(_library(directory))
    except OSError:
        return False


def _build(directory: Path, verbose: bool, wait_seconds: float) -> None:
    """Builds and loads the glue in `directory` under the builders' lock, or loads the build
    that another process finished while this one waited for the lock."""
    import filelock
    from torch.utils import cpp_extension

    directory.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(directory / _BUILD_LOCK))
    try:
        lock.acquire(timeout=wait_seconds)
    except filelock.Timeout:
        raise ImportError(
            f"[torch] waited {wait_seconds:g} s for another process building the torch glue in "
            f"{directory} (it holds {directory / _BUILD_LOCK}); let it finish, or stop it and "
            "import again"
        ) from None
    try:
        if _is_built(directory):
            torch.ops.load_library(str(_library(directory)))
            return
        # Only builders holding the lock write here, so what a killed build left is stale:
        # torch's own lock file, and a library that may be cut short (relinked from scratch).
        for stale in (_TORCH_BATON, _STAMP, _library(directory).name):
            (directory / stale).unlink(missing_ok=True)
        cpp_extension.load(
            name=directory.name,
            sources=[str(p) for p in _sources()],
            extra_include_paths=[str(_INCLUDE)],
            extra_cflags=["-O2", "-fvisibility=hidden"],
            build_directory=str(directory),
            is_python_module=False,
            verbose=verbose,
        )
        (directory / _STAMP).write_text(_stamp_text(_library(directory)))
    finally:
        lock.release()


def _capsule_address() -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return int(get(_C._c_api, b"mpsrt._C._c_api"))


def load(verbose: bool = False) -> None:
    """Loads the glue, compiling it first if no finished build is cached, and initialises it."""
    if not _ENTRY.is_file():
        raise ImportError(f"[torch] the torch glue's source is missing ({_ENTRY}); reinstall mpsrt")
    directory = build_directory()
    if _is_built(directory):
        torch.ops.load_library(str(_library(directory)))
    else:
        _build(directory, verbose, BUILD_WAIT_SECONDS)
    torch.ops.mpsrt_torch._init(_capsule_address())
