"""Random sequences of allocator calls against a model (hypothesis state machine).

Steps: alloc (1 B to ~40 MiB, mostly small), free (del or .free()), fill, empty_cache,
set_per_process_memory_fraction and set_cache_limit changes. After every step: live buffers
never overlap and keep their bytes; the statistics, current_allocated_memory(), the snapshot's
blocks and the driver's bytes agree; an OutOfMemoryError only comes when the limit leaves no
room for the heap the request needs once the cache is freed.

MPSRT_FUZZ_STEPS is the number of steps to run in all (default 2000: sequences of up to 40
steps). The extended mode sets it to 10000 or more (sequences of up to 200 steps); the test
runs examples until that many steps were executed and prints the count. Failures are reported
unshrunk (shrinking takes minutes); set MPSRT_FUZZ_SHRINK=1 for a minimal sequence.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator

import mpsrt
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from mpsrt import memory

KiB = 1 << 10
MiB = 1 << 20
SIZE_MAX = 2**64 - 1
TOTAL_STEPS = int(os.environ.get("MPSRT_FUZZ_STEPS", "2000"))
STEPS = 40 if TOTAL_STEPS <= 2000 else 200  # the longest sequence
executed = {"steps": 0, "examples": 0}

SIZES = st.one_of(
    st.integers(1, 4 * KiB),
    st.integers(1, 4 * KiB),
    st.integers(4 * KiB, MiB),
    st.integers(4 * KiB, MiB),
    st.integers(MiB + 1, 10 * MiB - 1),
    st.integers(10 * MiB, 40 * MiB),
    st.integers(10 * MiB, 40 * MiB),
)
LIMITS = st.sampled_from([0, 48 * MiB, 64 * MiB, 96 * MiB, 160 * MiB])  # 0: no limit
CAPS = st.sampled_from([0, 8 * MiB, 40 * MiB, SIZE_MAX])


def rounded(n: int) -> int:
    """Smallest block for a request: 512 B steps (a block may be bigger: a remainder below the
    split threshold stays with it)."""
    return (max(n, 1) + 511) // 512 * 512


def split_threshold(n: int) -> int:
    """A block keeps a remainder smaller than this: 512 B in the small pool, else 1 MiB."""
    return 512 if n <= MiB else MiB


def own_heap(n: int) -> int:
    """The heap a request needs when nothing cached can serve it."""
    if n <= MiB:
        return 8 * MiB
    if n < 10 * MiB:
        return 32 * MiB
    return (n + 2 * MiB - 1) // (2 * MiB) * (2 * MiB)


@pytest.fixture(autouse=True)
def _drop_failure_references() -> Iterator[None]:
    """pytest keeps the last failure's traceback in sys.last_*; its frames would keep buffers
    alive past the test (and past a runtime reset by a later test, which crashes)."""
    yield
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    gc.collect()


class MemoryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        executed["examples"] += 1
        self.started = False
        gc.collect()
        mpsrt.synchronize()
        mpsrt.empty_cache()
        self.dev = mpsrt.current_device()
        self.rec = mpsrt.recommended_max_memory()
        self.prev_fraction = mpsrt._C.set_per_process_memory_fraction(0.0, self.dev)
        self.prev_cap = mpsrt._C.set_cache_limit(SIZE_MAX, self.dev)
        self.limit = 0
        self.cap = SIZE_MAX
        self.base_allocated = mpsrt.current_allocated_memory()
        self.live: list[tuple[mpsrt.Buffer, int, int]] = []  # buffer, nbytes, fill byte (-1: none)
        self.ooms = mpsrt.memory_stats()["num_ooms"]
        self.unsettled = False

    def teardown(self) -> None:
        self.live.clear()
        gc.collect()
        mpsrt.synchronize()
        mpsrt._C.set_per_process_memory_fraction(self.prev_fraction, self.dev)
        mpsrt._C.set_cache_limit(self.prev_cap, self.dev)
        mpsrt.empty_cache()

    # ------------------------------------------------------------------ rules

    @rule(n=SIZES)
    def alloc(self, n: int) -> None:
        try:
            b = mpsrt.empty(n)
        except mpsrt.OutOfMemoryError as e:
            self.ooms += 1
            reserved = mpsrt.memory_reserved()
            assert self.limit > 0, f"out of memory without a limit: {e}"
            assert reserved + own_heap(n) > self.limit, (
                f"out of memory for {n} B although {reserved} B reserved + a {own_heap(n)} B "
                f"heap fit the {self.limit} B limit: {e}"
            )
            return
        assert b.nbytes == n and b.data_ptr % 512 == 0
        self.live.append((b, n, -1))

    @precondition(lambda self: self.live)
    @rule(data=st.data(), explicit=st.booleans())
    def free(self, data: st.DataObject, explicit: bool) -> None:
        i = data.draw(st.integers(0, len(self.live) - 1), label="index")
        b, _, _ = self.live.pop(i)
        if explicit:
            b.free()
        del b
        self.unsettled = False  # all work is done (each step ends synchronized): cap enforced

    @precondition(lambda self: self.live)
    @rule()
    def free_all(self) -> None:
        self.live.clear()
        self.unsettled = False

    @precondition(lambda self: self.live)
    @rule(data=st.data(), value=st.integers(1, 255))
    def fill(self, data: st.DataObject, value: int) -> None:
        i = data.draw(st.integers(0, len(self.live) - 1), label="index")
        b, n, _ = self.live[i]
        b.fill_(value)
        self.live[i] = (b, n, value)

    @rule()
    def empty_cache(self) -> None:
        mpsrt.synchronize()
        mpsrt.empty_cache()
        for seg in memory.snapshot()["segments"]:
            assert seg["allocated_size"] > 0, "empty_cache() kept a heap without live blocks"

    @initialize(limit=LIMITS)
    def start_with_a_limit(self, limit: int) -> None:
        self.set_fraction(limit)

    @rule(limit=LIMITS)
    def set_fraction(self, limit: int) -> None:
        fraction = limit / self.rec
        mpsrt.set_per_process_memory_fraction(float(fraction))
        self.limit = int(fraction * self.rec)

    @rule(cap=CAPS)
    def set_cache_limit(self, cap: int) -> None:
        prev = mpsrt.set_cache_limit(cap)
        assert prev == self.cap
        self.cap = cap
        self.unsettled = False

    @precondition(lambda self: self.live)
    @rule(data=st.data(), value=st.integers(1, 255))
    def fill_free_and_realloc(self, data: st.DataObject, value: int) -> None:
        """Frees a buffer whose fill is still queued and asks for its size again at once: the
        same stream may reuse it."""
        i = data.draw(st.integers(0, len(self.live) - 1), label="index")
        b, n, _ = self.live.pop(i)
        b.fill_(value)
        del b
        self.unsettled = True  # a heap with queued work may stay cached past the cap
        self.alloc(n)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def consistent(self) -> None:
        # Invariants run once after the initialization and then after every step.
        if self.started:
            executed["steps"] += 1
        self.started = True
        mpsrt.synchronize()
        # Live buffers never overlap and keep their bytes.
        spans = sorted((b.data_ptr, b.data_ptr + n) for b, n, _ in self.live)
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end <= start, "two live buffers overlap"
        for b, n, value in self.live:
            if value >= 0:
                a = b.numpy()
                assert a[0] == value and a[n - 1] == value, "a buffer's bytes were overwritten"
        # Counters, statistics and the driver agree.
        s = mpsrt.memory_stats()
        allocated = mpsrt.current_allocated_memory()
        assert s["allocated_bytes.all.current"] == allocated
        assert s["allocation.all.current"] >= len(self.live)
        assert s["num_ooms"] == self.ooms
        assert allocated - self.base_allocated >= sum(rounded(n) for _, n, _ in self.live)
        reserved = mpsrt.memory_reserved()
        assert reserved == s["reserved_bytes.all.current"] >= allocated
        if mpsrt.backend() == "cpu":
            assert mpsrt.driver_allocated_memory() == reserved
        else:
            assert mpsrt.driver_allocated_memory() >= reserved
        # The snapshot's blocks are the live buffers, of the model's sizes.
        blocks = {}
        snap_reserved = 0
        empty_heaps = 0
        for seg in memory.snapshot()["segments"]:
            snap_reserved += seg["total_size"]
            if seg["allocated_size"] == 0:
                empty_heaps += seg["total_size"]
            for blk in seg["blocks"]:
                if blk["state"] == "active_allocated":
                    blocks[blk["address"]] = blk
        assert snap_reserved == reserved
        assert sum(b["size"] for b in blocks.values()) == allocated
        for b, n, _ in self.live:
            blk = blocks.get(b.data_ptr)
            assert blk is not None, "a live buffer has no allocated block"
            assert blk["requested_size"] == n
            assert rounded(n) <= blk["size"] < rounded(n) + split_threshold(n)
        # Heaps that hold nothing count against the cache cap (free space in partly used heaps
        # cannot be released).
        if self.cap != SIZE_MAX and not self.unsettled:
            assert empty_heaps <= self.cap, f"{empty_heaps} B of empty heaps cached, cap {self.cap}"


def test_allocator_state_machine() -> None:
    # No automatic garbage collection: it could free buffers of an earlier test mid-check.
    gc.collect()
    gc.disable()
    executed.update(steps=0, examples=0)
    try:
        while executed["steps"] < TOTAL_STEPS:
            run_machine(max(5, (TOTAL_STEPS - executed["steps"]) // STEPS + 1))
    finally:
        gc.enable()
    print(
        f"\nallocator state machine: {executed['steps']} steps in {executed['examples']} examples"
    )
    assert executed["steps"] >= TOTAL_STEPS


def run_machine(examples: int) -> None:
    run_state_machine_as_test(
        MemoryMachine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            # Shrinking a failure takes minutes; the unshrunk steps are printed.
            phases=[Phase.explicit, Phase.reuse, Phase.generate]
            + ([Phase.shrink] if os.environ.get("MPSRT_FUZZ_SHRINK") else []),
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


@pytest.mark.parametrize(
    "n", [1, 511, 512, 513, MiB, MiB + 1, 10 * MiB - 1, 10 * MiB, 33 * MiB - 5]
)
def test_model_helpers_match_the_allocator(n: int) -> None:
    """The model's rounding agrees with a real allocation (guards the invariants above)."""
    gc.collect()
    mpsrt.empty_cache()
    b = mpsrt.empty(n)
    blk = next(
        bl
        for s in memory.snapshot()["segments"]
        for bl in s["blocks"]
        if bl["address"] == b.data_ptr
    )
    assert rounded(n) <= blk["size"] < rounded(n) + split_threshold(n)
    seg = next(
        s
        for s in memory.snapshot()["segments"]
        if s["address"] <= b.data_ptr < s["address"] + s["total_size"]
    )
    if mpsrt.backend() == "cpu":
        assert seg["total_size"] == own_heap(n)
    del b
