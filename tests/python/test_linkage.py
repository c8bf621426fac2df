"""The extension module's linkage: its C++ runtime stays inside it (README, "Building").

Only PyInit__C is exported. Any other dynamic symbol (an instantiation of a std:: template, the
public C++ API, or all of libstdc++ where it is linked statically) could be bound to, or take
over, the same name in another library of the process (numpy's, torch's libstdc++).
.ci/static_libstdcxx.sh checks a module built with MPSRT_STATIC_LIBSTDCXX=ON in such a process.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import mpsrt
import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the module's ELF dynamic symbols"
)


def test_the_module_exports_only_its_init_function() -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run(
        [nm, "-D", "--defined-only", mpsrt._C.__file__], capture_output=True, text=True, check=True
    ).stdout
    exported = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert exported == ["PyInit__C"], f"{len(exported)} exported symbols: {exported[:10]}"
