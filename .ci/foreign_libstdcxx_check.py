"""mpsrt._C in a process that already holds another libstdc++ (the crash of notes/gpu-h100.md).

An extension linked with a static libstdc++ (`-DMPSRT_STATIC_LIBSTDCXX=ON`, a compiler wrapper
that adds -static-libstdc++, a manylinux wheel) carries its own copy of the C++ runtime. If that
copy's symbols are dynamic, the process's shared libstdc++ (numpy's, torch's, loaded first)
takes some of them over: GNU-unique symbols such as the locale facets' ids bind to the first
definition in the process whatever the scope. The runtime then crashed on its first reset in
`describe_options` (an ostream formatting a double with a facet of the other library).

This script loads the other libstdc++ first (numpy, torch when installed, and libstdc++.so.6
itself into the global scope), then resets the runtime on every backend several times, reads
the options, raises and catches the core's errors and runs a few operations, checking their
results. Run it with PYTHONPATH pointing at the build to check (see .ci/static_libstdcxx.sh);
MPSRT_EXPECT_MODULE_DIR, when set, is where mpsrt._C must come from.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

# torch's autoload would import mpsrt.torch (and build its glue) at `import torch`.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import numpy as np

try:
    import torch
except ImportError:
    torch = None
# The shared libstdc++ in the global scope, as a program that links it does: the check does not
# depend on how torch loads its libraries.
ctypes.CDLL("libstdc++.so.6", mode=os.RTLD_GLOBAL)


def loaded_libstdcxx() -> list[str]:
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if "libstdc++" in line})


before = loaded_libstdcxx()
assert before, "no shared libstdc++ was loaded before mpsrt._C; the check would prove nothing"

import mpsrt  # noqa: E402

where = os.path.dirname(os.path.realpath(mpsrt._C.__file__))
expected = os.environ.get("MPSRT_EXPECT_MODULE_DIR")
if expected:
    assert where == os.path.realpath(expected), f"mpsrt._C came from {where}, not {expected}"
print(f"mpsrt._C from {where}; shared libstdc++ in the process: {', '.join(before)}")
print(f"numpy {np.__version__}, torch {torch.__version__ if torch else 'not installed'}")

t0 = time.monotonic()
backends = mpsrt.available_backends()
assert "cpu" in backends, backends
env = dict(os.environ)
ROUNDS = 4
reference: list[np.ndarray] = []


def exercise(backend: str, r: int) -> None:
    """One reset and a few operations. Everything it makes dies on return: a Buffer, Stream or
    Event must not outlive the runtime that made it (_reset_runtime is a testing hook)."""
    # Ratios that the core formats as doubles (the crash's path), then the defaults.
    ratios = {"MPSRT_HIGH_WATERMARK_RATIO": "1.25", "MPSRT_LOW_WATERMARK_RATIO": "0.5"}
    mpsrt._C._reset_runtime({**env, "MPSRT_BACKEND": backend, **(ratios if r % 2 else {})})
    assert mpsrt.backend() == backend, (mpsrt.backend(), backend)
    values = {o["name"]: o["value"] for o in mpsrt.options()}
    high, low = ("1.25", "0.5") if r % 2 else ("1.7", "1.4")
    assert values["MPSRT_HIGH_WATERMARK_RATIO"] == high, values
    assert values["MPSRT_LOW_WATERMARK_RATIO"] == low, values
    assert values["MPSRT_BACKEND"] == backend, values

    # Random numbers (bit-identical across backends), fill, copies both ways, an event.
    mpsrt.manual_seed(1234)
    x = mpsrt.empty(4096, dtype="float32").uniform_(-1.0, 1.0)
    y = mpsrt.empty(4096, dtype="float32").fill_(0.5)
    y.copy_(x)
    ev = mpsrt.Event()
    ev.record()
    ev.synchronize()
    mpsrt.synchronize()
    host = np.arange(4096, dtype=np.float32)
    z = mpsrt.empty(4096, dtype="float32").copy_(host)
    if mpsrt.get_device_properties().unified_memory:
        got = y.numpy().copy()
        assert np.all((got >= -1.0) & (got < 1.0)), "uniform_ out of range"
        if not reference:
            reference.append(got)
        assert np.array_equal(got, reference[0]), f"{backend}: the random stream differs"
        assert np.array_equal(z.numpy(), host), f"{backend}: the copy from the host differs"
    del x, y, z, ev
    mpsrt.empty_cache()

    # The core's errors cross the module's C++ runtime into Python exceptions.
    mpsrt._C._reset_runtime({**env, "MPSRT_BACKEND": backend, "MPSRT_LOW_WATERMARK_RATIO": "1.9"})
    try:
        mpsrt.device_count()
    except ValueError as e:
        assert "MPSRT_LOW_WATERMARK_RATIO (1.9) must not exceed" in str(e), str(e)
        assert "MPSRT_HIGH_WATERMARK_RATIO (1.7)" in str(e), str(e)
    else:
        raise AssertionError("a low watermark above the high one was accepted")


for r in range(ROUNDS):
    for backend in backends:
        exercise(backend, r)

mpsrt._C._reset_runtime({**env, "MPSRT_BACKEND": "cpu"})
print(
    f"{ROUNDS} rounds of resets, options and ops on {', '.join(backends)} "
    f"in {time.monotonic() - t0:.1f} s"
)

# The PyTorch device's glue (compiled against torch, so linked with the shared libstdc++) calls
# into this module's runtime through the C API. Only where torch is installed and the glue is
# already built (CI builds it at install time; a first build here would take a core-minute).
if torch is not None and os.environ.get("MPSRT_CHECK_TORCH_DEVICE") == "1":
    import mpsrt.torch

    a = torch.arange(8, dtype=torch.float32, device="mpsrt")
    b = (a * 2 + 1).cpu()
    assert b.tolist() == [float(2 * i + 1) for i in range(8)], b
    print("the PyTorch device works beside it")

print("passed")
sys.exit(0)
