"""Fill and copy commands through a stream, on every kernel path of the cpu backend."""

from __future__ import annotations

import mpsrt
import numpy as np
import pytest

RawHeap = mpsrt._C._bench.RawHeap
# Sizes around the vector widths, the L2 size and the parallel split (4 MiB).
SIZES = [1, 7, 63, 64, 65, 255, 4099, (1 << 20) + 13, (6 << 20) + 24]


def _check_fill_and_copy() -> None:
    # Buffers of exactly n bytes; a fill of 2, 4 or 8-byte patterns through a view of that
    # width (the fill of whole patterns leaves the tail as it was). Read back with numpy():
    # the memory itself on unified memory, a staged copy on discrete memory.
    rng = np.random.default_rng(0)
    for n in SIZES:
        a, b = mpsrt.empty(n), mpsrt.empty(n)
        for size, value in ((1, 0xAB), (2, 0xBEEF), (4, 0x01020304), (8, 0x1122334455667788)):
            count = n // size
            if count:
                a.view(0, (count,), f"uint{8 * size}").fill_(value)
            pattern = np.frombuffer(value.to_bytes(8, "little")[:size], np.uint8)
            expect = np.resize(pattern, count * size)
            assert np.array_equal(a.numpy()[: expect.size], expect), (n, size)
        host = rng.integers(0, 256, n, dtype=np.uint8)
        b.copy_(host)
        a.copy_(b)
        assert np.array_equal(a.numpy(), host), n


@pytest.mark.parametrize("isa", ["auto", "scalar", "avx2", "avx512"])
def test_fill_copy_every_kernel_path(backend: str, runtime_env, isa: str) -> None:
    if backend != "cpu" and isa != "auto":
        pytest.skip("instruction-set selection is a cpu-backend setting")
    with runtime_env(MPSRT_CPU_ISA=isa):
        try:
            details = mpsrt.get_device_properties().details
        except ValueError as e:
            assert "not supported by this CPU" in str(e)
            pytest.skip(f"this CPU has no {isa}")
        if backend == "cpu" and isa != "auto":
            assert details == f"kernels={isa}"
        _check_fill_and_copy()


def test_commands_run_in_order() -> None:
    a = mpsrt.empty(1 << 16)
    for v in range(1, 50):
        a.fill_(v)
    assert (a.numpy() == 49).all()


def test_bad_pattern_size() -> None:
    a = RawHeap(64)
    with pytest.raises(ValueError, match="pattern_size must be 1, 2, 4 or 8"):
        a.fill(1, 3)
    a.fill(5)
    mpsrt.synchronize()
    if mpsrt.get_device_properties().unified_memory:  # raw heaps are host-visible there only
        assert (a.numpy() == 5).all()
