"""The extension modules' linkage: mpsrt._C's C++ runtime stays inside it (docs/building.md).

Each module exports only its PyInit_<name>: mpsrt._C (the runtime) and mpsrt._bench (the bench's
hooks, which reach that runtime through a capsule and link no core of their own). Any other
dynamic symbol (an instantiation of a std:: template, the public C++ API, or all of libstdc++
where it is linked statically) could be bound to, or take over, the same name in another library
of the process (numpy's, torch's libstdc++). And the core uses no iostream or locale, whose
facets were what crashed beside another libstdc++. .ci/static_libstdcxx.sh checks modules built
with MPSRT_STATIC_LIBSTDCXX=ON in such a process.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import mpsrt
import mpsrt._bench
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the module's ELF dynamic symbols"
)


MODULES = {"_C": mpsrt._C, "_bench": mpsrt._bench}
each_module = pytest.mark.parametrize("name", sorted(MODULES))


def dynamic_symbols(name: str, *flags: str) -> list[str]:
    """`nm -D -C FLAGS` of the module mpsrt.<name>: one demangled name per symbol."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    path = MODULES[name].__file__
    assert path is not None
    out = subprocess.run([nm, "-D", "-C", *flags, path], capture_output=True, text=True, check=True)
    return [line.split(maxsplit=2)[-1] for line in out.stdout.splitlines() if line.strip()]


@linux_only
@each_module
def test_the_module_exports_only_its_init_function(name: str) -> None:
    exported = [s.split()[-1] for s in dynamic_symbols(name, "--defined-only")]
    assert exported == [f"PyInit_{name}"], f"{len(exported)} exported symbols: {exported[:10]}"


# Code defined in namespace mpsrt (the core's), in nm's full table (kept: NOSTRIP; its symbols
# are local, so the dynamic table would not show it).
CORE_CODE = re.compile(r"^[0-9a-f]+ [tTwW] mpsrt::(?!python::)")


@linux_only
def test_the_bench_module_links_no_runtime_of_its_own() -> None:
    # A second core would be a second runtime (allocator, streams): mpsrt._bench has none of the
    # core's code; mpsrt._C, the one that holds the runtime, has it.
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")

    def core_code(name: str) -> list[str]:
        path = MODULES[name].__file__
        assert path is not None
        out = subprocess.run([nm, "-C", path], capture_output=True, text=True, check=True)
        return [ln for ln in out.stdout.splitlines() if CORE_CODE.match(ln)]

    assert len(core_code("_C")) > 100, "mpsrt._C's table shows no core: nothing is checked"
    assert core_code("_bench") == [], f"mpsrt._bench carries the core: {core_code('_bench')[:10]}"


IOSTREAM = re.compile(
    r"std::(__cxx11::)?(locale|ios_base|basic_ios|[io]?stream|basic_[io]?stream|"
    r"basic_[io]?stringstream|basic_[io]?fstream|basic_(string|file|stream)buf|cout|cerr|clog|"
    r"ctype|num_put|num_get|numpunct|codecvt|use_facet|has_facet)\b"
)


@linux_only
@each_module
def test_the_module_uses_no_iostream_or_locale(name: str) -> None:
    # Where libstdc++ is linked dynamically (pip install .), what the module uses of it is listed.
    used = [s for s in dynamic_symbols(name, "--undefined-only") if IOSTREAM.search(s)]
    assert not used, f"iostream/locale symbols used by mpsrt.{name}: {used[:10]}"


def test_the_sources_include_no_iostream_header() -> None:
    # csrc/torch is the PyTorch glue, built against torch apart from the module.
    header = re.compile(
        r"#\s*include\s*<(iostream|[io]stream|sstream|fstream|locale|iomanip|streambuf|codecvt)>"
    )
    sources = [
        p
        for p in (ROOT / "csrc").rglob("*")
        if p.suffix in {".h", ".cpp", ".mm"} and "torch" not in p.relative_to(ROOT).parts
    ]
    if not sources:
        pytest.skip("the sources are not beside this test (an installed copy of the tests)")
    found = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in sources
        for m in header.finditer(p.read_text(errors="replace"))
    ]
    assert not found, found
