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
    # The bench's hooks are their own module (mpsrt._bench, no stubs); mpsrt._C's capsule for
    # it is read by C++ only, and the module has no __getattr__ to type misspelt names as valid.
    assert "_bench" not in stub and "__getattr__" not in stub


def test_public_names() -> None:
    for name in mpsrt.__all__:
        assert hasattr(mpsrt, name), name
    assert issubclass(mpsrt.OutOfMemoryError, RuntimeError)


_BENCH_HOOKS = """\
import sys

import mpsrt

c = mpsrt._C
assert "mpsrt._bench" not in sys.modules, "import mpsrt loaded the benchmark hooks"
assert not hasattr(c, "_bench") and not hasattr(c, "__getattr__"), vars(c).keys()
try:
    c.no_such_name
except AttributeError as e:
    assert str(e) == "module 'mpsrt._C' has no attribute 'no_such_name'", e
else:
    raise AssertionError("no AttributeError")
from mpsrt import _bench

assert _bench.__name__ == "mpsrt._bench" and _bench.noop() is None
assert _bench.RawHeap.__module__ == "mpsrt._bench"
# One runtime: the Buffers that the bench's loops make are counted by mpsrt._C's allocator.
before = mpsrt.memory_stats()["allocation.all.allocated"]
_bench.alloc_free_ns(4096, 10)
assert mpsrt.memory_stats()["allocation.all.allocated"] - before == 11, mpsrt.memory_stats()
# A raw heap's fill is encoded on mpsrt._C's default stream: waiting for that stream waits for it.
heap = _bench.RawHeap(1 << 20)
heap.fill(0x5A)
mpsrt.default_stream().synchronize()
if mpsrt.get_device_properties().unified_memory:  # else the heap has no host view
    assert (heap.numpy() == 0x5A).all()
"""


def test_the_bench_hooks_are_their_own_module_on_the_one_runtime(backend: str) -> None:
    # In a fresh interpreter: this one's tests import mpsrt._bench already.
    r = run_python(_BENCH_HOOKS, backend)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_bench_hooks_raise_the_runtime_errors() -> None:
    from mpsrt import _bench

    with pytest.raises(ValueError, match=r"^\[bench\] heaps differ in size"):
        _bench.RawHeap(16).c_memcpy_from(_bench.RawHeap(32))
    with pytest.raises(ValueError, match=r"pattern_size must be 1, 2, 4 or 8"):
        _bench.RawHeap(16).fill(1, 3)
    with pytest.raises(ValueError, match=r"^\[device\] invalid device index 99"):
        _bench.commit_wait_ns(1, 0, 99)
    with pytest.raises(ValueError, match=r"^\[bench\] commit_wait_ns: iters must be >= 0"):
        _bench.commit_wait_ns(-1)


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
