"""Streams and events (API.md "Streams and events"): ordering, independence, waits, queries,
timing, back-pressure, errors from host callbacks, threads, the stream pool, the current stream
and its context manager, and the cross-stream safety of freed Buffers.

Ordering is checked with host callbacks that wait on a gate (`blocked`) rather than with sleeps:
a stream stuck behind a closed gate cannot make progress, so "B did not run yet" is
deterministic. Every wait has a generous timeout, so a broken runtime fails a test instead of
hanging the run. Nothing may touch a Buffer's host memory (numpy(), copy_ from the host) while a
stream is blocked: host access synchronizes the whole device.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from collections.abc import Callable, Iterator

import mpsrt
import numpy as np
import pytest
from conftest import PATIENCE, blocked, is_unified


@pytest.fixture(autouse=True)
def _drop_failed_frames() -> Iterator[None]:
    """A failed test's frames (its Buffers and Events) would live on in sys.last_value and
    outlive the runtime that the session's backend fixture tears down; drop them."""
    yield
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    gc.collect()


def in_runtime(runtime_env, body: Callable[[], None], **env: object) -> None:
    """Runs body() in a runtime re-created with `env`. A failure is re-raised as text only, once
    body's frames are gone: no Buffer or Event may outlive the runtime it came from."""
    failure = None
    with runtime_env(**env):
        try:
            body()
        except Exception:
            failure = traceback.format_exc()
        gc.collect()
    if failure is not None:
        pytest.fail(failure, pytrace=False)


def two_devices(runtime_env, body: Callable[[], None]) -> None:
    """Runs body with two devices (MPSRT_CPU_DEVICES=2 on cpu), or skips visibly."""
    if mpsrt.backend() != "cpu" and mpsrt.device_count() < 2:
        pytest.skip(f"needs 2 devices; backend {mpsrt.backend()} has {mpsrt.device_count()} here")

    def checked() -> None:
        assert mpsrt.device_count() >= 2
        body()

    in_runtime(runtime_env, checked, MPSRT_CPU_DEVICES=2)


def values(buf: mpsrt.Buffer) -> np.ndarray:
    return buf.numpy().reshape(-1)


# ---------------------------------------------------------------- ordering within a stream


def test_fills_in_one_stream_end_with_the_last() -> None:
    s = mpsrt.Stream()
    a = mpsrt.empty(4096, "int32", stream=s)
    b = mpsrt.empty(4096, "int32", stream=s)
    with mpsrt.stream(s):
        for i in range(1, 301):
            a.fill_(i)
            b.copy_(a)  # reads the fill just before it, never an older or a newer one
    s.synchronize()
    assert s.query()
    assert (values(a) == 300).all()
    assert (values(b) == 300).all()


def test_query_is_false_while_a_callback_sleeps_and_true_after_synchronize() -> None:
    s = mpsrt.Stream()
    s.synchronize()
    assert s.query()
    with blocked(s) as gate:
        assert not s.query()
        time.sleep(0.005)
        assert not s.query(), "the callback is still waiting"
        gate.open()
        s.synchronize()
        assert s.query()


def test_encoded_but_uncommitted_work_counts_as_pending() -> None:
    s = mpsrt.Stream()
    a = mpsrt.empty(1 << 16, "uint8", stream=s)
    s.synchronize()
    with mpsrt.stream(s):
        a.fill_(3)
    assert not s.query()
    s.synchronize()
    assert s.query()
    assert (values(a) == 3).all()


# ---------------------------------------------------------------- independence across streams


def test_a_blocked_stream_does_not_block_another() -> None:
    a, b = mpsrt.Stream(), mpsrt.Stream()
    assert a != b
    x = mpsrt.empty(1 << 20, "int32", stream=b)
    with blocked(a):
        with mpsrt.stream(b):
            for i in range(1, 11):
                x.fill_(i)
        t = threading.Thread(target=b.synchronize)
        t.start()
        t.join(5.0)
        assert not t.is_alive(), "stream b's synchronize waited for stream a's blocked callback"
        assert not a.query(), "stream a should still be blocked"
    a.synchronize()
    assert a.query()
    assert (values(x) == 10).all()


# ---------------------------------------------------------------- wait_event / wait_stream


@pytest.mark.parametrize("how", ["wait_event", "event_wait", "wait_stream"])
def test_waits_order_work_on_another_stream(how: str) -> None:
    """a: [blocked] fill src=7 (and record e).  b: wait, copy src -> dst.  While a is blocked b
    cannot have copied; afterwards dst is 7."""
    a, b = mpsrt.Stream(), mpsrt.Stream()
    src = mpsrt.empty(1 << 14, "int32", stream=a)
    dst = mpsrt.empty(1 << 14, "int32", stream=b)
    src.fill_(1)
    dst.fill_(2)
    mpsrt.synchronize()
    with blocked(a):
        with mpsrt.stream(a):
            src.fill_(7)  # left in a's open command buffer: the wait must commit it
        if how == "wait_stream":
            b.wait_stream(a)
        else:
            e = mpsrt.Event()
            e.record(a)
            if how == "wait_event":
                b.wait_event(e)
            else:
                e.wait(b)
            assert not e.query()
        with mpsrt.stream(b):
            dst.copy_(src)
        done = b.record_event()
        assert isinstance(done, mpsrt.Event)
        assert not done.query()
        time.sleep(0.02)
        assert not done.query(), f"b ran past {how} while a is still blocked"
    b.synchronize()
    assert done.query()
    assert (values(dst) == 7).all(), f"b's copy did not see a's fill ({how})"


def test_wait_on_itself_or_on_an_unrecorded_event_is_a_no_op() -> None:
    s = mpsrt.Stream()
    s.wait_stream(s)
    s.wait_event(mpsrt.Event())
    mpsrt.Event().wait(s)
    mpsrt.Event().wait()
    t = threading.Thread(target=s.synchronize)
    t.start()
    t.join(5.0)
    assert not t.is_alive()
    assert s.query()


@pytest.mark.parametrize("how", ["dropped_event", "wait_stream"])
def test_a_later_event_does_not_release_earlier_waiters(how: str) -> None:
    """Timeline events are pooled: one must not serve a new Event while commands of its last
    owner may still wait on it, or the new owner's signal releases them early."""
    a, b, c = mpsrt.Stream(), mpsrt.Stream(), mpsrt.Stream()
    ran = threading.Event()
    with blocked(a):
        if how == "wait_stream":
            b.wait_stream(a)  # uses a temporary event internally
        else:
            e = mpsrt.Event()
            e.record(a)
            b.wait_event(e)
            del e  # b still waits for a
        b.add_callback(ran.set)
        other = mpsrt.Event()  # may get the pooled event back, with a higher value
        other.record(c)
        other.synchronize()
        del other
        time.sleep(0.03)
        assert not ran.is_set(), f"b ran past its wait ({how}) while a is still blocked"
    b.synchronize()
    assert ran.is_set()


def test_wait_event_across_devices(runtime_env) -> None:
    def body() -> None:
        a = mpsrt.Stream(device=0)
        b = mpsrt.Stream(device=1)
        assert (a.device, b.device) == (0, 1)
        order: list[str] = []
        with blocked(a):
            a.add_callback(lambda: order.append("a"))
            e = a.record_event()
            assert e.device == 0
            b.wait_event(e)
            b.add_callback(lambda: order.append("b"))
            time.sleep(0.02)
            assert order == [], "device 1's stream ran past its wait on device 0's event"
        b.synchronize()
        assert order == ["a", "b"]
        with pytest.raises(ValueError, match="device"):
            e.record(b)  # an event belongs to one device
        t0, t1 = mpsrt.Event(enable_timing=True), mpsrt.Event(enable_timing=True)
        t0.record(a)
        t1.record(b)
        t0.synchronize()
        t1.synchronize()
        with pytest.raises(ValueError, match="device"):
            t0.elapsed_time(t1)  # timestamps of two devices do not compare

    two_devices(runtime_env, body)


# ---------------------------------------------------------------- events


def test_event_record_query_synchronize() -> None:
    s = mpsrt.Stream()
    e = mpsrt.Event()
    assert not e.enable_timing
    assert e.device is None, "an event has no device until recorded (torch.cuda.Event)"
    assert "recorded=False" in repr(e)
    with blocked(s) as gate:
        e.record(s)
        assert e.device == 0
        assert "recorded=True" in repr(e)
        assert not e.query()
        time.sleep(0.005)
        assert not e.query()
        gate.open()
        e.synchronize()
        assert e.query()


def test_event_query_alone_completes_an_uncommitted_record() -> None:
    s = mpsrt.Stream()
    e = s.record_event()  # left in s's open command buffer
    deadline = time.monotonic() + PATIENCE
    while not e.query() and time.monotonic() < deadline:
        time.sleep(0.0005)
    assert e.query(), "query() never flushed the recording stream"


def test_event_record_defaults_to_the_current_stream() -> None:
    s = mpsrt.Stream()
    with mpsrt.stream(s), blocked(s):
        e = mpsrt.Event()
        e.record()
        assert not e.query(), "record() did not use the current stream"
    e.synchronize()
    assert e.query()


def test_record_event_returns_the_given_event() -> None:
    s = mpsrt.Stream()
    e = mpsrt.Event(enable_timing=True)
    assert s.record_event(e) is e
    e.synchronize()
    assert e.query()


def test_never_recorded_event() -> None:
    e = mpsrt.Event()
    assert e.query()
    t = threading.Thread(target=e.synchronize)
    t.start()
    t.join(5.0)
    assert not t.is_alive(), "synchronize() of a never-recorded event did not return"
    a, b = mpsrt.Event(enable_timing=True), mpsrt.Event(enable_timing=True)
    a.record()
    a.synchronize()
    with pytest.raises(ValueError, match="recorded"):
        a.elapsed_time(b)
    with pytest.raises(ValueError, match="recorded"):
        b.elapsed_time(a)


def test_elapsed_time_needs_timing() -> None:
    plain, timed = mpsrt.Event(), mpsrt.Event(enable_timing=True)
    assert timed.enable_timing
    plain.record()
    timed.record()
    mpsrt.synchronize()
    for x, y in ((plain, timed), (timed, plain), (plain, plain)):
        with pytest.raises(ValueError, match="enable_timing"):
            x.elapsed_time(y)


def test_elapsed_time_waits_for_completion() -> None:
    """As torch.mps: elapsed_time() on events whose work is pending waits for it."""
    s = mpsrt.Stream()
    a, b = mpsrt.Event(enable_timing=True), mpsrt.Event(enable_timing=True)
    a.record(s)
    a.synchronize()
    result: list[float] = []
    with blocked(s):
        b.record(s)
        t = threading.Thread(target=lambda: result.append(a.elapsed_time(b)))
        t.start()
        t.join(0.2)
        assert t.is_alive() and not result, "elapsed_time returned before b completed"
    t.join(PATIENCE)
    assert not t.is_alive() and result and result[0] >= 0
    assert b.query() and s.query()


def test_elapsed_time_error_texts_are_torchs() -> None:
    plain, a, b = mpsrt.Event(), mpsrt.Event(enable_timing=True), mpsrt.Event(enable_timing=True)
    plain.record()
    a.record()
    with pytest.raises(ValueError) as info:
        plain.elapsed_time(a)
    assert "Both events must be created with argument 'enable_timing=True'" in str(info.value)
    assert str(info.value).startswith("[event] ")
    with pytest.raises(ValueError) as info:
        a.elapsed_time(b)
    assert "Both events must be recorded before calculating elapsed time" in str(info.value)


@pytest.mark.parametrize("work", ["fill", "callback", "record-only"])
def test_after_event_synchronize_every_query_covering_it_is_true(work: str) -> None:
    """Once an event's work is complete, the stream's query() and the event's agree at once."""
    s = mpsrt.Stream()
    buf = mpsrt.empty(4096, stream=s)
    e = mpsrt.Event()
    late = []
    for i in range(300):
        if work == "fill":
            with mpsrt.stream(s):
                buf.fill_(i & 0xFF)
        elif work == "callback":
            s.add_callback(lambda: None)
        e.record(s)
        e.synchronize()
        if not (e.query() and s.query()):
            late.append(i)
    assert not late, f"{len(late)} of 300: a query said 'not done' after synchronize()"
    for i in range(300):  # the same through polling the event
        s.add_callback(lambda: None)
        e.record(s)
        while not e.query():
            pass
        if not s.query():
            late.append(i)
    assert not late, f"{len(late)} of 300: stream.query() was False after event.query()"


def test_elapsed_time_is_additive_and_non_negative() -> None:
    s = mpsrt.Stream()
    a, b, c = (mpsrt.Event(enable_timing=True) for _ in range(3))
    a.record(s)
    s.add_callback(lambda: time.sleep(0.005))
    b.record(s)
    s.add_callback(lambda: time.sleep(0.005))
    c.record(s)
    c.synchronize()
    ab, bc, ac = a.elapsed_time(b), b.elapsed_time(c), a.elapsed_time(c)
    assert isinstance(ab, float)
    assert ab >= 4.0 and bc >= 4.0
    assert ab + bc == pytest.approx(ac, rel=1e-6, abs=1e-6)
    assert a.elapsed_time(a) == 0.0


def test_elapsed_time_matches_a_host_sleep() -> None:
    s = mpsrt.Stream()
    start, end = mpsrt.Event(enable_timing=True), mpsrt.Event(enable_timing=True)
    start.record(s)
    s.add_callback(lambda: time.sleep(0.03))
    end.record(s)
    end.synchronize()
    assert 25.0 <= start.elapsed_time(end) <= 200.0


def test_synchronize_then_elapsed_time_does_not_deadlock() -> None:
    """API.md's acceptance sequence."""
    result: list[float] = []

    def run() -> None:
        s, e = mpsrt.Event(enable_timing=True), mpsrt.Event(enable_timing=True)
        s.record()
        buf = mpsrt.empty(4 << 20, "uint8")
        for v in range(4):
            buf.fill_(v)
        e.record()
        mpsrt.synchronize()
        e.synchronize()
        result.append(s.elapsed_time(e))

    t = threading.Thread(target=run)
    t.start()
    t.join(PATIENCE)
    assert not t.is_alive(), "record / synchronize / elapsed_time deadlocked"
    assert result and result[0] > 0


def test_many_events_from_the_pool() -> None:
    s = mpsrt.Stream()
    for _ in range(3):
        evs = [mpsrt.Event() for _ in range(300)]
        for e in evs:
            e.record(s)
        evs[-1].synchronize()
        assert all(e.query() for e in evs)
    fresh = mpsrt.Event()
    assert fresh.query()
    assert "recorded=False" in repr(fresh)


# ---------------------------------------------------------------- back-pressure


# A child first starts the runtime (on a GPU, the driver's start-up alone can take seconds
# when many test workers start it at once), then runs the code under a watchdog: if the code
# has not finished DEADLOCK_SECONDS later, faulthandler prints every Python thread's stack to
# stderr and the child exits with code 1, so that a deadlock shows where it is.
ISOLATED_PREAMBLE = textwrap.dedent(
    """
    import faulthandler, mpsrt
    mpsrt.synchronize()
    faulthandler.dump_traceback_later({deadline}, exit=True)
    """
)
DEADLOCK_SECONDS = 6
ISOLATED_WATCHDOG_EXIT = 1


def run_isolated(
    code: str, backend: str, deadline: float = DEADLOCK_SECONDS
) -> subprocess.CompletedProcess | None:
    """Runs code in a fresh interpreter on `backend`, `deadline` seconds at most once the runtime
    has started; None when the child did not even finish its start-up in two minutes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MPSRT_", "PYTORCH_MPS"))}
    env["MPSRT_BACKEND"] = backend
    try:
        return subprocess.run(
            [sys.executable, "-c", ISOLATED_PREAMBLE.format(deadline=deadline) + code],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        return None


def deadlocked(r: subprocess.CompletedProcess) -> bool:
    """The watchdog of run_isolated ended the child (its stderr holds every thread's stack)."""
    return r.returncode == ISOLATED_WATCHDOG_EXIT and "most recent call first" in r.stderr


def test_the_isolation_watchdog_reports_a_hang_with_the_stacks(backend: str) -> None:
    r = run_isolated("import threading\nthreading.Event().wait()\n", backend, deadline=1)
    assert r is not None
    assert deadlocked(r), (r.returncode, r.stderr)
    assert "threading.py" in r.stderr, r.stderr


BACK_PRESSURE = textwrap.dedent(
    """
    import threading, mpsrt
    s = mpsrt.Stream()
    gate, started = threading.Event(), threading.Event()

    def blocker():
        started.set()
        gate.wait(30)

    s.add_callback(blocker)
    assert started.wait(10)
    submitted, ran = [0], [0]

    def noop():
        ran[0] += 1

    def committer():
        for _ in range(256):  # each add_callback commits a command buffer
            s.add_callback(noop)
            submitted[0] += 1

    t = threading.Thread(target=committer, daemon=True)
    t.start()
    t.join(1.0)
    still_blocked, n = t.is_alive(), submitted[0]
    gate.set()
    t.join(20)
    s.synchronize()
    print(still_blocked, n, t.is_alive(), submitted[0], ran[0])
    """
)


def test_back_pressure_blocks_the_committer_until_the_stream_drains(backend: str) -> None:
    """More than 64 command buffers behind a blocked callback: the committing thread blocks
    (without stopping other Python threads) and everything completes once it is released.
    Runs in a subprocess so that a deadlock fails the test instead of hanging the run."""
    r = run_isolated(BACK_PRESSURE, backend)
    assert r is not None, "the child did not even start its runtime in two minutes"
    assert not deadlocked(r), (
        "deadlock: a thread blocked in add_callback by back-pressure kept the other Python "
        "threads (and so the callback it waits for) from running; the threads' stacks:\n" + r.stderr
    )
    assert r.returncode == 0, r.stderr
    still_blocked, n, alive, total, ran = r.stdout.split()
    assert still_blocked == "True", f"the committer never blocked ({n} commits behind a callback)"
    assert 60 <= int(n) <= 64, f"{n} command buffers were committed behind a blocked callback"
    assert alive == "False"
    assert int(total) == 256 and int(ran) == 256


# ---------------------------------------------------------------- callbacks and errors


def test_add_callback_runs_after_prior_work_on_another_thread() -> None:
    s = mpsrt.Stream()
    a = mpsrt.empty(1 << 18, "int32", stream=s)
    # Unified memory: the callback reads the memory itself, without synchronizing. Discrete
    # memory (the host reads only copies, which wait for the stream): an event recorded after
    # the fill, queried by the callback.
    view = a.numpy() if is_unified() else None
    done = mpsrt.Event()
    a.fill_(0)
    mpsrt.synchronize()
    seen: list[object] = []

    def check() -> None:
        filled = bool((view == 0x5EED).all()) if view is not None else done.query()
        seen.append((threading.get_ident(), filled))

    with blocked(s):  # the fill below certainly has not run when the callback is added
        with mpsrt.stream(s):
            a.fill_(0x5EED)
            done.record()
        s.add_callback(check)
    s.synchronize()
    assert len(seen) == 1
    ident, saw_fill = seen[0]
    assert saw_fill, "the callback ran before the work added before it"
    assert ident != threading.get_ident()


def test_callbacks_run_in_order() -> None:
    s = mpsrt.Stream()
    s.synchronize()
    seen: list[int] = []
    for i in range(50):  # fewer than the 64 command buffers a stream may have in flight
        s.add_callback(lambda i=i: seen.append(i))
    s.synchronize()
    assert seen == list(range(50))


MANY_CALLBACKS = textwrap.dedent(
    """
    import mpsrt
    s = mpsrt.Stream()
    seen = []
    for i in range(1000):  # each commits a command buffer: back-pressure past 64 in flight
        s.add_callback(lambda i=i: seen.append(i))
    s.synchronize()
    assert seen == list(range(1000)), seen[:10]
    print("ok")
    """
)


def test_many_python_callbacks_from_one_thread(backend: str) -> None:
    """A loop of add_callback past the in-flight limit must wait for the callbacks, which need
    the GIL: the waiting thread must not hold it. In a subprocess, so that a deadlock fails."""
    r = run_isolated(MANY_CALLBACKS, backend)
    assert r is not None, "the child did not even start its runtime in two minutes"
    assert not deadlocked(r), (
        "deadlock: add_callback blocked by back-pressure while holding the GIL, which the "
        "callbacks it waits for need; the threads' stacks:\n" + r.stderr
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_a_raising_callback_fails_the_next_synchronize() -> None:
    s, other = mpsrt.Stream(), mpsrt.Stream()

    def boom() -> None:
        raise ValueError("boom-xyz-17")

    s.add_callback(boom)
    other.add_callback(lambda: None)
    other.synchronize()  # another stream's failure does not leak into this one
    with pytest.raises(RuntimeError, match="boom-xyz-17"):
        s.synchronize()
    s.synchronize()  # reported once
    # The stream stays usable.
    a = mpsrt.empty(1024, "int32", stream=s)
    ran = threading.Event()
    with mpsrt.stream(s):
        a.fill_(33)
    s.add_callback(ran.set)
    s.synchronize()
    assert ran.is_set()
    assert s.query()
    assert (values(a) == 33).all()


def test_device_synchronize_raises_a_callback_exception() -> None:
    s = mpsrt.Stream()

    def boom() -> None:
        raise KeyError("device-level-boom-18")

    s.add_callback(boom)
    with pytest.raises(RuntimeError, match="device-level-boom-18"):
        mpsrt.synchronize()
    mpsrt.synchronize()
    s.synchronize()


def test_add_callback_rejects_non_callables() -> None:
    s = mpsrt.Stream()
    with pytest.raises(TypeError):
        s.add_callback(42)
    with pytest.raises(TypeError):
        s.add_callback(None)


# ---------------------------------------------------------------- threads


def test_eight_threads_each_drive_their_own_stream() -> None:
    n_threads, n_bufs, iters = 8, 4, 50
    streams = [mpsrt.Stream() for _ in range(n_threads)]
    assert len(set(streams)) == n_threads
    errors: list[str] = []
    barrier = threading.Barrier(n_threads)

    def pattern(t: int, it: int, j: int) -> int:
        return (t << 24) | (it << 8) | j

    def work(t: int) -> None:
        try:
            s = streams[t]
            bufs = [mpsrt.empty(4096, "int32", stream=s) for _ in range(n_bufs)]
            barrier.wait(PATIENCE)
            with mpsrt.stream(s):
                assert mpsrt.current_stream() == s
                for it in range(iters):
                    for j, b in enumerate(bufs):
                        b.fill_(pattern(t, it, j))
                s.synchronize()
                assert mpsrt.current_stream() == s
            for j, b in enumerate(bufs):
                got = np.unique(values(b))
                want = pattern(t, iters - 1, j)
                if list(got) != [want]:
                    errors.append(f"thread {t} buffer {j}: {got[:4]} != {want}")
        except Exception as ex:  # reported below, with the thread
            errors.append(f"thread {t}: {ex!r}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(PATIENCE)
    assert not any(th.is_alive() for th in threads)
    assert errors == []


# ---------------------------------------------------------------- pool and priorities


def test_stream_pool_is_round_robin_per_priority() -> None:
    default = mpsrt.default_stream()
    assert default.stream_id == 0
    assert default.priority == 0
    assert default.device == default.device_index == 0
    assert "stream_id=0" in repr(default)
    ids: set[int] = set()
    for priority in (-1, 0, 1):
        got = [mpsrt.Stream(priority=priority) for _ in range(24)]
        assert len(set(got[:8])) == 8, f"priority {priority}: the first 8 are not distinct"
        for i, s in enumerate(got):
            assert s == got[i % 8], f"priority {priority}: stream {i} != stream {i % 8}"
            assert hash(s) == hash(got[i % 8])
            assert s.priority == priority
            assert s != default
            assert s.stream_id != 0
            ids.add(s.stream_id)
    assert len(ids) == 24, "stream ids are unique on a device"
    # Out-of-range priorities fall into the nearest class, as torch.cuda clamps them.
    assert mpsrt.Stream(priority=-100).priority == -1
    assert mpsrt.Stream(priority=100).priority == 1
    assert default != "not a stream"


def test_streams_of_every_priority_run_work() -> None:
    for priority in (-1, 0, 1):
        s = mpsrt.Stream(priority=priority)
        a = mpsrt.empty(256, "int32", stream=s)
        with mpsrt.stream(s):
            a.fill_(100 + priority)
        s.synchronize()
        assert (values(a) == 100 + priority).all()


def test_stream_device_argument_forms() -> None:
    assert mpsrt.Stream(device=0).device == 0
    assert mpsrt.Stream(device="mps:0").device == 0
    assert mpsrt.Stream(device=None).device == mpsrt.current_device()
    assert mpsrt.current_stream("mps") == mpsrt.current_stream(0)
    assert mpsrt.default_stream("mps:0") == mpsrt.default_stream()


# ---------------------------------------------------------------- the current stream


def test_current_stream_is_per_thread_and_per_device(runtime_env) -> None:
    def body() -> None:
        d0, d1 = mpsrt.default_stream(0), mpsrt.default_stream(1)
        assert d0 != d1
        assert mpsrt.current_stream() == d0
        assert mpsrt.current_stream(1) == d1
        s0, s1 = mpsrt.Stream(device=0), mpsrt.Stream(device=1)
        assert (s0.device, s1.device) == (0, 1)
        mpsrt.set_stream(s0)
        assert mpsrt.current_stream() == s0
        assert mpsrt.current_stream(1) == d1, "setting device 0's stream changed device 1's"
        mpsrt.set_stream(s1)
        assert mpsrt.current_device() == 0, "set_stream changed the current device"
        assert mpsrt.current_stream(1) == s1
        assert mpsrt.current_stream(0) == s0, "setting device 1's stream lost device 0's"
        assert mpsrt.current_stream() == s0
        mpsrt.set_device(1)
        assert mpsrt.current_stream() == s1
        mpsrt.set_device(0)

        seen: list[bool] = []

        def other_thread() -> None:
            seen.append(mpsrt.current_stream(0) == d0)
            seen.append(mpsrt.current_stream(1) == d1)
            mpsrt.set_stream(mpsrt.Stream(device=0, priority=1))
            seen.append(mpsrt.current_stream(0) != d0)

        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        assert seen == [True, True, True]
        assert mpsrt.current_stream(0) == s0
        assert mpsrt.current_stream(1) == s1

    two_devices(runtime_env, body)


def test_stream_context_manager_restores_stream_and_device(runtime_env) -> None:
    def body() -> None:
        d0, d1 = mpsrt.default_stream(0), mpsrt.default_stream(1)
        s1 = mpsrt.Stream(device=1)
        s0 = mpsrt.Stream(device=0)
        with mpsrt.stream(s1) as entered:
            assert entered == s1
            assert mpsrt.current_device() == 1
            assert mpsrt.current_stream() == s1
            with mpsrt.stream(s0):
                assert mpsrt.current_device() == 0
                assert mpsrt.current_stream() == s0
                assert mpsrt.current_stream(1) == s1
            assert mpsrt.current_device() == 1
            assert mpsrt.current_stream() == s1
            assert mpsrt.current_stream(0) == d0
        assert mpsrt.current_device() == 0
        assert mpsrt.current_stream(0) == d0
        assert mpsrt.current_stream(1) == d1

        with pytest.raises(KeyError, match="body raised"), mpsrt.stream(s1):
            raise KeyError("body raised")
        assert mpsrt.current_device() == 0
        assert mpsrt.current_stream(1) == d1

        with mpsrt.stream(None) as entered:
            assert entered is None
            assert mpsrt.current_stream() == d0
        assert isinstance(mpsrt.stream(s0), mpsrt.StreamContext)

    two_devices(runtime_env, body)


def test_a_stream_is_its_own_context_manager(runtime_env) -> None:
    """`with stream:` as torch.cuda.Stream: stream and device current, restored after."""

    def body() -> None:
        d0, d1 = mpsrt.default_stream(0), mpsrt.default_stream(1)
        s1 = mpsrt.Stream(device=1)
        s0 = mpsrt.Stream(device=0)
        with s1 as entered:
            assert entered is s1
            assert mpsrt.current_device() == 1 and mpsrt.current_stream() == s1
            with s0:
                assert mpsrt.current_device() == 0 and mpsrt.current_stream() == s0
                with s0:  # the same stream entered twice nests
                    assert mpsrt.current_stream() == s0
                assert mpsrt.current_stream() == s0
            assert mpsrt.current_device() == 1 and mpsrt.current_stream() == s1
        assert mpsrt.current_device() == 0
        assert mpsrt.current_stream(0) == d0 and mpsrt.current_stream(1) == d1
        with pytest.raises(KeyError), s1:
            raise KeyError("body raised")
        assert mpsrt.current_device() == 0 and mpsrt.current_stream(1) == d1

        seen = []

        def other_thread() -> None:
            with s0:
                seen.append(mpsrt.current_stream(0) == s0)
            seen.append(mpsrt.current_stream(0) == d0)

        with s1:
            t = threading.Thread(target=other_thread)
            t.start()
            t.join(PATIENCE)
            assert mpsrt.current_stream() == s1, "another thread's block left this one alone"
        assert seen == [True, True]

    two_devices(runtime_env, body)


def test_stream_priority_range_is_torchs_shape() -> None:
    least, greatest = mpsrt.Stream.priority_range()
    assert (least, greatest) == (1, -1), "(least, greatest): lower numbers run first"
    for p, want in ((least, least), (greatest, greatest), (0, 0), (99, least), (-99, greatest)):
        assert mpsrt.Stream(priority=p).priority == want


def test_event_keywords_and_ids() -> None:
    a = mpsrt.Event(enable_timing=True, blocking=True, interprocess=False)
    b = mpsrt.Event(False, True)
    assert a.enable_timing and not b.enable_timing
    # torch's event_id: 0 until the first record, then unique and stable.
    assert a.event_id == 0 and b.event_id == 0
    assert a.device is None
    a.record()
    b.record()
    first = a.event_id
    assert isinstance(first, int) and first != 0 and b.event_id not in (0, first)
    a.record()
    a.synchronize()
    assert a.event_id == first, "event_id is stable for the event's life"
    assert a.device == 0
    with pytest.raises(ValueError, match="interprocess"):
        mpsrt.Event(interprocess=True)
    s, t = mpsrt.Stream(), mpsrt.Stream()
    assert isinstance(s.stream_id, int) and s.stream_id == s.stream_id
    assert mpsrt.current_stream().stream_id == mpsrt.default_stream().stream_id
    assert s.stream_id != mpsrt.default_stream().stream_id
    assert (s.stream_id == t.stream_id) == (s == t)


def test_stream_context_manager_single_device() -> None:
    s = mpsrt.Stream()
    before = mpsrt.current_stream()
    with mpsrt.stream(s):
        assert mpsrt.current_stream() == s
        with mpsrt.stream(mpsrt.default_stream()):
            assert mpsrt.current_stream() == mpsrt.default_stream()
        assert mpsrt.current_stream() == s
    assert mpsrt.current_stream() == before
    with pytest.raises(ZeroDivisionError), mpsrt.stream(s):
        1 / 0  # noqa: B018
    assert mpsrt.current_stream() == before


def test_set_stream_none_is_a_no_op() -> None:
    """torch.cuda.set_stream(None) does nothing (documented: "a no-op if this argument is
    None"); API.md says set_stream behaves as torch.cuda."""
    s = mpsrt.Stream()
    mpsrt.set_stream(s)
    try:
        mpsrt.set_stream(None)
        assert mpsrt.current_stream() == s
    finally:
        mpsrt.set_stream(mpsrt.default_stream())


def test_empty_on_a_stream_of_another_device(runtime_env) -> None:
    def body() -> None:
        s1 = mpsrt.Stream(device=1)
        b = mpsrt.empty(64, stream=s1)
        assert b.device == 1
        with pytest.raises(ValueError, match="device"):
            mpsrt.empty(64, device=0, stream=s1)
        with pytest.raises(ValueError, match="device"):
            b.record_stream(mpsrt.Stream(device=0))
        del b

    two_devices(runtime_env, body)


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("bad", [0, "stream", 1.5, object(), mpsrt.Event])
def test_non_streams_are_type_errors(bad: object) -> None:
    with pytest.raises(TypeError, match="Stream"):
        mpsrt.set_stream(bad)
    with pytest.raises(TypeError, match="Stream"):
        mpsrt.stream(bad)
    s = mpsrt.Stream()
    with pytest.raises(TypeError, match="Stream"):
        s.wait_stream(bad)
    with pytest.raises(TypeError, match="Event"):
        s.wait_event(bad)
    with pytest.raises(TypeError, match="Event"):
        s.record_event(bad)
    e = mpsrt.Event()
    with pytest.raises(TypeError, match="Stream"):
        e.record(bad)
    with pytest.raises(TypeError, match="Stream"):
        e.wait(bad)
    with pytest.raises(TypeError, match="Event"):
        e.elapsed_time(bad)
    with pytest.raises(TypeError, match="Stream"):
        mpsrt.empty(8, stream=bad)
    buf = mpsrt.empty(8)
    with pytest.raises(TypeError, match="Stream"):
        buf.record_stream(bad)
    assert mpsrt.current_stream() == mpsrt.default_stream()


def test_bad_devices_and_priorities() -> None:
    n = mpsrt.device_count()
    for f in (mpsrt.current_stream, mpsrt.default_stream, lambda d: mpsrt.Stream(device=d)):
        with pytest.raises(ValueError, match="device"):
            f(n)
        with pytest.raises(ValueError, match="device"):
            f(-2)
        with pytest.raises(ValueError, match="device"):
            f("nonsense:0")
        with pytest.raises(TypeError):
            f(1.5)
    with pytest.raises(TypeError):
        mpsrt.Stream(priority="high")
    with pytest.raises(TypeError):
        mpsrt.Event(enable_timing="yes")


# ---------------------------------------------------------------- cross-stream buffer safety

HUGE = 16 << 20  # the huge pool: one heap of exactly the request, so reuse is deterministic


def test_memory_used_by_another_stream_is_not_reused_until_that_stream_is_done(
    runtime_env,
) -> None:
    """x lives on a and is written on b, which is blocked: once x is freed, a new allocation on
    a must not get its memory until b's write is done; afterwards it may."""

    def body() -> None:
        a, b = mpsrt.Stream(), mpsrt.Stream()
        x = mpsrt.empty(HUGE, stream=a)
        x_ptr = x.data_ptr
        with blocked(b):
            with mpsrt.stream(b):
                x.fill_(0xAB)  # b becomes a user of x (recorded automatically)
            del x
            y = mpsrt.empty(HUGE, stream=a)
            assert y.data_ptr != x_ptr, "memory still being written on b was reused on a"
        b.synchronize()
        z = mpsrt.empty(HUGE, stream=a)
        assert z.data_ptr == x_ptr, "the memory did not become reusable after b completed"
        raw = z.numpy()
        assert raw[0] == 0xAB and raw[-1] == 0xAB
        del y, z, raw

    in_runtime(runtime_env, body)


def test_small_buffer_read_by_another_stream_is_not_reused_early(runtime_env) -> None:
    def body() -> None:
        a, b = mpsrt.Stream(), mpsrt.Stream()
        x = mpsrt.empty(4096, stream=a)
        dst = mpsrt.empty(4096, stream=b)
        x_ptr = x.data_ptr
        with blocked(b):
            with mpsrt.stream(b):
                dst.copy_(x)  # b reads x
            x.free()
            live = [mpsrt.empty(4096, stream=a) for _ in range(8)]
            assert all(buf.data_ptr != x_ptr for buf in live), "x was reused while b reads it"
        b.synchronize()
        del live, dst

    in_runtime(runtime_env, body)


def test_record_stream_keeps_memory_from_reuse(runtime_env) -> None:
    def body() -> None:
        a, b = mpsrt.Stream(), mpsrt.Stream()
        with blocked(b):
            x = mpsrt.empty(HUGE, stream=a)
            x_ptr = x.data_ptr
            x.record_stream(b)  # as if b's pending work used x
            x.free()
            y = mpsrt.empty(HUGE, stream=a)
            assert y.data_ptr != x_ptr
        b.synchronize()
        z = mpsrt.empty(HUGE, stream=a)
        assert z.data_ptr == x_ptr
        del y, z

    in_runtime(runtime_env, body)


def test_own_stream_reuses_freed_memory_at_once(runtime_env) -> None:
    def body() -> None:
        a = mpsrt.Stream()
        with blocked(a):
            x = mpsrt.empty(4096, stream=a)
            with mpsrt.stream(a):
                x.fill_(1)  # pending on its own stream: stream order makes reuse on a safe
            x_ptr = x.data_ptr
            x.free()
            y = mpsrt.empty(4096, stream=a)
            assert y.data_ptr == x_ptr
        a.synchronize()
        del y

    in_runtime(runtime_env, body)
