// The extension module mpsrt._bench: the measurement hooks of `python -m bench`, apart from the
// production module mpsrt._C, so that `import mpsrt` never loads them. It links no core: the
// runtime's paths are timed by the loops that mpsrt._C exports in the capsule
// mpsrt._C._bench_hooks, on the one runtime of the process. What each hook times, and why the
// loops live in mpsrt._C, is documented once, in bench_hooks.h. Here: the Python bindings of
// those hooks, raw heaps (driven through the device's default stream) and the C baselines
// (memset, memcpy, posix_memalign, two threads) that mpsrt's numbers are compared with.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "python/bench_hooks.h"

namespace {

namespace nb = nanobind;
using mpsrt::python::BenchHeap;
using mpsrt::python::BenchHooks;
using mpsrt::python::BenchStatus;

const BenchHooks* g_hooks = nullptr;  // set once, by the module's init

const BenchHooks& hooks() {
  return *g_hooks;
}

/// mpsrt::OutOfMemory from the table: raised as mpsrt.OutOfMemoryError (a RuntimeError).
struct OutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Raises what a failed hook left: ValueError, mpsrt.OutOfMemoryError or RuntimeError.
void check(BenchStatus status) {
  if (status == mpsrt::python::kBenchOk) return;
  const std::string msg = hooks().last_error();
  if (status == mpsrt::python::kBenchValueError) throw std::invalid_argument(msg);
  if (status == mpsrt::python::kBenchOutOfMemory) throw OutOfMemory(msg);
  throw std::runtime_error(msg);
}

/// The table from mpsrt._C, checked: both modules come from one build.
const BenchHooks* load_hooks() {
  const nb::object capsule = nb::module_::import_("mpsrt._C").attr("_bench_hooks");
  auto* table = static_cast<const BenchHooks*>(
      PyCapsule_GetPointer(capsule.ptr(), mpsrt::python::kBenchHooksCapsule));
  if (table == nullptr) throw nb::python_error();
  if (table->version != mpsrt::python::kBenchHooksVersion || table->size < sizeof(BenchHooks)) {
    throw std::runtime_error(
        "[bench] mpsrt._bench was built for bench hooks version " +
        std::to_string(mpsrt::python::kBenchHooksVersion) + ", but mpsrt._C has version " +
        std::to_string(table->version) +
        "; the two modules come from different builds: reinstall mpsrt (pip install .)");
  }
  return table;
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------- raw heaps

// A raw heap of mpsrt._C's runtime (mpsrt::testing::RawHeap), with the C baselines on its
// memory.
class RawHeap {
 public:
  RawHeap(size_t nbytes, int device) { check(hooks().heap_create(nbytes, device, &heap_)); }
  ~RawHeap() { hooks().heap_destroy(heap_); }
  RawHeap(const RawHeap&) = delete;
  RawHeap& operator=(const RawHeap&) = delete;

  size_t nbytes() const { return hooks().heap_nbytes(heap_); }
  uint8_t* host() const {
    uint8_t* p = nullptr;
    check(hooks().heap_host(heap_, &p));
    return p;
  }
  void fill(uint64_t value, unsigned size) { check(hooks().heap_fill(heap_, value, size)); }
  void copy_from(const RawHeap& src) { check(hooks().heap_copy_from(heap_, src.heap_)); }

  // Through volatile pointers, so the compiler cannot inline `rep movsb`/`rep stosb` in their
  // place: these measure the C library's functions.
  void c_memset(int value) {
    void* (*volatile fn)(void*, int, size_t) = &std::memset;
    fn(host(), value, nbytes());
  }
  void c_memcpy_from(const RawHeap& src) {
    if (src.nbytes() != nbytes()) throw std::invalid_argument("[bench] heaps differ in size");
    void* (*volatile fn)(void*, const void*, size_t) = &std::memcpy;
    fn(host(), src.host(), nbytes());
  }
  nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> numpy(nb::handle owner) {
    size_t shape[1] = {nbytes()};
    return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(host(), 1, shape, owner);
  }

 private:
  BenchHeap* heap_ = nullptr;
};

// ---------------------------------------------------------------- the C baselines

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

// ---------------------------------------------------------------- the runtime's loops

std::vector<int64_t> commit_wait_ns(int iters, int idle_us, int device) {
  if (iters < 0) throw std::invalid_argument("[bench] commit_wait_ns: iters must be >= 0");
  std::vector<int64_t> out(static_cast<size_t>(iters));
  check(hooks().commit_wait_ns(iters, idle_us, device, out.data()));
  return out;
}

double alloc_free_ns(size_t nbytes, int iters, bool miss) {
  double ns = 0;
  check(hooks().alloc_free_ns(nbytes, iters, miss, &ns));
  return ns;
}

double event_record_query_ns(int iters) {
  double ns = 0;
  check(hooks().event_record_query_ns(iters, &ns));
  return ns;
}

double encode_fill_ns(int iters, bool profiled) {
  double ns = 0;
  check(hooks().encode_fill_ns(iters, profiled, &ns));
  return ns;
}

double signpost_ns(int iters, bool profiled) {
  double ns = 0;
  check(hooks().signpost_ns(iters, profiled, &ns));
  return ns;
}

std::tuple<double, uint64_t, uint64_t> profile_export(uint64_t records, const std::string& path) {
  double seconds = 0;
  uint64_t exported = 0, dropped = 0;
  check(hooks().profile_export(records, path.c_str(), &seconds, &exported, &dropped));
  return std::make_tuple(seconds, exported, dropped);
}

// ---------------------------------------------------------------- the registrations
// Each loop runs in C++ with the GIL released, so that no Python overhead is in its numbers.

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
      .def_prop_ro("nbytes", &RawHeap::nbytes)
      .def("fill", &RawHeap::fill, nb::arg("value"), nb::arg("pattern_size") = 1,
           "Encodes a fill on the default stream (does not wait).")
      .def("copy_from", &RawHeap::copy_from, nb::arg("src"),
           "Encodes a copy on the default stream (does not wait).")
      .def("c_memset", &RawHeap::c_memset, nb::arg("value"), nb::call_guard<gil_scoped_release>(),
           "memset on the calling thread (the C baseline).")
      .def("c_memcpy_from", &RawHeap::c_memcpy_from, nb::arg("src"),
           nb::call_guard<gil_scoped_release>(), "memcpy on the calling thread (the C baseline).")
      .def(
          "numpy", [](nb::handle self) { return nb::cast<RawHeap&>(self).numpy(self); },
          "A uint8 view of the memory (valid while this object lives).");
}

// OutOfMemory as mpsrt._C's exception type (the module keeps it alive: it is in sys.modules).
void translate_out_of_memory(const std::exception_ptr& p, void* oom_type) {
  try {
    std::rethrow_exception(p);
  } catch (const OutOfMemory& e) {
    PyErr_SetString(static_cast<PyObject*>(oom_type), e.what());
  }
}

}  // namespace

NB_MODULE(_bench, m) {
  m.doc() = "Measurement hooks for `python -m bench` (bench only; not part of mpsrt's API).";
  g_hooks = load_hooks();
  const nb::object oom = nb::module_::import_("mpsrt._C").attr("OutOfMemoryError");
  nb::register_exception_translator(translate_out_of_memory, oom.ptr());
  bind_baselines(m);
  bind_runtime_timings(m);
  bind_profiler_timings(m);
  bind_raw_heap(m);
}
