"""The API reference's contract: every public name of mpsrt (its __all__), mpsrt.comm,
mpsrt.profiler and torch.mpsrt has a docstring in Google style (a summary; "Args:" where it
takes arguments; "Returns:" where it returns something; an "Example:" for every function and
class), the public methods and properties of public classes have one too, and every example
runs, on every backend (conftest's `backend` fixture), leaving no state behind.

The docs site (docs/api/) renders these docstrings; the extension's (mpsrt._C) are its
nanobind doc strings in csrc/python/*.cpp.
"""

from __future__ import annotations

import builtins
import doctest
import gc
import importlib
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import mpsrt
import pytest

MODULES = ("mpsrt", "mpsrt.comm", "mpsrt.profiler", "torch.mpsrt")
TORCH_MISSING = "torch is not installed: pip install torch (torch.mpsrt needs it)"

# nanobind puts the signature first in the docstrings of its functions ("f(x: int) -> int")
# and gives an undocumented property its getter's ("(self) -> int"): neither is a docstring.
_NB_SIGNATURE = re.compile(r"^[\w.]*\((?P<params>.*)\)(\s*->\s*(?P<ret>.+))?$")
_SECTION = re.compile(r"^(Args|Returns|Raises|Example|Examples|Warns|Yields|Note):\s*$", re.M)
# An entry of Args:, Raises: or Warns: ("name: text"); its further lines are indented deeper.
_FIELD = re.compile(r"^[\w.*]+( \([^)]*\))?: \S")


def _module(name: str) -> ModuleType:
    if name == "torch.mpsrt":
        try:
            import torch
        except ImportError:
            pytest.skip(TORCH_MISSING)
        import mpsrt.torch  # noqa: F401  (registers torch.mpsrt)

        return torch.mpsrt  # type: ignore[no-any-return]
    return importlib.import_module(name)


def _is_native(obj: object) -> bool:
    return type(obj).__name__ in ("nb_func", "nb_method")


def _docstring(obj: object) -> str:
    """obj's own docstring without nanobind's signature line ("" when it has none)."""
    doc = getattr(obj, "__doc__", None)
    if not isinstance(doc, str):
        return ""
    lines = inspect.cleandoc(doc).splitlines()
    if (_is_native(obj) or isinstance(obj, property)) and lines and _NB_SIGNATURE.match(lines[0]):
        lines = lines[1:]
    return "\n".join(lines).strip()


@dataclass
class Entry:
    qualname: str
    obj: Any
    doc: str
    needs_example: bool  # functions and classes; members need a docstring only
    own: bool = True  # defined by mpsrt; torch's re-exported classes carry torch's examples


def _public_names(module: ModuleType) -> list[str]:
    """__all__, or (torch.mpsrt has none) the names the module defines or re-exports from
    torch, without the modules and the typing helpers it imports."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    names = []
    for name, value in vars(module).items():
        if name.startswith("_") or inspect.ismodule(value):
            continue
        origin = getattr(value, "__module__", None) or ""
        if origin == module.__name__ or origin.split(".")[0] == "torch":
            names.append(name)
    return sorted(names)


def _own(obj: object) -> bool:
    """Defined by mpsrt (its Python layer or the extension), not re-exported from torch."""
    return (getattr(obj, "__module__", None) or "").startswith("mpsrt")


def _members(cls: type) -> Iterator[tuple[str, Any]]:
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if callable(value) or isinstance(value, property):
            yield name, value


def _entries(label: str) -> list[Entry]:
    module = _module(label)
    out = [Entry(label, module, _docstring(module), needs_example=False)]
    for name in _public_names(module):
        obj = getattr(module, name)
        qual = f"{label}.{name}"
        if inspect.ismodule(obj):
            out.append(Entry(qual, obj, _docstring(obj), needs_example=False))
        elif inspect.isclass(obj) or callable(obj):
            own = _own(obj)
            out.append(Entry(qual, obj, _docstring(obj), needs_example=own, own=own))
            if inspect.isclass(obj) and own:
                for member, value in _members(obj):
                    out.append(Entry(f"{qual}.{member}", value, _docstring(value), False))
        # Data (mpsrt.__version__, a str) carries no docstring of its own.
    return out


def _parameters(obj: Any) -> tuple[bool, bool] | None:
    """(takes arguments, returns something) from the signature, or None where unknown."""
    target = obj
    if inspect.isclass(obj):
        init = vars(obj).get("__init__")
        if not (_is_native(init) or inspect.isfunction(init)):
            return None  # no constructor of its own (Buffer: made by empty() and views)
        target = init
    if _is_native(target):
        doc = getattr(target, "__doc__", None) or ""
        m = _NB_SIGNATURE.match(doc.splitlines()[0] if doc else "")
        if m is None:
            return None
        params = [p for p in m.group("params").split(",") if p.strip() not in ("", "self")]
        returns = m.group("ret") not in (None, "None") and not inspect.isclass(obj)
        return bool(params), returns
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    params = [p for p in sig.parameters if p not in ("self", "cls")]
    ret = sig.return_annotation
    returns = not inspect.isclass(obj) and ret not in (None, "None", inspect.Signature.empty)
    return bool(params), returns


def _malformed_fields(entry: Entry) -> list[str]:
    """Lines of Args:, Raises: and Warns: sections that napoleon would not read as an entry or
    as the continuation of one."""
    out, section, indent = [], None, 0
    for line in entry.doc.splitlines():
        header = _SECTION.match(line.strip())
        if header:
            section, indent = header.group(1), -1
            continue
        if not line.strip() or section not in ("Args", "Raises", "Warns"):
            continue
        depth = len(line) - len(line.lstrip())
        if indent == -1:
            indent = depth
        if depth == indent and not _FIELD.match(line.strip()):
            out.append(f"{entry.qualname}: {section}: not 'name: text', nor deeper: {line!r}")
    return out


def _problems(entry: Entry) -> list[str]:
    if not entry.doc:
        return [f"{entry.qualname}: no docstring"]
    out = _malformed_fields(entry)
    if not entry.needs_example:
        return out
    sections = set(_SECTION.findall(entry.doc))
    if "Example" not in sections or ">>>" not in entry.doc:
        out.append(f"{entry.qualname}: no example (an 'Example:' section with >>> lines)")
    shape = _parameters(entry.obj)
    if shape is not None:
        takes, returns = shape
        if takes and "Args" not in sections:
            out.append(f"{entry.qualname}: takes arguments but has no 'Args:' section")
        if returns and "Returns" not in sections:
            out.append(f"{entry.qualname}: returns a value but has no 'Returns:' section")
    return out


@pytest.mark.parametrize("label", MODULES)
def test_every_public_name_is_documented(label: str) -> None:
    problems = [p for entry in _entries(label) for p in _problems(entry)]
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- the examples


def _state() -> dict[str, Any]:
    """What an example must leave as it found it."""
    n = mpsrt.device_count()
    gc.collect()
    for d in range(n):
        mpsrt.synchronize(d)
    depth = mpsrt.profiler.range_push("probe")
    mpsrt.profiler.range_pop()
    return {
        "current device": mpsrt.current_device(),
        "current streams": [mpsrt.current_stream(d) for d in range(n)],
        "allocated bytes": [mpsrt.memory_allocated(d) for d in range(n)],
        "generator states": [bytes(s) for s in mpsrt.get_rng_state_all()],
        "memory fractions": [mpsrt.get_per_process_memory_fraction(d) for d in range(n)],
        "profiler session": mpsrt._C._profiler.is_active(),
        "open ranges on this thread": depth,
    }


_MISSING = object()


def _run(test: doctest.DocTest, runner: doctest.DocTestRunner) -> str:
    """Runs one docstring's examples; returns what failed ("" when nothing did)."""
    report: list[str] = []
    saved = builtins.__dict__.get("_", _MISSING)  # the interactive `_`: the last value shown
    try:
        runner.run(test, out=report.append, clear_globs=True)
    finally:
        if saved is _MISSING:
            builtins.__dict__.pop("_", None)
        else:
            builtins._ = saved  # type: ignore[attr-defined]
    return "".join(report)


def _examples(label: str) -> list[doctest.DocTest]:
    parser = doctest.DocTestParser()
    tests = []
    for entry in _entries(label):
        if entry.own and ">>>" in entry.doc:
            tests.append(parser.get_doctest(entry.doc, {}, entry.qualname, None, None))
    return tests


@pytest.mark.parametrize("label", MODULES)
def test_examples_run(label: str, backend: str) -> None:
    tests = _examples(label)
    assert tests, f"{label}: no examples found"
    runner = doctest.DocTestRunner(
        verbose=False, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    previous_stream = mpsrt.current_stream()
    # The examples start where a program starts: device 0, its default stream current.
    mpsrt.set_device(0)
    mpsrt.set_stream(mpsrt.default_stream())
    failures = []
    try:
        for test in tests:
            before = _state()
            failed = _run(test, runner)
            after = _state()
            if failed:
                failures.append(failed)
            for what, value in before.items():
                if after[what] != value:
                    failures.append(
                        f"{test.name}: the example changed the {what}: {value!r} -> {after[what]!r}"
                    )
    finally:
        if mpsrt._C._profiler.is_active():
            mpsrt.profiler.stop()
        mpsrt.set_stream(previous_stream)
    assert not failures, f"backend {backend}:\n" + "\n".join(failures)
