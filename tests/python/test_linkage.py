"""The extension module's linkage: its C++ runtime stays inside it (README, "Building").

Only PyInit__C is exported. Any other dynamic symbol (an instantiation of a std:: template, the
public C++ API, or all of libstdc++ where it is linked statically) could be bound to, or take
over, the same name in another library of the process (numpy's, torch's libstdc++). And the core
uses no iostream or locale, whose facets were what crashed beside another libstdc++.
.ci/static_libstdcxx.sh checks a module built with MPSRT_STATIC_LIBSTDCXX=ON in such a process.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import mpsrt
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the module's ELF dynamic symbols"
)


def dynamic_symbols(*flags: str) -> list[str]:
    """`nm -D -C FLAGS` of mpsrt._C: one demangled name per symbol."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run(
        [nm, "-D", "-C", *flags, mpsrt._C.__file__], capture_output=True, text=True, check=True
    ).stdout
    return [line.split(maxsplit=2)[-1] for line in out.splitlines() if line.strip()]


@linux_only
def test_the_module_exports_only_its_init_function() -> None:
    exported = [s.split()[-1] for s in dynamic_symbols("--defined-only")]
    assert exported == ["PyInit__C"], f"{len(exported)} exported symbols: {exported[:10]}"


IOSTREAM = re.compile(
    r"std::(__cxx11::)?(locale|ios_base|basic_ios|[io]?stream|basic_[io]?stream|"
    r"basic_[io]?stringstream|basic_[io]?fstream|basic_(string|file|stream)buf|cout|cerr|clog|"
    r"ctype|num_put|num_get|numpunct|codecvt|use_facet|has_facet)\b"
)


@linux_only
def test_the_module_uses_no_iostream_or_locale() -> None:
    # Where libstdc++ is linked dynamically (pip install .), what the module uses of it is listed.
    used = [s for s in dynamic_symbols("--undefined-only") if IOSTREAM.search(s)]
    assert not used, f"iostream/locale symbols used by mpsrt._C: {used[:10]}"


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
