// Measurement hooks for `python -m bench`: C baselines (memset, memcpy) and raw device memory
// driven through the default stream, so that the Python side times both the same way.
// Raw heaps come from mpsrt/testing.h; none of this is part of the API.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "mpsrt/allocator.h"
#include "mpsrt/error.h"
#include "mpsrt/event.h"
#include "mpsrt/profiler.h"
#include "mpsrt/stream.h"
#include "mpsrt/testing.h"
#include "python/bindings.h"

namespace mpsrt::python {

namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// mpsrt::testing::RawHeap with the C baselines on its memory.
class RawHeap : public testing::RawHeap {
 public:
  using testing::RawHeap::RawHeap;
  // Through volatile pointers, so the compiler cannot inline `rep movsb`/`rep stosb` in their
  // place: these measure the C library's functions.
  void c_memset(int value) {
    void* (*volatile fn)(void*, int, size_t) = &std::memset;
    fn(host(), value, nbytes());
  }
  void c_memcpy_from(const RawHeap& src) {
    if (src.nbytes() != nbytes()) detail::throw_invalid("[bench] heaps differ in size");
    void* (*volatile fn)(void*, const void*, size_t) = &std::memcpy;
    fn(host(), src.host(), nbytes());
  }
  nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> numpy(nb::handle owner) {
    size_t shape[1] = {nbytes()};
    return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(host(), 1, shape, owner);
  }
};

/// A profiling session for the scope of a measurement (when asked for).
class Session {
 public:
  explicit Session(bool on) : on_(on) {
    if (on_) profiler::start(profiler::kInterval);
  }
  ~Session() {
    if (on_) profiler::stop();
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  bool on_;
};

// ---------------------------------------------------------------- the measurements
// Each loop runs in C++ with the GIL released, so that no Python overhead is in its numbers.

// `iters` commits of an empty command buffer, each waited for, in ns; idle_us > 0 sleeps
// before each one, so the queue's worker has parked.
std::vector<int64_t> commit_wait_ns(int iters, int idle_us, int device) {
  Stream s = default_stream(device);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    if (idle_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(idle_us));
    const int64_t t0 = steady_ns();
    s.commit(SyncType::CommitAndWait);
    out.push_back(steady_ns() - t0);
  }
  return out;
}

double alloc_free_ns(size_t nbytes, int iters, bool miss) {
  // The caching allocator from C++: a Buffer made and freed. A hit reuses the cached block; a
  // miss empties the cache first, so each Buffer needs a new heap.
  Buffer warm(nbytes);
  warm.reset();
  if (miss) empty_cache();
  const int64_t t0 = steady_ns();
  for (int i = 0; i < iters; ++i) {
    Buffer b(nbytes);
    if (miss) {
      b.reset();
      empty_cache();
    }
  }
  return static_cast<double>(steady_ns() - t0) / iters;
}

double posix_memalign_free_ns(size_t nbytes, int iters) {
  int (*volatile alloc)(void**, size_t, size_t) = &posix_memalign;
  void (*volatile release)(void*) = &std::free;
  const int64_t t0 = steady_ns();
  for (int i = 0; i < iters; ++i) {
    void* p = nullptr;
    if (alloc(&p, 512, nbytes) != 0) throw std::bad_alloc();
    release(p);
  }
  return static_cast<double>(steady_ns() - t0) / iters;
}

double thread_scaling(int64_t iters) {
  // How much faster two threads finish two equal compute-bound jobs than one thread finishes
  // one: 2.0 on two real cores, ~1.0 where the vCPUs share one core.
  auto job = [iters] {
    volatile uint64_t sink = 0;
    uint64_t x = 1;
    for (int64_t i = 0; i < iters; ++i) x = x * 6364136223846793005ULL + 1;
    sink = x;
    (void)sink;
  };
  int64_t t0 = steady_ns();
  job();
  const double one = static_cast<double>(steady_ns() - t0);
  t0 = steady_ns();
  std::thread other(job);
  job();
  other.join();
  const double two = static_cast<double>(steady_ns() - t0);
  return 2.0 * one / two;
}

double event_record_query_ns(int iters) {
  // An event recorded on the current stream and queried at once, from C++.
  Stream s = current_stream();
  Event e;
  const int64_t t0 = steady_ns();
  for (int i = 0; i < iters; ++i) {
    e.record(s);
    (void)e.query();
  }
  const int64_t t1 = steady_ns();
  s.synchronize();
  return static_cast<double>(t1 - t0) / iters;
}

double encode_fill_ns(int iters, bool profiled) {
  // Encoding one small fill into the open command buffer (no commit), from C++; with
  // `profiled`, inside a profiling session (interval mode).
  Session session(profiled);
  Stream s = current_stream();
  Buffer b(256, s);
  s.synchronize();
  const int64_t t0 = steady_ns();
  for (int i = 0; i < iters; ++i) {
    b.fill(static_cast<uint64_t>(i), 1, s);
    if ((i & 255) == 255) s.commit(SyncType::Commit);  // keep the batch bounded
  }
  const int64_t t1 = steady_ns();
  s.synchronize();
  return static_cast<double>(t1 - t0) / iters;
}

double signpost_ns(int iters, bool profiled) {
  // One profiler::mark() from C++, with the profiler off or in a session.
  Session session(profiled);
  const int64_t t0 = steady_ns();
  for (int i = 0; i < iters; ++i) profiler::mark("bench");
  return static_cast<double>(steady_ns() - t0) / iters;
}

std::tuple<double, uint64_t, uint64_t> profile_export(uint64_t records, const std::string& path) {
  // A session of about `records` records (fills: an encode and a device interval each, a
  // command buffer per 256), then export_trace timed alone.
  {
    Session session(true);
    Stream s = current_stream();
    Buffer b(256, s);
    for (uint64_t i = 0; i < records / 2; ++i) {
      b.fill(i, 1, s);
      if ((i & 255) == 255) s.commit(SyncType::Commit);
    }
    s.synchronize();
  }
  const int64_t t0 = steady_ns();
  const profiler::TraceSummary sum = profiler::export_trace(path);
  const double secs = static_cast<double>(steady_ns() - t0) / 1e9;
  return std::make_tuple(secs, sum.records, sum.dropped);
}

// ---------------------------------------------------------------- the registrations

// The C baselines and the machine: what mpsrt's numbers are compared with.
void bind_baselines(nb::module_& m) {
  using nb::gil_scoped_release;
  m.def(
      "noop", [] {}, "Does nothing: the cost of a nanobind call.");
  m.def("thread_scaling", &thread_scaling, nb::arg("iters") = 50'000'000,
        nb::call_guard<gil_scoped_release>());
  m.def("posix_memalign_free_ns", &posix_memalign_free_ns, nb::arg("nbytes"), nb::arg("iters"),
        nb::call_guard<gil_scoped_release>(),
        "Mean ns of posix_memalign(512) + free of nbytes (the C baseline).");
}

// The runtime's own paths timed from C++: commits, allocations, events, encoding.
void bind_runtime_timings(nb::module_& m) {
  using nb::gil_scoped_release;
  m.def("commit_wait_ns", &commit_wait_ns, nb::arg("iters"), nb::arg("idle_us") = 0,
        nb::arg("device") = -1, nb::call_guard<gil_scoped_release>(),
        "Times `iters` commits of an empty command buffer, each waited for, in ns. idle_us > 0 "
        "sleeps before each one, so the queue's worker has parked.");
  m.def("alloc_free_ns", &alloc_free_ns, nb::arg("nbytes"), nb::arg("iters"),
        nb::arg("miss") = false, nb::call_guard<gil_scoped_release>(),
        "Mean ns of a Buffer allocation + free of nbytes on the current device: a cache hit, or "
        "with `miss` a new heap each time (empty_cache() after each free).");
  m.def("event_record_query_ns", &event_record_query_ns, nb::arg("iters"),
        nb::call_guard<gil_scoped_release>());
  m.def("encode_fill_ns", &encode_fill_ns, nb::arg("iters"), nb::arg("profiled") = false,
        nb::call_guard<gil_scoped_release>());
}

// The profiler's costs: a signpost, and exporting a session.
void bind_profiler_timings(nb::module_& m) {
  using nb::gil_scoped_release;
  m.def("signpost_ns", &signpost_ns, nb::arg("iters"), nb::arg("profiled"),
        nb::call_guard<gil_scoped_release>(),
        "Mean ns of one signpost (a mark) with the profiler off or on.");
  m.def("profile_export", &profile_export, nb::arg("records"), nb::arg("path"),
        nb::call_guard<gil_scoped_release>(),
        "Records a session of about `records` records and times exporting it: (seconds, "
        "records, dropped).");
}

void bind_raw_heap(nb::module_& m) {
  using nb::gil_scoped_release;
  nb::class_<RawHeap>(m, "RawHeap", "Raw device memory on the default stream (bench only).")
      .def(nb::init<size_t, int>(), nb::arg("nbytes"), nb::arg("device") = -1)
      .def_prop_ro("nbytes", [](const RawHeap& h) { return h.nbytes(); })
      .def(
          "fill", [](RawHeap& h, uint64_t value, unsigned size) { h.fill(value, size); },
          nb::arg("value"), nb::arg("pattern_size") = 1,
          "Encodes a fill on the default stream (does not wait).")
      .def(
          "copy_from", [](RawHeap& h, const RawHeap& src) { h.copy_from(src); }, nb::arg("src"),
          "Encodes a copy on the default stream (does not wait).")
      .def("c_memset", &RawHeap::c_memset, nb::arg("value"), nb::call_guard<gil_scoped_release>(),
           "memset on the calling thread (the C baseline).")
      .def("c_memcpy_from", &RawHeap::c_memcpy_from, nb::arg("src"),
           nb::call_guard<gil_scoped_release>(), "memcpy on the calling thread (the C baseline).")
      .def(
          "numpy", [](nb::handle self) { return nb::cast<RawHeap&>(self).numpy(self); },
          "A uint8 view of the memory (valid while this object lives).");
}

}  // namespace

void init_bench(nb::module_& m) {
  bind_baselines(m);
  bind_runtime_timings(m);
  bind_profiler_timings(m);
  bind_raw_heap(m);
}

}  // namespace mpsrt::python
