"""fork() and multiprocessing: a child forked after the runtime started gets a fresh runtime on
cpu (the parent's Buffers, Streams and Events raise a clear error there) and a clear
RuntimeError on backends whose driver cannot cross a fork; spawn always works. Every child has
a deadline, so a hang fails the test instead of blocking the run.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
from typing import Any, Callable

import mpsrt
import numpy as np
import pytest

DEADLINE = 60.0

pytestmark = pytest.mark.filterwarnings(
    # Python 3.12+ warns that fork() in a multi-threaded process may deadlock: that is exactly
    # what the runtime's fork handlers make safe.
    "ignore:This process .* is multi-threaded:DeprecationWarning"
)


def _run(ctx: str, fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """Runs fn(*args) in a child started by `ctx`; returns {"value"} or {"error", "type"}."""
    c = mp.get_context(ctx)
    parent_end, child_end = c.Pipe(duplex=False)
    p = c.Process(target=_child_main, args=(child_end, fn, args))
    p.start()
    child_end.close()
    if not parent_end.poll(DEADLINE):
        p.kill()
        p.join()
        pytest.fail(f"the {ctx} child did not answer within {DEADLINE} s (a hang)")
    out = parent_end.recv()
    p.join(DEADLINE)
    assert p.exitcode == 0, f"the child exited with {p.exitcode}"
    return out


def _child_main(conn: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        conn.send({"value": fn(*args)})
    except BaseException as e:
        conn.send({"error": str(e), "type": type(e).__name__, "tb": traceback.format_exc()})
    conn.close()


def _fresh_work(nbytes: int) -> dict[str, Any]:
    b = mpsrt.empty(nbytes)
    b.fill_(7)
    s = mpsrt.Stream()
    s.wait_stream(mpsrt.default_stream())
    with mpsrt.stream(s):
        c = mpsrt.empty(nbytes)
        c.copy_(b)
    e = mpsrt.Event()
    e.record(s)
    e.synchronize()
    mpsrt.manual_seed(3)
    r = mpsrt.rand(1 << 20)  # large enough to be split over the kernel threads
    mpsrt.synchronize()
    return {
        "sum": int(c.numpy().astype(np.int64).sum()),
        "rand": r.numpy().copy(),
        "allocated": mpsrt.memory_allocated(),
    }


def _use_parent_objects(buf: Any, stream: Any, event: Any) -> dict[str, str]:
    errors = {}
    for name, op in {
        "fill_": lambda: buf.fill_(1),
        "numpy": lambda: buf.numpy(),
        "copy_": lambda: buf.copy_(np.zeros(buf.nbytes, np.uint8)),
        "stream.synchronize": stream.synchronize,
        "stream.query": stream.query,
        "event.query": event.query,
        "event.record": lambda: event.record(mpsrt.current_stream()),
    }.items():
        try:
            op()
            errors[name] = "no error"
        except RuntimeError as e:
            errors[name] = str(e)
    # The runtime of this process still works afterwards.
    b = mpsrt.empty(64)
    b.fill_(2)
    errors["fresh"] = str(int(b.numpy()[0]))
    return errors


def _expect_fork_refused(backend: str, out: dict[str, Any]) -> None:
    assert out.get("type") == "RuntimeError", out
    assert f"the {backend} backend started before this process was forked" in out["error"]
    assert "'spawn'" in out["error"]


def test_a_forked_child_gets_a_fresh_runtime(backend: str) -> None:
    mpsrt.manual_seed(3)
    expected = mpsrt.rand(1 << 20).numpy().copy()
    parent = mpsrt.empty(1 << 16)
    parent.fill_(5)
    mpsrt.synchronize()
    out = _run("fork", _fresh_work, 1 << 16)
    if backend != "cpu":
        _expect_fork_refused(backend, out)
        return
    assert "error" not in out, out.get("tb")
    v = out["value"]
    assert v["sum"] == 7 * (1 << 16)
    np.testing.assert_array_equal(v["rand"], expected)  # same stream after the fork
    assert v["allocated"] >= 2 * (1 << 16)
    # The parent is untouched.
    assert int(parent.numpy()[0]) == 5
    parent.fill_(6)
    mpsrt.synchronize()
    assert int(parent.numpy()[0]) == 6


def test_the_parents_objects_raise_a_clear_error_in_the_child(backend: str) -> None:
    buf = mpsrt.empty(256)
    s = mpsrt.Stream()
    e = mpsrt.Event()
    e.record(s)
    mpsrt.synchronize()
    out = _run("fork", _use_parent_objects, buf, s, e)
    if backend != "cpu":
        _expect_fork_refused(backend, out)
        return
    assert "error" not in out, out.get("tb")
    errors = out["value"]
    assert errors.pop("fresh") == "2"
    for name, message in errors.items():
        assert "belongs to the parent process" in message, (name, message)
        assert "'spawn'" in message
    # Everything still works in the parent.
    buf.fill_(3)
    s.synchronize()
    assert e.query()


def test_a_child_that_does_not_use_mpsrt_is_unaffected(backend: str) -> None:
    mpsrt.empty(64).fill_(1)
    out = _run("fork", sum, [1, 2, 3])
    assert out == {"value": 6}


def test_spawn_works_on_every_backend(backend: str) -> None:
    out = _run("spawn", _spawned_work, backend)
    assert "error" not in out, out.get("tb")
    assert out["value"] == [backend, 7 * 4096]


def _spawned_work(backend: str) -> list[Any]:
    import os

    os.environ["MPSRT_BACKEND"] = backend
    b = mpsrt.empty(4096)
    b.fill_(7)
    mpsrt.synchronize()
    return [mpsrt.backend(), int(b.numpy().astype(np.int64).sum())]


def test_forking_many_times_does_not_leak_or_hang(backend: str) -> None:
    for _ in range(5):
        out = _run("fork", _fresh_work, 4096)
        if backend != "cpu":
            _expect_fork_refused(backend, out)
            continue
        assert "error" not in out, out.get("tb")
        assert out["value"]["sum"] == 7 * 4096
