"""Multi-threaded stress of the allocator, streams, events and generators (hardening).

Eight threads mix, for MPSRT_STRESS_SECONDS in all (default 8, split evenly across the
available backends): allocations of random sizes (64 B .. 16 MiB, log-uniform), fills with
per-thread patterns and verification of contents, device copies, stream switches, events
(record / wait / query / synchronize), random numbers from per-thread Generators,
empty_cache() and set_per_process_memory_fraction() changes.

Checked all along: live buffers never overlap, every buffer holds what its thread wrote.
Checked at each quiescent point (all threads parked on a barrier) and at the end: the
allocator's statistics agree with the live buffers; after everything is freed the
allocated bytes return to the baseline, and after empty_cache() the reserved and driver
bytes do too. After the run, each thread's random numbers are replayed serially with the
same seeds and must be identical (normal: within 2 ulp, as API.md allows).

Every wait has a time limit: a hang fails the test with the stacks of the stuck threads.
Run with -s to see the summary line (threads x seconds, operations done).

Soak: MPSRT_SOAK_MINUTES=M runs test_soak, the same workload for M minutes per backend. Every
SOAK_PHASE seconds all threads stop, every buffer is released, the cache is emptied and the
process's resident memory (RSS) and the driver's bytes are sampled; the series is printed.
After the warm-up (the first fifth of the samples, at least two) both must stay flat: driver
bytes back at the baseline every time, RSS within 1% of its first post-warm-up sample. Without
the variable the soak test is skipped. The random numbers replayed at the end are those of
the warm-up (the log is not written later, so that it does not count as drift).
"""

from __future__ import annotations

import bisect
import gc
import hashlib
import math
import os
import random
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import fresh_runtime
import mpsrt
import numpy as np
import pytest

BACKENDS = mpsrt.available_backends()
TOTAL_SECONDS = float(os.environ.get("MPSRT_STRESS_SECONDS", "8"))
SECONDS = TOTAL_SECONDS / max(1, len(BACKENDS))  # per backend
N_THREADS = 8
MIN_BYTES, MAX_BYTES = 64, 16 << 20
MAX_LIVE = 12  # buffers a thread keeps alive at most
MAX_LIVE_BYTES = 48 << 20  # bytes a thread keeps alive at most (8 x 48 MiB < every limit used)
MAX_RNG_ELEMS = 1 << 14
FRACTIONS = (0.0, 0.75, 1.0, 1.7, 2.0)  # 0 = unlimited; every limit leaves ample headroom
WAIT = 60.0  # seconds any single wait may take before it counts as a hang
N_PHASES = max(1, min(10, int(SECONDS // 3)))  # quiescent checks during the run
SOAK_MINUTES = float(os.environ.get("MPSRT_SOAK_MINUTES", "0"))
SOAK_PHASE = 10.0  # seconds between soak samples
SOAK_RNG_LOG = 2000  # random ops a thread logs for the replay in a soak (the log must not grow)

# --------------------------------------------------------------------------- runtime per backend

# A fresh runtime on one backend per test (shared with the big-Buffer test).
fresh_backend = fresh_runtime.fresh_backend


# --------------------------------------------------------------------------- helpers


class StressError(AssertionError):
    pass


def wait_until(pred: Callable[[], bool], what: str) -> None:
    """Polls pred() until it is true; a hang (more than WAIT seconds) is an error."""
    end = time.monotonic() + WAIT
    while not pred():
        if time.monotonic() > end:
            raise StressError(f"{what}: still not done after {WAIT} s")
        time.sleep(0.0002)


def log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return min(hi, max(lo, int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))))


class Registry:
    """[address, address + nbytes) of every live buffer, checked for overlap on insert."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: list[int] = []
        self.spans: dict[int, tuple[int, int, str]] = {}  # start -> (end, thread, what)

    def add(self, buf: mpsrt.Buffer, thread: int, what: str) -> int:
        start = buf.data_ptr
        end = start + buf.nbytes
        with self.lock:
            i = bisect.bisect_left(self.starts, start)
            clash = []
            if i < len(self.starts) and self.starts[i] < end:
                clash.append(self.starts[i])
            if i > 0 and self.spans[self.starts[i - 1]][0] > start:
                clash.append(self.starts[i - 1])
            if clash:
                other = self.spans[clash[0]]
                raise StressError(
                    f"thread {thread}: new {what} [{start:#x}, {end:#x}) overlaps the live "
                    f"{other[2]} [{clash[0]:#x}, {other[0]:#x}) of thread {other[1]}"
                )
            self.starts.insert(i, start)
            self.spans[start] = (end, thread, what)
        return start

    def remove(self, start: int) -> None:
        with self.lock:
            i = bisect.bisect_left(self.starts, start)
            assert i < len(self.starts) and self.starts[i] == start, hex(start)
            del self.starts[i]
            del self.spans[start]

    def snapshot(self) -> dict[int, int]:
        with self.lock:
            return {s: e - s for s, (e, _, _) in self.spans.items()}


@dataclass
class Live:
    buf: mpsrt.Buffer
    addr: int
    value: int  # every uint32 element holds this
    stream: mpsrt.Stream  # the last stream that used it (later users order after it)


@dataclass
class RngRecord:
    op: str  # "seed" or an op name
    arg: Any
    n: int
    offset_before: int
    offset_after: int
    digest: str | None
    values: np.ndarray | None  # normal: kept (compared within 2 ulp), for the first ones


@dataclass
class ThreadState:
    index: int
    rng: random.Random
    seed: int
    gen: mpsrt.Generator | None = None
    live: list[Live] = field(default_factory=list)
    live_bytes: int = 0
    streams: list[mpsrt.Stream] = field(default_factory=list)
    rng_log: list[RngRecord] = field(default_factory=list)
    counter: int = 0
    ops: Counter = field(default_factory=Counter)
    normals_kept: int = 0


def rng_digest(out: mpsrt.Buffer) -> str:
    return hashlib.sha1(out.numpy().tobytes()).hexdigest()


def run_rng_op(op: str, arg: Any, n: int, gen: mpsrt.Generator, stream: Any) -> mpsrt.Buffer:
    if op == "rand":
        return mpsrt.rand(n, dtype=arg, generator=gen, stream=stream)
    if op == "randn":
        return mpsrt.randn(n, generator=gen, stream=stream)
    if op == "randint":
        dtype, low, high = arg
        return mpsrt.randint(low, high, (n,), dtype=dtype, generator=gen, stream=stream)
    if op == "bernoulli":
        return mpsrt.bernoulli(arg, (n,), generator=gen, stream=stream)
    if op == "bits":
        return mpsrt.random_bits((n,), generator=gen, stream=stream)
    if op == "uniform_":
        out = mpsrt.empty(n, dtype="float32", stream=stream)
        with mpsrt.stream(stream):
            return out.uniform_(arg[0], arg[1], generator=gen)
    raise AssertionError(op)


RNG_OPS = ("rand", "randn", "randint", "bernoulli", "bits", "uniform_")


def random_rng_arg(op: str, rng: random.Random) -> Any:
    if op == "rand":
        return rng.choice(("float32", "float64"))
    if op == "randint":
        return rng.choice(
            (("int64", -5, 1000), ("int32", 0, 7), ("uint8", 3, 200), ("int64", 0, 1 << 40))
        )
    if op == "bernoulli":
        return rng.choice((0.0, 0.25, 0.5, 1.0))
    if op == "uniform_":
        return rng.choice(((0.0, 1.0), (-3.0, 5.0)))
    return None


# --------------------------------------------------------------------------- the stress run


class Stress:
    def __init__(self, backend: str, seconds: float, phases: int = N_PHASES, soak: bool = False):
        self.backend = backend
        self.seconds = seconds
        self.phases = phases
        self.soak = soak  # each quiescent point releases everything and samples memory
        self.samples: list[tuple[float, int, int, int]] = []  # time, RSS, driver, driver live
        self.rng_log_cap = SOAK_RNG_LOG if soak else sys.maxsize
        # Soak: the replay log (and the normals it keeps) is only written during the warm-up,
        # so that what it holds does not count as drift.
        self.log_until = math.inf
        self.registry = Registry()
        self.errors: list[str] = []
        self.errors_lock = threading.Lock()
        self.fraction_lock = threading.Lock()
        self.states = [
            ThreadState(index=t, rng=random.Random(0x5EED + 7919 * t), seed=1000 + 17 * t)
            for t in range(N_THREADS)
        ]
        self.barrier = threading.Barrier(N_THREADS, action=self.quiescent_check, timeout=WAIT)
        self.checks = 0
        self.baseline_active: set[int] = set()

    # ---- statistics at quiescence

    def active_blocks(self) -> dict[int, int]:
        snap = mpsrt.memory.snapshot()
        return {
            b["address"]: b["size"]
            for seg in snap["segments"]
            for b in seg["blocks"]
            if b["state"] == "active_allocated"
        }

    def quiescent_check(self) -> None:
        """Runs while every worker waits on the barrier: no buffer is being made or freed."""
        gc.collect()
        mpsrt.synchronize()
        live = self.registry.snapshot()
        active = self.active_blocks()
        ours = {a: s for a, s in active.items() if a not in self.baseline_active}
        missing = sorted(set(live) - set(ours))
        extra = sorted(set(ours) - set(live))
        assert not missing, f"live buffers the allocator does not list: {missing[:5]}"
        assert not extra, f"allocated blocks no live buffer owns (leak): {extra[:5]}"
        for addr, nbytes in live.items():
            assert ours[addr] >= nbytes, (hex(addr), ours[addr], nbytes)
        stats = mpsrt.memory_stats()
        allocated = mpsrt.memory_allocated()
        assert allocated == sum(active.values()), (allocated, sum(active.values()))
        assert stats["allocated_bytes.all.current"] == allocated
        assert mpsrt.current_allocated_memory() == allocated
        assert mpsrt.memory_reserved() >= allocated
        assert stats["allocated_bytes.all.peak"] >= allocated
        self.checks += 1
        if self.soak:
            self.sample()

    def sample(self) -> None:
        """Soak: releases every buffer, empties the cache, records RSS and driver bytes."""
        live_driver = mpsrt.driver_allocated_memory()
        self.verify_and_free_all(keep_streams=True)
        gc.collect()
        mpsrt.synchronize()
        mpsrt.empty_cache()
        self.samples.append(
            (time.monotonic(), rss_bytes(), mpsrt.driver_allocated_memory(), live_driver)
        )

    # ---- worker

    def fail(self, t: int, text: str) -> None:
        with self.errors_lock:
            self.errors.append(f"thread {t}: {text}")

    def use_on(self, st: ThreadState, item: Live, s: mpsrt.Stream) -> None:
        """Orders s after the last stream that used the buffer (an event), as CUDA requires."""
        if item.stream != s:
            e = mpsrt.Event()
            e.record(item.stream)
            s.wait_event(e)
            st.ops["cross_stream_event"] += 1
            item.stream = s

    def pattern(self, st: ThreadState) -> int:
        st.counter += 1
        return (st.index << 24) | (st.counter & 0xFFFFFF)

    def verify(self, st: ThreadState, item: Live, what: str) -> None:
        a = item.buf.numpy()
        try:
            bad = np.flatnonzero(a != np.uint32(item.value))
            if bad.size:
                i = int(bad[0])
                raise StressError(
                    f"{what}: buffer at {item.addr:#x} ({item.buf.nbytes} B) element {i} is "
                    f"{int(a[i]):#010x}, expected {item.value:#010x} ({bad.size} elements wrong)"
                )
        finally:
            del a
        st.ops["verify"] += 1

    def alloc(self, st: ThreadState) -> None:
        if len(st.live) >= MAX_LIVE:
            self.free(st)
        nbytes = log_uniform(st.rng, MIN_BYTES, MAX_BYTES) & ~3
        while st.live and st.live_bytes + nbytes > MAX_LIVE_BYTES:
            self.free(st)
        s = st.rng.choice(st.streams)
        buf = mpsrt.empty(nbytes // 4, dtype="uint32", stream=s)
        addr = self.registry.add(buf, st.index, "buffer")
        item = Live(buf, addr, self.pattern(st), s)
        with mpsrt.stream(s):
            buf.fill_(item.value)
        st.live.append(item)
        st.live_bytes += buf.nbytes
        st.ops["alloc"] += 1
        if st.rng.random() < 0.3:
            self.verify(st, item, "fresh fill")

    def free(self, st: ThreadState) -> None:
        if not st.live:
            return
        item = st.live.pop(st.rng.randrange(len(st.live)))
        st.live_bytes -= item.buf.nbytes
        self.registry.remove(item.addr)
        if st.rng.random() < 0.5:
            item.buf.free()
            st.ops["free"] += 1
        else:
            st.ops["del"] += 1
        del item  # the last reference: a deleted Buffer returns its memory (stream-ordered)

    def refill(self, st: ThreadState) -> None:
        if not st.live:
            return self.alloc(st)
        item = st.rng.choice(st.live)
        s = st.rng.choice(st.streams)
        self.use_on(st, item, s)
        item.value = self.pattern(st)
        with mpsrt.stream(s):
            assert mpsrt.current_stream() == s
            item.buf.fill_(item.value)
        st.ops["fill"] += 1
        if st.rng.random() < 0.5:
            self.verify(st, item, "refill")

    def copy(self, st: ThreadState) -> None:
        if not st.live:
            return self.alloc(st)
        src = st.rng.choice(st.live)
        if st.live_bytes + src.buf.nbytes > MAX_LIVE_BYTES or len(st.live) >= MAX_LIVE:
            return self.free(st)
        s = st.rng.choice(st.streams)
        dst_buf = mpsrt.empty(src.buf.shape, dtype="uint32", stream=s)
        addr = self.registry.add(dst_buf, st.index, "copy")
        dst = Live(dst_buf, addr, src.value, s)
        self.use_on(st, src, s)
        with mpsrt.stream(s):
            dst_buf.copy_(src.buf)
        st.live.append(dst)
        st.live_bytes += dst_buf.nbytes
        st.ops["copy"] += 1
        # Overwrite the source at once on another stream: the copy must have read it first.
        others = [x for x in st.streams if x != s]  # pool streams may repeat
        if others and st.rng.random() < 0.5:
            s2 = st.rng.choice(others)
            self.use_on(st, src, s2)
            src.value = self.pattern(st)
            with mpsrt.stream(s2):
                src.buf.fill_(src.value)
        self.verify(st, dst, "copy")

    def switch_stream(self, st: ThreadState) -> None:
        prev = mpsrt.current_stream()
        s = mpsrt.Stream(priority=st.rng.choice((-1, 0, 1)))
        with mpsrt.stream(s):
            assert mpsrt.current_stream() == s
            if st.live:
                item = st.rng.choice(st.live)
                self.use_on(st, item, s)
                item.value = self.pattern(st)
                item.buf.fill_(item.value)
        assert mpsrt.current_stream() == prev, "stream() did not restore the current stream"
        st.streams.pop(st.rng.randrange(len(st.streams)))
        st.streams.append(s)
        st.ops["stream_switch"] += 1

    def events(self, st: ThreadState) -> None:
        a, b = st.rng.choice(st.streams), st.rng.choice(st.streams)
        timing = st.rng.random() < 0.3
        start = mpsrt.Event(enable_timing=timing)
        end = mpsrt.Event(enable_timing=timing)
        start.record(a)
        if st.live:
            item = st.rng.choice(st.live)
            self.use_on(st, item, a)
            item.value = self.pattern(st)
            with mpsrt.stream(a):
                item.buf.fill_(item.value)
        end.record(a)
        how = st.rng.randrange(4)
        if how == 0:
            b.wait_event(end)
            e2 = b.record_event()
            wait_until(e2.query, "Event.query after wait_event")
        elif how == 1:
            end.wait(b)
            b.synchronize()
            assert end.query(), "an event waited for by a synchronized stream is not done"
        elif how == 2:
            end.synchronize()
            assert end.query()
        else:
            b.wait_stream(a)
            # Poll an event recorded after the wait (Stream.query() is tested on its own below).
            wait_until(b.record_event().query, "Event.query after wait_stream")
            assert end.query()  # (b itself is shared through the pool: it may be busy again)
        if timing:
            end.synchronize()
            ms = start.elapsed_time(end)
            assert ms >= 0.0 and math.isfinite(ms), ms
        st.ops["events"] += 1

    def random_numbers(self, st: ThreadState) -> None:
        assert st.gen is not None
        if st.rng.random() < 0.05:
            seed = st.rng.getrandbits(64)
            st.gen.manual_seed(seed)
            if self.logging(st):
                st.rng_log.append(RngRecord("seed", seed, 0, 0, 0, None, None))
            return
        op = st.rng.choice(RNG_OPS)
        arg = random_rng_arg(op, st.rng)
        n = log_uniform(st.rng, 1, MAX_RNG_ELEMS)
        stream = st.rng.choice([None, *st.streams])
        before = st.gen.get_offset()
        out = run_rng_op(op, arg, n, st.gen, stream)
        addr = self.registry.add(out, st.index, f"{op} output")
        try:
            after = st.gen.get_offset()
            if op == "randn":
                keep = st.normals_kept < 64
                st.normals_kept += keep
                values = out.numpy().copy() if keep else None
                rec = RngRecord(op, arg, n, before, after, None, values)
            else:
                rec = RngRecord(op, arg, n, before, after, rng_digest(out), None)
            if self.logging(st):
                st.rng_log.append(rec)
        finally:
            self.registry.remove(addr)
            del out
        st.ops["rng"] += 1

    def logging(self, st: ThreadState) -> bool:
        return len(st.rng_log) < self.rng_log_cap and time.monotonic() < self.log_until

    def empty_cache(self, st: ThreadState) -> None:
        mpsrt.empty_cache()
        st.ops["empty_cache"] += 1

    def fraction(self, st: ThreadState) -> None:
        with self.fraction_lock:
            mpsrt.set_per_process_memory_fraction(st.rng.choice(FRACTIONS))
        st.ops["fraction"] += 1

    def synchronize(self, st: ThreadState) -> None:
        if st.rng.random() < 0.5:
            st.rng.choice(st.streams).synchronize()
        else:
            mpsrt.synchronize()
        st.ops["synchronize"] += 1

    def worker(self, t: int, t0: float) -> None:
        st = self.states[t]
        ops: list[tuple[Callable[[ThreadState], None], int]] = [
            (self.alloc, 20),
            (self.free, 14),
            (self.refill, 12),
            (self.copy, 8),
            (lambda s: self.verify_random(s), 8),
            (self.switch_stream, 3),
            (self.events, 8),
            (self.random_numbers, 12),
            (self.empty_cache, 1),
            (self.fraction, 1),
            (self.synchronize, 2),
        ]
        funcs = [f for f, _ in ops]
        weights = [w for _, w in ops]
        try:
            st.gen = mpsrt.Generator().manual_seed(st.seed)
            st.streams = [mpsrt.Stream(), mpsrt.Stream(priority=-1), mpsrt.current_stream()]
            phase = self.seconds / self.phases
            for k in range(self.phases):
                until = t0 + (k + 1) * phase
                while time.monotonic() < until:
                    st.rng.choices(funcs, weights)[0](st)
                self.barrier.wait()
        except threading.BrokenBarrierError:
            self.fail(t, "the barrier broke (another thread failed or hung)")
        except BaseException:
            self.fail(t, traceback.format_exc())
            self.barrier.abort()

    def verify_random(self, st: ThreadState) -> None:
        if st.live:
            self.verify(st, st.rng.choice(st.live), "re-check")

    def verify_and_free_all(self, keep_streams: bool = False) -> None:
        """Every live buffer still holds its pattern; then every buffer is dropped."""
        for st in self.states:
            for item in st.live:
                self.verify(st, item, "final")
                self.registry.remove(item.addr)
            st.live.clear()
            st.live_bytes = 0
            if not keep_streams:
                st.streams.clear()

    # ---- driver

    def run(self) -> None:
        t0 = time.monotonic() + 0.05
        if self.soak:
            self.log_until = t0 + 0.8 * soak_warmup(self.phases) * self.seconds / self.phases
        threads = [
            threading.Thread(target=self.worker, args=(t, t0), name=f"stress-{t}", daemon=True)
            for t in range(N_THREADS)
        ]
        for th in threads:
            th.start()
        deadline = t0 + self.seconds + (self.phases + 2) * WAIT
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))
        stuck = [th for th in threads if th.is_alive()]
        if stuck:
            frames = sys._current_frames()
            stacks = "\n".join(
                f"--- {th.name}\n" + "".join(traceback.format_stack(frames[th.ident]))
                for th in stuck
                if th.ident in frames
            )
            pytest.fail(f"{len(stuck)} stress threads hung:\n{stacks}", pytrace=False)
        if self.errors:
            pytest.fail("\n\n".join(self.errors), pytrace=False)


def soak_warmup(samples: int) -> int:
    """Soak samples that are warm-up: the first fifth, at least two."""
    return max(2, samples // 5)


def rss_bytes() -> int:
    """Resident set size of this process (Linux: /proc; elsewhere the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def replay_serially(st: ThreadState) -> int:
    """Re-runs the thread's random ops on one thread, default stream; returns ops compared."""
    gen = mpsrt.Generator().manual_seed(st.seed)
    compared = 0
    for i, rec in enumerate(st.rng_log):
        where = f"thread {st.index} random op {i} ({rec.op} {rec.arg!r} n={rec.n})"
        if rec.op == "seed":
            gen.manual_seed(rec.arg)
            continue
        assert gen.get_offset() == rec.offset_before, f"{where}: offset before"
        out = run_rng_op(rec.op, rec.arg, rec.n, gen, None)
        assert gen.get_offset() == rec.offset_after, f"{where}: offset after"
        if rec.digest is not None:
            assert rng_digest(out) == rec.digest, f"{where}: the numbers differ from a serial run"
        elif rec.values is not None:
            np.testing.assert_array_max_ulp(out.numpy(), rec.values, maxulp=2)
        del out
        compared += 1
    return compared


def test_stress(fresh_backend: str) -> None:
    dev = mpsrt.current_device()
    prev_fraction = mpsrt._C.set_per_process_memory_fraction(0.0, dev)
    mpsrt._C.set_per_process_memory_fraction(prev_fraction, dev)
    gc.collect()
    mpsrt.synchronize()
    mpsrt.empty_cache()
    base_allocated = mpsrt.memory_allocated()
    base_reserved = mpsrt.memory_reserved()
    base_driver = mpsrt.driver_allocated_memory()
    stress = Stress(fresh_backend, SECONDS)
    stress.baseline_active = set(stress.active_blocks())
    started = time.monotonic()
    try:
        stress.run()
        elapsed = time.monotonic() - started
        stress.quiescent_check()  # the final state, with the leftover buffers alive
        assert stress.checks == N_PHASES + 1
        ops: Counter = Counter()
        for st in stress.states:
            ops.update(st.ops)
        for name in ("alloc", "free", "del", "fill", "copy", "verify", "events", "rng"):
            assert ops[name] > 0, f"no {name} operation ran: {dict(ops)}"
        if SECONDS >= 5:
            for name in ("stream_switch", "empty_cache", "fraction", "cross_stream_event"):
                assert ops[name] > 0, f"no {name} operation ran: {dict(ops)}"
        stress.verify_and_free_all()
        gc.collect()
        mpsrt.synchronize()
        assert mpsrt.memory_allocated() == base_allocated, "allocated bytes after freeing all"
        assert mpsrt.memory_stats()["allocated_bytes.all.current"] == base_allocated
        # Replay: the same numbers as the concurrent run.
        compared = sum(replay_serially(st) for st in stress.states)
        assert compared > 0
        gc.collect()
        mpsrt.synchronize()
        assert mpsrt.memory_allocated() == base_allocated
    finally:
        mpsrt._C.set_per_process_memory_fraction(prev_fraction, dev)
    mpsrt.empty_cache()
    assert mpsrt.memory_reserved() == base_reserved, "reserved bytes after empty_cache()"
    assert mpsrt.driver_allocated_memory() == base_driver, "driver bytes after empty_cache()"
    summary = ", ".join(f"{k}={v}" for k, v in sorted(ops.items()))
    print(
        f"\n[stress {fresh_backend}] {N_THREADS} threads x {elapsed:.1f} s = "
        f"{N_THREADS * elapsed:.0f} thread-seconds; {stress.checks} quiescent checks; "
        f"{compared} random ops replayed; {summary}"
    )


def test_polling_stream_query_completes(fresh_backend: str) -> None:
    a, b = mpsrt.Stream(), mpsrt.Stream(priority=-1)
    buf = mpsrt.empty(1 << 16, dtype="uint32", stream=a)
    with mpsrt.stream(a):
        buf.fill_(1)
    b.wait_stream(a)
    end = time.monotonic() + 10.0
    while not b.query() and time.monotonic() < end:
        time.sleep(0.001)
    done = b.query()
    mpsrt.synchronize()
    del buf
    assert done, "b.query() still False 10 s after b.wait_stream(a), with a's work done"


@pytest.mark.skipif(SOAK_MINUTES <= 0, reason="set MPSRT_SOAK_MINUTES to run the soak")
def test_soak(fresh_backend: str) -> None:
    seconds = SOAK_MINUTES * 60
    phases = max(6, int(seconds // SOAK_PHASE))
    gc.collect()
    mpsrt.synchronize()
    mpsrt.empty_cache()
    base_driver = mpsrt.driver_allocated_memory()
    stress = Stress(fresh_backend, seconds, phases=phases, soak=True)
    stress.baseline_active = set(stress.active_blocks())
    dev = mpsrt.current_device()
    prev_fraction = mpsrt._C.set_per_process_memory_fraction(0.0, dev)
    mpsrt._C.set_per_process_memory_fraction(prev_fraction, dev)
    try:
        stress.run()
    finally:
        mpsrt._C.set_per_process_memory_fraction(prev_fraction, dev)
    compared = sum(replay_serially(st) for st in stress.states)
    t0 = stress.samples[0][0]
    warm = soak_warmup(len(stress.samples))
    ref_rss = stress.samples[warm][1]
    lines = [f"\n[soak {fresh_backend}] {N_THREADS} threads x {seconds / 60:.1f} min"]
    lines.append("   time   RSS (MiB)  drift   driver (released)  driver (in use)")
    worst = 0.0
    for i, (t, rss, driver, live) in enumerate(stress.samples):
        drift = (rss - ref_rss) / ref_rss
        if i >= warm:
            worst = max(worst, abs(drift))
        lines.append(
            f"{t - t0:7.1f}  {rss / 2**20:10.1f}  {drift:+6.2%}  {driver:17d}  {live:15d}"
            + ("   (warm-up)" if i < warm else "")
        )
    ops = sum(sum(st.ops.values()) for st in stress.states)
    lines.append(
        f"after warm-up: RSS drift at most {worst:.2%}; {ops} operations; "
        f"{compared} random ops replayed"
    )
    print("\n".join(lines))
    after = stress.samples[warm:]
    assert all(d == base_driver for _, _, d, _ in after), "driver bytes did not return to baseline"
    assert worst <= 0.01, f"RSS drifted {worst:.2%} after the warm-up (limit 1%)"
