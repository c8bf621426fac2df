"""The package itself: version, typing files, public names, error types."""

from __future__ import annotations

import os
import pathlib
import re

import mpsrt
import pytest
from conftest import run_python

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
    # The module's __getattr__ (which makes _bench) is left out: it would type every misspelt
    # name of mpsrt._C as valid.
    assert "__getattr__" not in stub


def test_public_names() -> None:
    for name in mpsrt.__all__:
        assert hasattr(mpsrt, name), name
    assert issubclass(mpsrt.OutOfMemoryError, RuntimeError)


_BENCH_HOOKS = """\
import sys
import threading

import mpsrt

c = mpsrt._C
assert "_bench" not in vars(c), "import mpsrt registered the benchmark hooks"
assert not [m for m in sys.modules if "_bench" in m], sys.modules
try:
    c.no_such_name
except AttributeError as e:
    assert str(e) == "module 'mpsrt._C' has no attribute 'no_such_name'", e
else:
    raise AssertionError("no AttributeError")
assert not hasattr(c, "no_such_name")
got = []
threads = [threading.Thread(target=lambda: got.append(c._bench)) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
from mpsrt._C import _bench

assert len(got) == 4 and all(g is _bench for g in got) and c._bench is _bench
assert _bench.__name__ == "mpsrt._C._bench" and _bench.noop() is None
assert _bench.RawHeap.__module__ == "mpsrt._C._bench"
"""


def test_the_bench_hooks_are_made_on_first_access() -> None:
    # In a fresh interpreter: this one's tests reach mpsrt._C._bench already.
    r = run_python(_BENCH_HOOKS)
    assert r.returncode == 0, r.stdout + r.stderr


# ---------------------------------------------------------------- typed stubs, checked by mypy

# One cache per xdist worker: two mypy runs never write one cache at once.
_MYPY_CACHE = ROOT / "build" / "mypy-cache" / os.environ.get("PYTEST_XDIST_WORKER", "main")


def _mypy(*targets: pathlib.Path) -> tuple[int, str]:
    """mypy --strict over `targets`, against the installed package and its stubs."""
    api = pytest.importorskip("mypy.api", reason="mypy is not installed: pip install '.[test]'")
    out, err, rc = api.run(
        ["--strict", "--cache-dir", str(_MYPY_CACHE), *(str(t) for t in targets)]
    )
    return rc, out + err


def test_examples_and_the_typed_tests_pass_mypy_strict() -> None:
    targets = [ROOT / "examples" / "quickstart.py", ROOT / "tests/python/test_typed_api.py"]
    try:
        import torch  # noqa: F401
    except ImportError:
        pass  # examples/torch_device.py needs torch's own types
    else:
        targets.append(ROOT / "examples" / "torch_device.py")
    rc, out = _mypy(*targets)
    assert rc == 0, out


_MISUSE = """\
import mpsrt
b = mpsrt.empty(4, dtype="float32")
b.uniform_("0")
b.fill_(None)
mpsrt.Stream().wait_event(b)
s: str = b.shape
g: mpsrt.Generator = b.normal_()
b.random_(0, 10, generator=mpsrt.Stream())
mpsrt.Event().record(stream=3)
"""


def test_mypy_rejects_misuse_through_the_stubs(tmp_path: pathlib.Path) -> None:
    # Each line after the first two is a wrong call or a wrong type that only typed stubs can
    # catch (a parameter or result typed `object` or missing would let it through).
    f = tmp_path / "misuse.py"
    f.write_text(_MISUSE)
    rc, out = _mypy(f)
    assert rc == 1, out
    flagged = {int(m.group(1)) for m in re.finditer(r"misuse\.py:(\d+): error", out)}
    assert flagged == set(range(3, _MISUSE.count("\n") + 1)), out


def test_every_public_stub_signature_is_typed() -> None:
    import ast

    stub = pathlib.Path(mpsrt.__file__).parent / "_C.pyi"
    tree = ast.parse(stub.read_text())
    untyped = []

    def check(fn: ast.FunctionDef, where: str) -> None:
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        if where:  # a method: self has no annotation
            args = args[1:]
        for v in (fn.args.vararg, fn.args.kwarg):
            if v is not None:
                args.append(v)
        name = f"{where}{fn.name}"
        for a in args:
            if a.annotation is None:
                untyped.append(f"{name}({a.arg}): no type")
            elif ast.unparse(a.annotation) == "object" and fn.name not in ("__eq__", "__exit__"):
                untyped.append(f"{name}({a.arg}): object")
        if fn.returns is None or ast.unparse(fn.returns) in ("object", "tuple", "list", "dict"):
            untyped.append(f"{name}: returns {ast.unparse(fn.returns) if fn.returns else None}")

    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            check(node, "")
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not (
                    item.name.startswith("_") and not item.name.startswith("__")
                ):
                    check(item, f"{node.name}.")
    assert untyped == []
    # The in-place methods are in the stubs (stubgen counts a trailing _ as private).
    for method in ("fill_", "copy_", "uniform_", "normal_", "random_", "bernoulli_"):
        assert f"def {method}(self" in stub.read_text()
