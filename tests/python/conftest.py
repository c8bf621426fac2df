"""Runs every test once per backend available on this machine, restoring runtime state.

The backend is chosen once per process, so the session-scoped `backend` fixture re-creates
the runtime (mpsrt._C._reset_runtime) for each backend; pytest groups the tests by it.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import mpsrt
import pytest

AVAILABLE = mpsrt.available_backends()
# MPSRT_TEST_BACKENDS (comma-separated, e.g. "metal" or "cpu,vulkan") restricts the run to those
# backends; one that this machine does not offer is skipped with the reason, not failed.
_WANTED = [b.strip() for b in os.environ.get("MPSRT_TEST_BACKENDS", "").split(",") if b.strip()]
BACKENDS = _WANTED or AVAILABLE


def glue_build_tools_missing() -> str | None:
    """Why the PyTorch device's glue cannot be compiled here, or None where it can:
    torch.utils.cpp_extension runs the compiler named by CXX (else `c++` on PATH) through
    ninja. An installed wheel carries the glue prebuilt and needs neither (.ci/run tests it in
    a venv whose PATH has no compiler, with CXX pointing nowhere)."""
    import shutil

    cxx = os.environ.get("CXX") or "c++"
    if shutil.which(cxx) is None:
        return f"no C++ compiler to build the glue: {cxx!r} (CXX, else c++ on PATH) is not found"
    if shutil.which("ninja") is None:
        return "no ninja on PATH to build the glue (torch.utils.cpp_extension runs it)"
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs_compiler: compiles C++ (the PyTorch glue, inductor's code); skipped where it cannot",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("needs_compiler") is not None:
        why = glue_build_tools_missing()
        if why is not None:
            pytest.skip(why)


# Which test modules ran and which were skipped as a whole, and why (the controller's view: with
# xdist the workers' reports come here). MPSRT_TEST_EVERY_AREA=1 (CI's run of the README's
# command, on a machine that has everything the suite uses but a Metal device) fails the run
# when a module ran no test at all: a missing package or tool must not silently drop an area.
_EVERY_AREA = os.environ.get("MPSRT_TEST_EVERY_AREA") == "1"
_RAN: set[str] = set()
_SKIPPED: dict[str, str] = {}
_LONG_REASONS: dict[str, str] = {}


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _note_skip(nodeid: str, report: pytest.CollectReport | pytest.TestReport) -> None:
    module = nodeid.split("::")[0]
    reason = _skip_reason(report)
    _SKIPPED.setdefault(module, reason)
    if "\n" in reason.strip():
        _LONG_REASONS.setdefault(nodeid, reason)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _note_skip(report.nodeid, report)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _note_skip(report.nodeid, report)
    elif report.when == "call":
        _RAN.add(report.nodeid.split("::")[0])


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    # A module skipped because a run is opt-in ("set MPSRT_BIG_BUFFER_GIB ... to run": CI runs
    # those in steps of their own) is not a missing area.
    whole = {m: r for m, r in _SKIPPED.items() if m not in _RAN and not r.startswith("set MPSRT_")}
    write = terminalreporter.write_line
    if whole:
        write(f"modules that ran no test ({len(whole)}):")
        for module, reason in sorted(whole.items()):
            write(f"  {module}: {reason}")
    for nodeid, reason in sorted(_LONG_REASONS.items()):
        write(f"skip reason of {nodeid} is not one line: {reason!r}", red=True)
    if _EVERY_AREA and (whole or _LONG_REASONS):
        write(
            "MPSRT_TEST_EVERY_AREA=1: every module must run and every skip must say why in one "
            "line (above); install what the reason names",
            red=True,
        )
        terminalreporter._session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_finish(session: pytest.Session) -> None:
    # Collection leaves hundreds of thousands of long-lived objects (hypothesis strategies,
    # parametrised items). Moving them out of the collector's generations keeps each of the
    # thousands of collections the tests trigger (many call gc.collect()) from walking them
    # all again.
    # torch's heavy modules (dynamo with sympy, distributed, ...) are imported lazily by the
    # torch tests and the bench's torch area: import them now, so that they are frozen too.
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        import importlib

        for name in ("torch._dynamo", "torch.distributed", "torch.nn.parallel"):
            try:
                importlib.import_module(name)
            except ImportError:
                pass
    gc.collect()
    gc.freeze()


def reset_runtime(backend: str, **env: object) -> None:
    """Re-creates the runtime on `backend` with extra environment variables."""
    e = dict(os.environ)
    e["MPSRT_BACKEND"] = backend
    e.update({k: str(v) for k, v in env.items()})
    mpsrt._C._reset_runtime(e)


@pytest.fixture(scope="session", params=BACKENDS, autouse=True)
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param not in AVAILABLE:
        pytest.skip(
            f"backend {request.param!r} (MPSRT_TEST_BACKENDS) is not available on this machine; "
            f"available: {AVAILABLE}"
        )
    reset_runtime(request.param)
    yield request.param
    mpsrt._C._reset_runtime(None)


@pytest.fixture(scope="module", autouse=True)
def _freeze_what_earlier_modules_left() -> None:
    """Each test module starts with what the earlier ones left alive (torch's modules, compiled
    graphs, hypothesis' strategies, ...) moved out of the collector's generations, as
    pytest_collection_finish does after collection: the suites that call gc.collect() around
    every test (test_bad_input.py's leak checks, four per row) then walk only their own
    objects, not the hundreds of thousands the torch tests leave (a collection took ~50 ms
    there, 4 x 1,272 of them). Garbage those modules made is collected first."""
    gc.collect()
    gc.freeze()


@pytest.fixture
def device_kernels() -> Iterator[bool]:
    """The PyTorch device's ops run on mpsrt's kernels wherever the device has them
    (torch.mpsrt._set_kernels("device"), as MPSRT_TORCH_KERNELS=device: on lavapipe too, so that
    the tests check every kernel); yields whether this device has them. Fallback counts start
    afresh and torch's CPU generator from seed 0; the previous mode comes back after the test."""
    torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch")
    import mpsrt.torch

    previous = torch.mpsrt._set_kernels("device")
    torch.mpsrt.reset_fallback_counts()
    torch.manual_seed(0)  # the tests' random inputs are the same in every run
    try:
        yield torch.mpsrt._kernels_enabled()
    finally:
        torch.mpsrt._set_kernels(previous)
        # Tensors in reference cycles (autograd graphs, samples) are freed before the runtime
        # is re-created for the next backend.
        gc.collect()
        mpsrt.synchronize()


@pytest.fixture
def kernels_only(device_kernels: bool) -> None:
    """For the tests of the kernel families (test_torch_kernels_*.py): they compare the
    device's kernels with torch's CPU kernels, so they run where the device has kernels (vulkan,
    here on lavapipe) and are skipped, saying so, where it has none (the cpu backend: there the
    "device" result is the CPU kernel itself, run by the fallback, which test_torch_device.py
    and test_torch_kernels.py test on every backend)."""
    if not device_kernels:
        pytest.skip("this device runs no kernels: the kernel tests compare kernels with torch CPU")


@pytest.fixture(autouse=True)
def _restore_device(backend: str) -> Iterator[None]:
    yield
    # Under xdist a worker runs the backends' tests interleaved: a test that leaves the runtime
    # on another backend would silently run its successors there.
    assert mpsrt.backend() == backend, f"the test left the runtime on {mpsrt.backend()!r}"
    if mpsrt.current_device() != 0:
        mpsrt.set_device(0)


def is_unified() -> bool:
    """The current device's memory model: True (unified) where numpy() and DLPack to the host
    alias the device memory, False (discrete) where every host access is a copy."""
    return mpsrt.get_device_properties().unified_memory


@pytest.fixture
def unified_memory(backend: str) -> None:
    """Skips (with the reason) a test of aliasing -- the host reading and writing the device
    memory in place through numpy() or DLPack -- where the memory model is discrete: there every
    host access is a copy, which the tests of the discrete contract check instead."""
    if not is_unified():
        pytest.skip(
            f"backend {backend}: discrete memory (MPSRT_VULKAN_MEMORY or a discrete GPU); "
            "the host does not alias device memory there"
        )


@pytest.fixture
def runtime_env(backend: str):
    """Call with keyword env vars to re-create the runtime with them for one test."""

    @contextmanager
    def apply(**env: object) -> Iterator[None]:
        reset_runtime(backend, **env)
        try:
            yield
        finally:
            reset_runtime(backend)

    return apply


# Settings of the whole run that every runtime of it keeps, subprocesses included: the memory
# model CI forces on lavapipe (MPSRT_VULKAN_MEMORY=discrete) applies to every test.
KEPT_SETTINGS = ("MPSRT_VULKAN_MEMORY",)


def run_python(code: str, backend: str | None = None, **env: str) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with extra environment variables (the run's
    KEPT_SETTINGS kept, every other MPSRT_ / PYTORCH_MPS variable removed)."""
    e = {
        k: v
        for k, v in os.environ.items()
        if k in KEPT_SETTINGS or not k.startswith(("MPSRT_", "PYTORCH_MPS"))
    }
    if backend is not None:
        e["MPSRT_BACKEND"] = backend
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120
    )


PATIENCE = 10.0  # seconds before something that must happen is declared lost


class Gate:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.started = threading.Event()

    def open(self) -> None:
        self.event.set()


@contextmanager
def blocked(stream: mpsrt.Stream) -> Iterator[Gate]:
    """Blocks `stream` behind a host callback until the gate opens (at the latest when the block
    ends). Returns once the callback runs: the stream is known to be busy."""
    gate = Gate()

    def wait() -> None:
        gate.started.set()
        gate.event.wait(PATIENCE)

    stream.add_callback(wait)
    try:
        assert gate.started.wait(PATIENCE), "a host callback on an idle stream never ran"
        yield gate
    finally:
        gate.open()
