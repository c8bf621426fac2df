"""The package itself: version, typing files, public names, error types."""

from __future__ import annotations

import pathlib
import re

import mpsrt

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_version_has_one_source() -> None:
    cmake = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(mpsrt VERSION ([0-9.]+)", cmake)
    assert m and mpsrt.__version__ == m.group(1)
    from importlib.metadata import version

    assert version("mpsrt") == mpsrt.__version__


def test_typing_files_are_shipped() -> None:
    pkg = pathlib.Path(mpsrt.__file__).parent
    assert (pkg / "py.typed").exists()
    stub = (pkg / "_C.pyi").read_text()
    assert "def device_count() -> int" in stub
    assert "class DeviceProperties" in stub


def test_public_names() -> None:
    for name in mpsrt.__all__:
        assert hasattr(mpsrt, name), name
    assert issubclass(mpsrt.OutOfMemoryError, RuntimeError)
