// Bindings: memory statistics and limits, reclaim callbacks, allocation history and snapshots.
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mpsrt/allocator.h"
#include "mpsrt/device.h"
#include "mpsrt/error.h"
#include "mpsrt/stream.h"
#include "python/bindings.h"

namespace mpsrt::python {

namespace {

// Frames taken by a binding before it released the GIL (empty_cache), for the allocator's
// request on the same thread.
thread_local std::shared_ptr<const StackFrames> t_pending_frames;
std::atomic<bool> g_recording_frames{false};
// stacks="all": native frames too (torch.cuda's gather_with_cpp).
std::atomic<bool> g_native_frames{false};

// The calling Python code's frames, innermost first (allocation history with stacks).
std::shared_ptr<const StackFrames> walk_frames();

// With the GIL held: the frames now. Without it: the frames a binding took before releasing
// the GIL, or else, on a thread that runs Python code but released the GIL (torch's operators
// do, before they allocate through the PyTorch device glue), the frames taken by acquiring the
// GIL for the walk, as torch.cuda's allocator does.
std::shared_ptr<const StackFrames> python_frames() {
  if (PyGILState_Check()) return walk_frames();
  if (t_pending_frames || !Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr ||
      _Py_IsFinalizing()) {
    return t_pending_frames;
  }
  const PyGILState_STATE st = PyGILState_Ensure();
  auto frames = walk_frames();
  PyGILState_Release(st);
  return frames;
}

// Called by the allocator outside its lock: the Python frames, after the native ones (return
// addresses, named when a snapshot reads them) when stacks="all". Every frame is kept, the
// mpsrt package's own Python wrappers included (torch's stacks show torch/cuda/memory.py).
std::shared_ptr<const StackFrames> capture_frames() {
  std::shared_ptr<const StackFrames> py = python_frames();
  if (!g_native_frames.load(std::memory_order_relaxed)) return py;
  auto all = std::make_shared<StackFrames>(native_stack());
  if (py) all->insert(all->end(), py->begin(), py->end());
  return all;
}

std::shared_ptr<const StackFrames> walk_frames() {
  auto frames = std::make_shared<StackFrames>();
  PyFrameObject* f = PyEval_GetFrame();
  Py_XINCREF(f);
  while (f != nullptr && frames->size() < 64) {
    PyCodeObject* code = PyFrame_GetCode(f);
    nb::object c = nb::steal(reinterpret_cast<PyObject*>(code));
    frames->push_back({nb::cast<std::string>(c.attr("co_filename")), PyFrame_GetLineNumber(f),
                       nb::cast<std::string>(c.attr("co_name"))});
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  Py_XDECREF(f);
  return frames;
}

void append_frame(nb::list& out, const StackFrame& f) {
  nb::dict d;
  d["filename"] = f.filename;
  d["line"] = f.line;
  d["name"] = f.name;
  out.append(d);
}

// A recorded stack as torch's snapshots list it: the native frames (stored first, innermost
// first) are named, and, as torch's CapturedTraceback symbolises, the next Python frame goes
// before each native frame of the interpreter's PyEval_EvalFrame*; the Python frames left
// over go last.
nb::list frames_list(const std::shared_ptr<const StackFrames>& frames) {
  nb::list out;
  if (!frames) return out;
  auto py =
      std::find_if(frames->begin(), frames->end(), [](const StackFrame& f) { return f.pc == 0; });
  for (auto it = frames->begin(); it != frames->end() && it->pc != 0; ++it) {
    const StackFrame named = symbolize_native_frame(it->pc);
    if (named.name.find("PyEval_EvalFrame") != std::string::npos && py != frames->end()) {
      append_frame(out, *py++);
    }
    append_frame(out, named);
  }
  for (; py != frames->end(); ++py) append_frame(out, *py);
  return out;
}

// empty_cache() with the caller's frames for history's segment_free entries, taken while the
// GIL is held (the allocator asks for them after the binding released it).
void empty_cache_with_frames(int device) {
  std::shared_ptr<const StackFrames> frames;
  if (g_recording_frames.load(std::memory_order_relaxed)) frames = python_frames();
  t_pending_frames = std::move(frames);
  {
    nb::gil_scoped_release release;
    try {
      empty_cache(device);
    } catch (...) {
      t_pending_frames.reset();
      throw;
    }
  }
  t_pending_frames.reset();
}

int add_python_reclaim_callback(nb::typed<nb::callable, bool(int)> fn, int device) {
  // Runs on the allocating thread with the GIL released by nothing: take it to call.
  auto holder = std::make_shared<nb::object>(fn);
  auto call = [holder](size_t needed) -> bool {
    nb::gil_scoped_acquire gil;
    try {
      return nb::cast<bool>((*holder)(needed));
    } catch (nb::python_error& e) {
      const std::string what = e.what();
      throw std::runtime_error(what);
    }
  };
  return add_reclaim_callback(call, device);
}

// `native`: torch.cuda's stacks="all" (native frames after the Python ones).
void record_history(bool enabled, size_t max_entries, int context,
                    std::vector<std::string> skip_actions, bool clear_history, bool native,
                    int device) {
  if (context < 0 || context > static_cast<int>(HistoryContext::All)) {
    throw nb::value_error("_record_memory_history(): context must be 0 (None) to 3 (all)");
  }
  HistoryOptions o;
  o.max_entries = max_entries;
  o.context = static_cast<HistoryContext>(context);
  o.skip_actions = std::move(skip_actions);
  o.clear_history = clear_history;
  if (o.context != HistoryContext::None) o.frames_fn = &capture_frames;
  if (enabled && native && o.context != HistoryContext::None) {
    native_stack();  // the unwinder's first use loads it: not during an allocation
    g_native_frames = true;
  } else if (enabled) {
    g_native_frames = false;
  }
  record_memory_history(enabled, o, device);
  if (enabled && o.context == HistoryContext::All) g_recording_frames = true;
}

nb::dict segment_dict(const SegmentInfo& s) {
  nb::dict d;
  d["address"] = s.address;
  d["frames"] = frames_list(s.frames);
  d["total_size"] = s.total_size;
  d["allocated_size"] = s.allocated_size;
  d["requested_size"] = s.requested_size;
  d["pool"] = s.pool;
  nb::list blocks;
  for (const BlockInfo& b : s.blocks) {
    nb::dict bd;
    bd["address"] = b.address;
    bd["size"] = b.size;
    bd["requested_size"] = b.requested_size;
    bd["allocated"] = b.allocated;
    bd["frames"] = frames_list(b.frames);
    blocks.append(bd);
  }
  d["blocks"] = blocks;
  return d;
}

nb::dict trace_dict(const TraceInfo& t) {
  nb::dict d;
  d["action"] = t.action;
  d["addr"] = t.address;
  d["size"] = t.size;
  d["stream"] = t.stream;
  d["time_us"] = t.time_us;
  d["frames"] = frames_list(t.frames);
  return d;
}

// The snapshot as torch.cuda.memory._snapshot's parts: (segments, trace), dicts of its keys.
nb::tuple snapshot(int device) {
  const MemorySnapshot snap = memory_snapshot(device);
  nb::list segments;
  for (const SegmentInfo& s : snap.segments) segments.append(segment_dict(s));
  nb::list trace;
  for (const TraceInfo& t : snap.trace) trace.append(trace_dict(t));
  return nb::make_tuple(segments, trace);
}

// What the allocator holds and held: counters, peaks, the device's memory.
void bind_statistics(nb::module_& m) {
  m.def("memory_stats", &memory_stats, nb::arg("device") = -1);
  m.def("reset_peak_memory_stats", &reset_peak_memory_stats, nb::arg("device") = -1);
  m.def("reset_accumulated_memory_stats", &reset_accumulated_memory_stats, nb::arg("device") = -1);
  m.def("current_allocated_memory", &current_allocated_memory, nb::arg("device") = -1);
  m.def("reserved_memory", &reserved_memory, nb::arg("device") = -1);
  m.def("recommended_max_memory", &recommended_max_memory, nb::arg("device") = -1);
  m.def(
      "mem_get_info",
      [](int device) {
        const auto [free, total] = mem_get_info(device);
        return nb::typed<nb::tuple, int, int>(nb::make_tuple(free, total));
      },
      nb::arg("device") = -1);
}

// The cache and its limits: freeing it, its cap, the process's fraction, reclaim callbacks.
void bind_cache_and_limits(nb::module_& m) {
  m.def("empty_cache", &empty_cache_with_frames, nb::arg("device") = -1);
  m.def("set_cache_limit", &set_cache_limit, nb::arg("bytes"), nb::arg("device") = -1);
  m.def("get_per_process_memory_fraction", &get_per_process_memory_fraction,
        nb::arg("device") = -1);
  m.def("set_per_process_memory_fraction", &set_per_process_memory_fraction, nb::arg("fraction"),
        nb::arg("device") = -1);
  m.def("add_reclaim_callback", &add_python_reclaim_callback, nb::arg("fn"),
        nb::arg("device") = -1);
  m.def("remove_reclaim_callback", &remove_reclaim_callback, nb::arg("id"), nb::arg("device") = -1);
}

// The allocation history and snapshots (mpsrt.memory's torch.cuda.memory functions).
void bind_history(nb::module_& m) {
  m.def("_record_memory_history", &record_history, nb::arg("enabled"), nb::arg("max_entries") = 0,
        nb::arg("context") = 3, nb::arg("skip_actions") = std::vector<std::string>(),
        nb::arg("clear_history") = false, nb::arg("native") = false, nb::arg("device") = -1);
  m.def("_memory_snapshot", &snapshot, nb::arg("device") = -1,
        nb::sig("def _memory_snapshot(device: int = -1) -> tuple[list[dict[str, typing.Any]], "
                "list[dict[str, typing.Any]]]"));
}

}  // namespace

void init_memory(nb::module_& m) {
  bind_statistics(m);
  bind_cache_and_limits(m);
  bind_history(m);
}

}  // namespace mpsrt::python
