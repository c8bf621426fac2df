"""The PyTorch device without a compiler: ``python -m mpsrt.torch.prebuild OUTDIR`` writes the
glue for the installed torch (glue-torch<major>.<minor>.so and its .json metadata), a fresh
interpreter loads a matching prebuilt glue with no compiler and prints nothing, torch's
autoload never compiles, and ``import mpsrt.torch`` without a match falls back to the build
with one log line. Each case runs in a fresh interpreter whose PATH holds no compiler, no ninja
and no CUDA (and CXX names nothing), with an empty TORCH_EXTENSIONS_DIR: a build attempt
fails at once instead of compiling.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import mpsrt.torch  # noqa: E402, F401  (this process's glue: what the prebuild copies)
from mpsrt.torch import _glue  # noqa: E402

MINOR = _glue.torch_minor()
LIB = _glue.prebuilt_library(Path("."), MINOR).name  # glue-torch2.13.so (.pyd on Windows)


def _can_prebuild() -> bool:
    """The prebuild needs this torch's glue built: cached already, or a compiler to build it."""
    cached = _glue._is_built(_glue.build_directory())
    return cached or shutil.which(os.environ.get("CXX") or "c++") is not None


@pytest.fixture(scope="module")
def prebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with this torch's prebuilt glue: the prebuild CLI's output (a copy of the
    session's cached build where there is one), or else the package's own prebuilt glue that
    this process loaded."""
    out = tmp_path_factory.mktemp("prebuilt")
    if _can_prebuild():
        run = subprocess.run(
            [sys.executable, "-m", "mpsrt.torch.prebuild", str(out)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == str(out / LIB)
    elif _glue.loaded_from == "prebuilt":
        assert _glue.loaded_library is not None
        for suffix in (_glue.loaded_library.suffix, ".json"):
            shutil.copy(_glue.loaded_library.with_suffix(suffix), out)
    else:  # pragma: no cover - a loaded glue is either
        pytest.skip("no compiler, no cached build and no prebuilt glue to test with")
    return out


def _run(code: str, glue_dir: Path, tmp_path: Path, backend: str, autoload: str = "1"):
    """`code` in a fresh interpreter that cannot compile, with prebuilt glues from `glue_dir`
    and an empty TORCH_EXTENSIONS_DIR (tmp_path/ext); returns the run and that folder."""
    ext = tmp_path / "ext"
    ext.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PATH": str(tmp_path / "no-tools"),
        "CXX": "/nonexistent/c++",
        "CC": "/nonexistent/cc",
        "TORCH_EXTENSIONS_DIR": str(ext),
        _glue.GLUE_DIR_ENV: str(glue_dir),
        "MPSRT_BACKEND": backend,
        "TORCH_DEVICE_BACKEND_AUTOLOAD": autoload,
    }
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    return run, ext


def test_prebuild_writes_the_glue_and_what_the_loader_compares(prebuilt: Path) -> None:
    assert sorted(p.name for p in prebuilt.iterdir()) == [
        f"glue-torch{MINOR}.json",
        LIB,
    ]
    meta = json.loads((prebuilt / f"glue-torch{MINOR}.json").read_text())
    assert meta == _glue.glue_metadata()
    assert meta["torch_minor"] == MINOR and meta["built_with_torch"] == torch.__version__
    if sys.platform.startswith("linux"):
        assert (prebuilt / LIB).read_bytes()[:4] == b"\x7fELF"


def test_the_package_prebuilt_glue_is_what_this_process_loaded() -> None:
    # Where the installed package ships a glue for this torch (the wheel), no build happened.
    shipped = _glue.prebuilt_library(_glue.PREBUILT_DIR)
    if os.environ.get(_glue.GLUE_DIR_ENV) or not shipped.exists():
        pytest.skip("this install has no prebuilt glue for this torch (a source install)")
    assert _glue.loaded_from == "prebuilt"
    assert _glue.loaded_library == shipped


_USE = (
    "import sys, warnings, torch\n"
    "{import_}"
    # On discrete memory the op below runs as a staged CPU kernel, which warns once: a warning
    # about that op, not about loading the device.
    "warnings.filterwarnings('ignore', message=r'\\[torch\\] .* has no kernel on the mpsrt')\n"
    "x = torch.ones(2, device='mpsrt')\n"
    "from mpsrt.torch import _glue\n"
    "print(x.device, (x + 1).sum().item(), _glue.loaded_from,"
    " 'torch.utils.cpp_extension' in sys.modules)\n"
)


@pytest.mark.parametrize("autoload", ["1", "0"])
def test_a_prebuilt_glue_loads_with_no_compiler_and_prints_nothing(
    prebuilt: Path, tmp_path: Path, backend: str, autoload: str
) -> None:
    # With autoload, `import torch` alone makes the device; without, `import mpsrt.torch`.
    code = _USE.format(import_="" if autoload == "1" else "import mpsrt.torch\n")
    run, ext = _run(code, prebuilt, tmp_path, backend, autoload)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert run.stdout.split() == ["mpsrt:0", "4.0", "prebuilt", "False"]
    assert list(ext.iterdir()) == []  # nothing built, nothing cached


def _unmatched(prebuilt: Path, tmp_path: Path, case: str) -> tuple[Path, str]:
    """A folder of prebuilt glues without a match for this torch, and the log line's reason."""
    d = tmp_path / "glues"
    d.mkdir()
    lib, meta = prebuilt / LIB, prebuilt / f"glue-torch{MINOR}.json"
    if case == "other_minor":  # a glue for another torch (what torch 2.14 finds in a 2.13 wheel)
        shutil.copy(lib, d / _glue.prebuilt_library(d, "0.1").name)
        shutil.copy(meta, d / "glue-torch0.1.json")
        return d, f"no prebuilt glue for torch {MINOR} in {d}"
    shutil.copy(lib, d)
    if case == "other_sources":  # built from other glue sources than those installed
        m = json.loads(meta.read_text())
        m["source_digest"] = "0" * 64
        (d / meta.name).write_text(json.dumps(m))
        return d, f"the prebuilt glue {d / lib.name} was built for another source_digest"
    assert case == "no_metadata"
    return d, f"the prebuilt glue {d / lib.name} has no readable metadata"


_AUTOLOAD = (
    "import sys, torch\n"
    "print(torch._C._get_privateuse1_backend_name(), hasattr(torch, 'mpsrt'),"
    " 'mpsrt.torch' in sys.modules, 'torch.utils.cpp_extension' in sys.modules, flush=True)\n"
    "try:\n"
    "    import mpsrt.torch\n"
    "except Exception as e:\n"
    "    print('build failed:', type(e).__name__)\n"
)


@pytest.mark.parametrize("case", ["other_minor", "other_sources", "no_metadata"])
def test_without_a_matching_prebuilt_autoload_registers_nothing_and_the_import_builds(
    prebuilt: Path, tmp_path: Path, backend: str, case: str
) -> None:
    # Autoload: no device, no build, no output. `import mpsrt.torch`: one line saying why it
    # builds, then the build (which fails here: no compiler, no ninja).
    from conftest import AVAILABLE, BACKENDS

    if backend != next(b for b in BACKENDS if b in AVAILABLE):
        pytest.skip("no device is made here: checked on the run's first backend")
    glues, why = _unmatched(prebuilt, tmp_path, case)
    run, ext = _run(_AUTOLOAD, glues, tmp_path, backend)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split() == ["privateuseone", "False", "False", "False"]
    assert lines[1].startswith("build failed:")
    announced = [line for line in run.stderr.splitlines() if line.startswith("[torch]")]
    assert len(announced) == 1, run.stderr
    assert announced[0].startswith(f"[torch] {why}")
    build = ext / "mpsrt" / _glue.extension_name()
    assert announced[0].endswith(f"; building it (needs a C++ compiler, 1-2 min once) in {build}")
    # Nothing before the import's line: autoload said nothing.
    assert run.stderr.startswith("[torch] ")


def test_prebuild_in_a_process_that_loaded_a_prebuilt_glue_writes_this_torch_build(
    prebuilt: Path, tmp_path: Path
) -> None:
    # The process loads the prebuilt glue at `import mpsrt.torch`; the output is still the glue
    # built against the installed torch (a child that ignores prebuilt glues makes it).
    if not _glue._is_built(_glue.build_directory()):
        pytest.skip("needs this session's cached build (no compile here)")
    env = {**os.environ, _glue.GLUE_DIR_ENV: str(prebuilt)}
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "mpsrt.torch.prebuild", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    library = out / LIB
    assert run.stdout.strip() == str(library)
    assert library.read_bytes() == _glue._library(_glue.build_directory()).read_bytes()
    assert json.loads(library.with_suffix(".json").read_text()) == _glue.glue_metadata()


def test_prebuild_refuses_an_outdir_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("")
    run = subprocess.run(
        [sys.executable, "-m", "mpsrt.torch.prebuild", str(f)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2
    assert f"OUTDIR {f} exists and is not a folder" in run.stderr


_CUDA_LINE = "No CUDA runtime is found"


@pytest.mark.parametrize("how", ["torch", "glue"])
def test_the_glue_build_imports_cpp_extension_without_the_no_cuda_runtime_line(
    tmp_path: Path, backend: str, how: str
) -> None:
    from conftest import AVAILABLE, BACKENDS

    if backend != next(b for b in BACKENDS if b in AVAILABLE):
        pytest.skip("backend-independent: checked on the run's first backend")
    # Where torch is a CUDA build and a CUDA toolkit is installed (CUDA_HOME) but no CUDA device
    # is usable, torch's cpp_extension logs the line on import; the glue compiles no CUDA and
    # imports it without the line. The plain import in the same setting prints it: what the
    # glue's import removes. (A CUDA build is simulated: this machine's torch is a CPU build.)
    cuda_build = (
        "import torch\ntorch.cuda._is_compiled = lambda: True\ntorch.version.cuda = '12.8'\n"
        "torch.cuda.is_available = lambda: False\n"
    )
    imports = {
        "torch": "from torch.utils import cpp_extension",
        "glue": "from mpsrt.torch import _glue; _glue._cpp_extension()",
    }
    code = cuda_build + imports[how]
    env = {**os.environ, "CUDA_HOME": str(tmp_path), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert (_CUDA_LINE in run.stderr) == (how == "torch"), run.stderr
