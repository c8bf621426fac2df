"""Allocation history as torch.cuda.memory records it (issue 28 item 2): native frames with
stacks="all", the stacks each `context` keeps, mpsrt's own Python wrappers in the stacks, and
_save_segment_usage / _save_memory_usage. torch's behaviour is the expectation throughout
(c10/cuda/CUDACachingAllocator.cpp, torch/csrc/profiler/combined_traceback.cpp,
torch/cuda/memory.py)."""

from __future__ import annotations

import inspect
import json
import os
import sys
from collections.abc import Iterator

import mpsrt
import pytest
from mpsrt import memory

MiB = 1 << 20
MPSRT_DIR = os.path.dirname(mpsrt.__file__) + os.sep
NATIVE_MODULE = mpsrt._C.__file__


@pytest.fixture(autouse=True)
def _stop_recording() -> Iterator[None]:
    try:
        yield
    finally:
        memory._record_memory_history(None)


def _alloc_here(n: int = 4096) -> mpsrt.Buffer:
    return mpsrt.empty(n)


def _free_here(b: mpsrt.Buffer) -> None:
    b.free()


def _empty_cache_here() -> None:
    mpsrt.synchronize()  # queued work (an earlier test's kernels) done: every free heap goes
    mpsrt.empty_cache()


def _block(snap: dict, address: int) -> dict:
    return next(b for s in snap["segments"] for b in s["blocks"] if b["address"] == address)


def _is_native(f: dict) -> bool:
    """A native frame names a shared object or executable; a Python frame a .py file or a
    pseudo-file such as <frozen runpy>."""
    name = f["filename"]
    return not name.endswith(".py") and not name.startswith("<")


def _python(frames: list[dict]) -> list[dict]:
    return [f for f in frames if not _is_native(f)]


def _native(frames: list[dict]) -> list[dict]:
    return [f for f in frames if _is_native(f)]


def _names(frames: list[dict]) -> list[str]:
    return [f["name"] for f in frames]


# ------------------------------------------------------------ 1. stacks="all": native frames


def test_stacks_all_adds_the_runtimes_native_frames_symbolised() -> None:
    memory._record_memory_history()  # torch's defaults: enabled="all", context="all", stacks="all"
    b = _alloc_here()
    snap = memory.snapshot()
    frames = _block(snap, b.data_ptr)["frames"]
    # torch's frame dicts: filename, line, name (C++ frames too).
    for f in frames:
        assert set(f) == {"filename", "line", "name"}, f
        assert isinstance(f["filename"], str) and isinstance(f["line"], int), f
        assert isinstance(f["name"], str) and f["name"], f
    native = _native(frames)
    assert native, frames
    # The runtime's own frames, named although the module exports none of them: the allocator's
    # allocate, in the extension module (filename: the library; line: the offset in it).
    ours = [f for f in native if f["filename"] == NATIVE_MODULE]
    assert any("mpsrt::detail::CachingAllocator::allocate(" in f["name"] for f in ours), ours
    assert all(f["line"] > 0 for f in ours)
    # The interpreter's frames are there, with the Python frames interleaved as torch's
    # CapturedTraceback symbolises: the innermost Python frame right before the first native
    # _PyEval_EvalFrame* frame, innermost first.
    first_eval = next(i for i, f in enumerate(frames) if "PyEval_EvalFrame" in f["name"])
    assert frames[first_eval - 1]["name"] == "_alloc_here"
    assert all(_is_native(f) for f in frames[: first_eval - 1])
    assert _block(snap, b.data_ptr)["frames"] == next(
        t["frames"]
        for t in snap["device_traces"][0]
        if t["action"] == "alloc" and t["addr"] == b.data_ptr
    )


def test_stacks_all_keeps_the_python_frames_of_stacks_python() -> None:
    memory._record_memory_history(stacks="python")
    a = _alloc_here()
    py_only = _block(memory.snapshot(), a.data_ptr)["frames"]
    memory._record_memory_history(stacks="all")
    b = _alloc_here()
    both = _block(memory.snapshot(), b.data_ptr)["frames"]
    # stacks="python": no native frame at all.
    assert py_only and _native(py_only) == [], py_only
    assert _native(both)
    # The same Python frames either way (the call lines of this test differ by the one line).
    strip = [(f["filename"], f["name"]) for f in _python(both)]
    assert strip == [(f["filename"], f["name"]) for f in py_only]


def test_native_frames_only_when_stacks_are_recorded_and_in_the_legacy_form() -> None:
    # torch: gather_with_cpp when enabled and context and stacks == "all".
    memory._record_memory_history(context=None, stacks="all")
    b = _alloc_here()
    assert _block(memory.snapshot(), b.data_ptr)["frames"] == []
    # The legacy bool form: record_context_cpp adds them.
    memory._record_memory_history(True, record_context_cpp=True)
    c = _alloc_here()
    assert _native(_block(memory.snapshot(), c.data_ptr)["frames"])
    memory._record_memory_history(True, record_context_cpp=False)
    d = _alloc_here()
    frames = _block(memory.snapshot(), d.data_ptr)["frames"]
    assert frames and _native(frames) == []


def test_native_frames_of_frees_and_empty_cache_are_their_own_with_context_all() -> None:
    memory._record_memory_history(context="all")
    b = _alloc_here(24 * MiB)  # a heap of its own
    ptr = b.data_ptr
    _free_here(b)
    _empty_cache_here()
    trace = memory.snapshot()["device_traces"][0]
    by = {t["action"]: t for t in trace if t["addr"] == ptr}
    alloc_native = _names(_native(by["alloc"]["frames"]))
    free_native = _names(_native(by["free_requested"]["frames"]))
    seg_free_native = _names(_native(by["segment_free"]["frames"]))
    assert any("CachingAllocator::allocate(" in n for n in alloc_native), alloc_native
    assert any("CachingAllocator::free(" in n for n in free_native), free_native
    assert any("CachingAllocator::empty_cache(" in n for n in seg_free_native), seg_free_native
    assert by["free_completed"]["frames"] == by["free_requested"]["frames"]


# ------------------------------------------- 2. which stacks each context keeps (torch's rules)


def _record_one_lifetime(context: str | None) -> tuple[dict, dict, int, int]:
    """Records with `context`: a live block, a freed one, a released heap; the snapshot taken
    before the heap was released and the final trace by (action, address)."""
    memory._record_memory_history(context=context, stacks="python")
    live = _alloc_here()
    freed = _alloc_here()
    big = _alloc_here(24 * MiB)
    big_ptr, freed_ptr = big.data_ptr, freed.data_ptr
    _free_here(freed)
    _free_here(big)
    snap = memory.snapshot()
    _empty_cache_here()
    trace = {
        (t["action"], t["addr"]): t
        for t in memory.snapshot()["device_traces"][0]
        if t["action"] != "segment_alloc" or t["addr"] == big_ptr
    }
    snap["live"] = _block(snap, live.data_ptr)
    snap["freed"] = _block(snap, freed_ptr)
    del live
    return snap, trace, freed_ptr, big_ptr


def _first_python(frames: list[dict]) -> str | None:
    py = _python(frames)
    return py[0]["name"] if py else None


@pytest.mark.parametrize("context", ["state", "alloc", "all", None])
def test_each_context_keeps_the_stacks_torch_keeps(context: str | None) -> None:
    snap, trace, freed_ptr, big_ptr = _record_one_lifetime(context)
    # Live blocks keep their allocation's stack from "state" on; a freed block keeps none
    # (torch: free_block clears context_when_allocated).
    assert _first_python(snap["live"]["frames"]) == (None if context is None else "_alloc_here")
    assert snap["freed"]["state"] == "inactive" and snap["freed"]["frames"] == []
    # The heap of the freed 24 MiB block, cached with no live block: its stack stays from
    # "alloc" on (torch's context_when_segment_allocated); "state" keeps live ones only (torch's
    # test_memory_plots_free_stack: nothing of a freed allocation is left in the snapshot).
    seg = next(s for s in snap["segments"] if s["address"] == big_ptr)
    assert _first_python(seg["frames"]) == (None if context in (None, "state") else "_alloc_here")
    # The trace: no stacks with None or "state" (torch: record_context_ < ALLOC); from "alloc"
    # the allocation's; a free's own stack only with "all" (torch gathers it at RecordContext::
    # ALL, else the free carries context_when_allocated), the same for free_completed, and
    # segment_free carries empty_cache's stack with "all", else the segment's allocation's.
    got = {
        action: _first_python(trace[(action, addr)]["frames"])
        for action, addr in (
            ("alloc", freed_ptr),
            ("free_requested", freed_ptr),
            ("free_completed", freed_ptr),
            ("segment_alloc", big_ptr),
            ("segment_free", big_ptr),
        )
    }
    want = {
        None: dict.fromkeys(got),
        "state": dict.fromkeys(got),
        "alloc": dict.fromkeys(got, "_alloc_here"),
        "all": {
            "alloc": "_alloc_here",
            "free_requested": "_free_here",
            "free_completed": "_free_here",
            "segment_alloc": "_alloc_here",
            "segment_free": "empty_cache",  # mpsrt/memory.py's, then _empty_cache_here
        },
    }[context]
    assert got == want


def test_context_state_with_native_stacks_keeps_live_blocks_only() -> None:
    memory._record_memory_history(context="state", stacks="all")
    live = _alloc_here()
    gone = _alloc_here()
    gone_ptr = gone.data_ptr
    _free_here(gone)
    snap = memory.snapshot()
    frames = _block(snap, live.data_ptr)["frames"]
    assert _native(frames) and _first_python(frames) == "_alloc_here"
    assert _block(snap, gone_ptr)["frames"] == []
    assert all(t["frames"] == [] for t in snap["device_traces"][0])


@pytest.mark.parametrize("context", ["alloc", "all", "state"])
def test_a_freed_allocations_stacks_stay_only_where_torch_keeps_them(context: str) -> None:
    # torch's test_memory_plots_free_stack: an allocation made and freed while recording is in
    # the snapshot (trace entries) from "alloc" on, its free from "all" on; with "state" neither
    # is anywhere, its heap's stack included.
    _empty_cache_here()
    memory._record_memory_history(context=context)
    x = None

    def thealloc() -> None:
        nonlocal x
        x = mpsrt.rand(3, 4)

    def thefree() -> None:
        nonlocal x
        del x

    thealloc()
    thefree()
    ss = json.dumps(memory.snapshot())
    assert ("thefree" in ss) == (context == "all")
    assert ("thealloc" in ss) == (context != "state")


def test_native_frames_name_the_op_that_allocated() -> None:
    # torch's test_memory_plots: with stacks="all" the native frames of torch.rand's block name
    # ::rand; mpsrt's random constructors allocate in native functions of their own names.
    memory._record_memory_history(stacks="all")
    bufs = {
        "rand": mpsrt.rand(128, 128),
        "randn": mpsrt.randn(16),
        "randint": mpsrt.randint(0, 5, (16,)),
        "bernoulli": mpsrt.bernoulli(0.5, 16),
        "random_bits": mpsrt.random_bits(16),
        "empty": mpsrt.empty(16),
    }
    snap = memory.snapshot()
    for op, b in bufs.items():
        names = _names(_native(_block(snap, b.data_ptr)["frames"]))
        ours = [n for n in names if n.startswith("mpsrt::python::")]
        # the op's own function, right above the shared constructor (innermost first)
        i = next(i for i, n in enumerate(ours) if n.startswith("mpsrt::python::new_buffer("))
        assert f"::{op}(" in ours[i + 1], (op, ours)
    assert not any("::rand(" in n for n in _names(_native(_block(snap, bufs["empty"].data_ptr)[
        "frames"])))  # fmt: skip
    plot = json.dumps(snap)
    assert "::rand(" in plot


# ------------------------------------------- 3. mpsrt's own Python wrappers are in the stacks


def test_python_frames_include_mpsrts_own_wrappers() -> None:
    memory._record_memory_history(stacks="python")
    r = mpsrt.rand(64)  # a Python function of mpsrt/random.py
    frames = _block(memory.snapshot(), r.data_ptr)["frames"]
    # Innermost first, as torch's include torch/... frames: mpsrt's wrapper, then this test.
    assert frames[0]["filename"].startswith(MPSRT_DIR), frames[:3]
    assert os.path.basename(frames[0]["filename"]) == "random.py"
    wrapper = next(i for i, f in enumerate(frames) if f["name"] == "rand")
    caller = next(i for i, f in enumerate(frames) if f["filename"] == __file__)
    assert wrapper < caller
    assert frames[caller]["name"] == "test_python_frames_include_mpsrts_own_wrappers"


def test_empty_cache_frame_heads_segment_free_as_torchs_does() -> None:
    # torch: segment_free's stack starts at torch/cuda/memory.py's empty_cache.
    memory._record_memory_history(stacks="python")
    b = _alloc_here(24 * MiB)
    ptr = b.data_ptr
    del b
    _empty_cache_here()
    seg_free = next(
        t
        for t in memory.snapshot()["device_traces"][0]
        if t["action"] == "segment_free" and t["addr"] == ptr
    )
    top = seg_free["frames"][:2]
    assert [f["name"] for f in top] == ["empty_cache", "_empty_cache_here"], top
    assert top[0]["filename"] == os.path.join(MPSRT_DIR, "memory.py")
    assert top[1]["filename"] == __file__


# -------------------------------------------- 4. _save_segment_usage and _save_memory_usage


@pytest.fixture
def flamegraph_echo(tmp_path, monkeypatch) -> None:
    """torch's format_flamegraph runs ~/.cache/flamegraph.pl (downloaded when missing): a
    stand-in that returns its input, under a HOME of the test's own."""
    cache = tmp_path / "home" / ".cache"
    cache.mkdir(parents=True)
    script = cache / "flamegraph.pl"
    script.write_text("#!/bin/sh\ncat\n")
    script.chmod(0o755)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.mark.parametrize("which", ["_save_segment_usage", "_save_memory_usage"])
def test_save_usage_renders_through_torchs_memory_viz(which, flamegraph_echo, tmp_path) -> None:
    viz = pytest.importorskip("torch.cuda._memory_viz")
    import torch.cuda.memory as tcm

    ours, theirs = getattr(memory, which), getattr(tcm, which)
    assert inspect.signature(ours).parameters.keys() == inspect.signature(theirs).parameters.keys()
    assert [p.default for p in inspect.signature(ours).parameters.values()] == [
        "output.svg",
        None,
    ]
    memory._record_memory_history(stacks="python")
    b = _alloc_here(3000)
    snap = memory.snapshot()
    render = viz.segments if which == "_save_segment_usage" else viz.memory
    want = render(snap, format_flamegraph=lambda lines: lines)
    # A given snapshot, then the default (the snapshot now: nothing changed in between).
    out = tmp_path / "given.svg"
    getattr(memory, which)(str(out), snap)
    assert out.read_text() == want
    line = next(x for x in want.splitlines() if ";active_allocated;" in x and "_alloc_here" in x)
    prefix = "stream_0;seg_" if which == "_save_segment_usage" else "stream_0;active_allocated"
    assert line.startswith(prefix) and line.endswith(" 3000"), line
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        getattr(memory, which)()
    finally:
        os.chdir(cwd)
    assert (tmp_path / "output.svg").read_text() == want
    del b


def test_save_usage_without_torch_is_a_clear_import_error(tmp_path, monkeypatch) -> None:
    for name in ("torch", "torch.cuda", "torch.cuda._memory_viz"):
        monkeypatch.setitem(sys.modules, name, None)  # as if torch were not installed
    for which in ("_save_segment_usage", "_save_memory_usage"):
        out = tmp_path / f"{which}.svg"
        with pytest.raises(ImportError, match=rf"{which}\(\).*torch is not installed"):
            getattr(memory, which)(str(out))
        assert not out.exists()
    assert memory.snapshot()["segments"] is not None  # the runtime is still usable
