"""Out of memory at the limit: nothing leaks, reclaim callbacks run, and a raising one is reported.

The limit is set with set_per_process_memory_fraction (a fraction of recommended_max_memory), so
the tests run the same on every backend without exhausting the machine.
"""

from __future__ import annotations

import gc
import random
from collections.abc import Iterator

import mpsrt
import pytest

MiB = 1 << 20
LIMIT = 96 * MiB


@pytest.fixture
def limited() -> Iterator[int]:
    """A hard limit of about LIMIT bytes on the current device; the cache emptied before and
    after. Yields the limit in bytes."""
    gc.collect()
    mpsrt.synchronize()
    mpsrt.empty_cache()
    rec = mpsrt.recommended_max_memory()
    fraction = LIMIT / rec
    prev = mpsrt._C.set_per_process_memory_fraction(fraction, mpsrt.current_device())
    try:
        yield int(fraction * rec)
    finally:
        gc.collect()
        mpsrt.synchronize()
        mpsrt._C.set_per_process_memory_fraction(prev, mpsrt.current_device())
        mpsrt.empty_cache()


def usage() -> tuple[int, int, int]:
    return (
        mpsrt.current_allocated_memory(),
        mpsrt.memory_reserved(),
        mpsrt.driver_allocated_memory(),
    )


def test_repeated_ooms_leak_nothing(limited: int) -> None:
    base = usage()
    ooms_before = mpsrt.memory_stats()["num_ooms"]
    rng = random.Random(7)
    ooms = 0
    for _ in range(40):
        held = []
        try:
            # Fill up with random sizes (small, medium and large pools) until the limit refuses.
            while True:
                held.append(mpsrt.empty(rng.choice([4096, 600 * 1024, 3 * MiB, 17 * MiB])))
        except mpsrt.OutOfMemoryError as e:
            ooms += 1
            assert "out of memory" in str(e).lower()
        assert mpsrt.current_allocated_memory() <= limited
        # One request bigger than the whole limit fails too, even with everything freed.
        held.clear()
        with pytest.raises(mpsrt.OutOfMemoryError):
            mpsrt.empty(limited + MiB)
        ooms += 1
        # The runtime still works at the limit: a buffer fits and holds its bytes.
        b = mpsrt.empty(MiB)
        b.fill_(0x5A)
        assert bytes(b.numpy()[:4]) == b"\x5a" * 4
        del b
    mpsrt.synchronize()
    mpsrt.empty_cache()
    assert mpsrt.memory_stats()["num_ooms"] - ooms_before == ooms
    allocated, reserved, driver = usage()
    assert (allocated, reserved) == base[:2]
    assert driver == base[2], f"driver bytes {driver} after {ooms} OOMs, baseline {base[2]}"


def test_reclaim_callback_frees_and_retries(limited: int) -> None:
    hoard = [mpsrt.empty(24 * MiB) for _ in range(3)]
    calls: list[int] = []

    def reclaim(needed: int) -> bool:
        calls.append(needed)
        freed = bool(hoard)
        hoard.clear()
        return freed

    handle = mpsrt.memory.add_reclaim_callback(reclaim)
    try:
        big = mpsrt.empty(40 * MiB)  # fits only once the hoard is gone
    finally:
        mpsrt.memory.remove_reclaim_callback(handle)
    assert calls and calls[0] >= 40 * MiB
    assert big.nbytes == 40 * MiB
    del big


def test_raising_reclaim_callback_is_reported(limited: int, capfd: pytest.CaptureFixture) -> None:
    base = usage()
    calls: list[int] = []

    def broken(needed: int) -> bool:
        calls.append(needed)
        raise ValueError("reclaim failed on purpose")

    handle = mpsrt.memory.add_reclaim_callback(broken)
    try:
        held = [mpsrt.empty(24 * MiB) for _ in range(3)]
        with pytest.raises(mpsrt.OutOfMemoryError):
            mpsrt.empty(40 * MiB)
    finally:
        mpsrt.memory.remove_reclaim_callback(handle)
    err = capfd.readouterr().err
    assert "a reclaim callback raised and was skipped" in err
    assert "reclaim failed on purpose" in err
    assert calls and calls[0] >= 40 * MiB
    # The runtime keeps working and the failed attempt left nothing behind.
    held.clear()
    b = mpsrt.empty(40 * MiB)
    del b
    mpsrt.synchronize()
    mpsrt.empty_cache()
    assert usage() == base


def test_reclaim_callback_that_returns_non_bool_is_reported(
    limited: int, capfd: pytest.CaptureFixture
) -> None:
    handle = mpsrt.memory.add_reclaim_callback(lambda needed: "yes")
    try:
        held = [mpsrt.empty(24 * MiB) for _ in range(3)]
        with pytest.raises(mpsrt.OutOfMemoryError):
            mpsrt.empty(40 * MiB)
    finally:
        mpsrt.memory.remove_reclaim_callback(handle)
    assert "a reclaim callback raised and was skipped" in capfd.readouterr().err
    del held
