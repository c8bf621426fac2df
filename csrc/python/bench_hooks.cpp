// The bench hooks' side in mpsrt._C (the table and its documentation: bench_hooks.h): the
// loops that time the runtime's own paths from C++, and raw heaps, for mpsrt._bench. They are
// compiled here, beside the runtime, as they were when the bench's bindings lived in this module,
// so that what they time is unchanged. Nothing is registered at import but one capsule.
#include "python/bench_hooks.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
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

// ---------------------------------------------------------------- the measurements
// Each loop runs in C++; the caller (mpsrt._bench) releases the GIL around it.

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

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

// ---------------------------------------------------------------- the table's entries

thread_local std::string t_last_error;

// Runs f, mapping what it throws to a BenchStatus and the thread's last error (nothing here
// throws across the table).
template <class F>
BenchStatus guarded(F&& f) noexcept {
  try {
    f();
    t_last_error.clear();
    return kBenchOk;
  } catch (const OutOfMemory& e) {
    t_last_error = e.what();
    return kBenchOutOfMemory;
  } catch (const std::invalid_argument& e) {
    t_last_error = e.what();
    return kBenchValueError;
  } catch (const std::exception& e) {
    t_last_error = e.what();
    return kBenchRuntimeError;
  } catch (...) {
    t_last_error = "[bench] unknown C++ exception";
    return kBenchRuntimeError;
  }
}

testing::RawHeap* raw(BenchHeap* h) {
  return reinterpret_cast<testing::RawHeap*>(h);
}
const testing::RawHeap* raw(const BenchHeap* h) {
  return reinterpret_cast<const testing::RawHeap*>(h);
}

namespace entry {

const char* last_error() {
  return t_last_error.c_str();
}
BenchStatus commit_wait(int iters, int idle_us, int device, int64_t* out) {
  return guarded([&] {
    const std::vector<int64_t> ns = commit_wait_ns(iters, idle_us, device);
    std::copy(ns.begin(), ns.end(), out);
  });
}
BenchStatus alloc_free(size_t nbytes, int iters, bool miss, double* out) {
  return guarded([&] { *out = alloc_free_ns(nbytes, iters, miss); });
}
BenchStatus event_record_query(int iters, double* out) {
  return guarded([&] { *out = event_record_query_ns(iters); });
}
BenchStatus encode_fill(int iters, bool profiled, double* out) {
  return guarded([&] { *out = encode_fill_ns(iters, profiled); });
}
BenchStatus signpost(int iters, bool profiled, double* out) {
  return guarded([&] { *out = signpost_ns(iters, profiled); });
}
BenchStatus export_trace(uint64_t records, const char* path, double* seconds, uint64_t* exported,
                         uint64_t* dropped) {
  return guarded([&] { std::tie(*seconds, *exported, *dropped) = profile_export(records, path); });
}

BenchStatus heap_create(size_t nbytes, int device, BenchHeap** out) {
  return guarded([&] {
    *out =
        reinterpret_cast<BenchHeap*>(std::make_unique<testing::RawHeap>(nbytes, device).release());
  });
}
void heap_destroy(BenchHeap* heap) {
  delete raw(heap);
}
size_t heap_nbytes(const BenchHeap* heap) {
  return raw(heap)->nbytes();
}
BenchStatus heap_host(const BenchHeap* heap, uint8_t** out) {
  return guarded([&] { *out = raw(heap)->host(); });
}
BenchStatus heap_fill(BenchHeap* heap, uint64_t value, unsigned pattern_size) {
  return guarded([&] { raw(heap)->fill(value, pattern_size); });
}
BenchStatus heap_copy_from(BenchHeap* heap, const BenchHeap* src) {
  return guarded([&] { raw(heap)->copy_from(*raw(src)); });
}

}  // namespace entry

constexpr BenchHooks kHooks = {
    kBenchHooksVersion,    static_cast<uint32_t>(sizeof(BenchHooks)),
    entry::last_error,     entry::commit_wait,
    entry::alloc_free,     entry::event_record_query,
    entry::encode_fill,    entry::signpost,
    entry::export_trace,   entry::heap_create,
    entry::heap_destroy,   entry::heap_nbytes,
    entry::heap_host,      entry::heap_fill,
    entry::heap_copy_from,
};

// The last entry above is the table's last: a field added to bench_hooks.h fails here until
// kHooks gives it an entry.
static_assert(offsetof(BenchHooks, heap_copy_from) + sizeof(BenchHooks::heap_copy_from) ==
                  sizeof(BenchHooks),
              "BenchHooks has a field after heap_copy_from: give it an entry in kHooks");

}  // namespace

void init_bench_hooks(nb::module_& m) {
  m.attr("_bench_hooks") = nb::capsule(&kHooks, kBenchHooksCapsule);
}

}  // namespace mpsrt::python
