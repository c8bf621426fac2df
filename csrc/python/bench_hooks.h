// The bench hooks: a private table of C function pointers that the extension module mpsrt._C
// exports as the PyCapsule `mpsrt._C._bench_hooks`, for the bench's own extension module
// mpsrt._bench (bench.cpp) and nothing else. This header is where the hooks are documented.
//
// Why a table: the core is linked statically into mpsrt._C with hidden symbols (docs/building.md,
// "The module keeps its C++ runtime to itself"), so a second module that linked the core again
// would hold a second runtime (allocator, streams, profiler). mpsrt._bench links no core: it
// reaches the one runtime of mpsrt._C through this table.
//
// Why the timed loops are in the table (bench_hooks.cpp, compiled into mpsrt._C) rather than in
// mpsrt._bench: the operations they time take a few ns (a signpost with the profiler off, a
// cached allocation, an event query). Called from another module, each would be an indirect
// call through the table that the optimiser cannot inline, and the figures would shift. The
// loops stay beside the runtime, compiled as before; mpsrt._bench holds the Python bindings,
// the C baselines (memset, memcpy, posix_memalign, threads) and calls each loop once.
//
// Not an API: both modules are built together from one tree, so mpsrt._bench asks for exactly
// kBenchHooksVersion (and a table of at least its size). Nothing here throws: a call that can
// fail returns a BenchStatus and leaves its message ("[component] what happened; what to do")
// for last_error() on the calling thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpsrt::python {

inline constexpr const char* kBenchHooksCapsule = "mpsrt._C._bench_hooks";
inline constexpr uint32_t kBenchHooksVersion = 1;

enum BenchStatus : int32_t {
  kBenchOk = 0,
  kBenchValueError = 1,    // bad argument (std::invalid_argument): ValueError
  kBenchOutOfMemory = 2,   // mpsrt::OutOfMemory: mpsrt.OutOfMemoryError
  kBenchRuntimeError = 3,  // any other failure: RuntimeError
};

/// Raw device memory outside the caching allocator (mpsrt::testing::RawHeap), opaque.
struct BenchHeap;

struct BenchHooks {
  uint32_t version;  // kBenchHooksVersion of the mpsrt._C that made the table
  uint32_t size;     // sizeof(BenchHooks) there
  /// The message of the calling thread's last failed call ("" after a call that succeeded).
  const char* (*last_error)();

  // ---- the runtime's paths, timed in C++ (the GIL is the caller's to release)
  /// `iters` commits of an empty command buffer on `device`'s default stream (-1: the current
  /// device), each waited for: ns of each one into out[0..iters). idle_us > 0 sleeps before
  /// each one, so the queue's worker has parked.
  BenchStatus (*commit_wait_ns)(int iters, int idle_us, int device, int64_t* out);
  /// Mean ns of a Buffer allocation + free of nbytes on the current device: a cache hit, or
  /// with `miss` a new heap each time (empty_cache() after each free).
  BenchStatus (*alloc_free_ns)(size_t nbytes, int iters, bool miss, double* out);
  /// Mean ns of an Event recorded on the current stream and queried at once.
  BenchStatus (*event_record_query_ns)(int iters, double* out);
  /// Mean ns of encoding a 256-byte fill into the open command buffer (no commit); with
  /// `profiled`, inside a profiling session (interval mode).
  BenchStatus (*encode_fill_ns)(int iters, bool profiled, double* out);
  /// Mean ns of one signpost (profiler::mark) with the profiler off or in a session.
  BenchStatus (*signpost_ns)(int iters, bool profiled, double* out);
  /// Records a session of about `records` records, then times export_trace(path) alone.
  BenchStatus (*profile_export)(uint64_t records, const char* path, double* seconds,
                                uint64_t* exported, uint64_t* dropped);

  // ---- raw heaps, driven through the device's default stream
  /// nbytes on `device` (-1: the current device) into *out.
  BenchStatus (*heap_create)(size_t nbytes, int device, BenchHeap** out);
  /// Waits for the device's work, then frees the heap (nullptr: nothing).
  void (*heap_destroy)(BenchHeap* heap);
  size_t (*heap_nbytes)(const BenchHeap* heap);
  /// The memory as the host sees it; fails when it is not host-visible.
  BenchStatus (*heap_host)(const BenchHeap* heap, uint8_t** out);
  /// Encodes a fill of whole `pattern_size`-byte patterns (1, 2, 4 or 8); not waited for.
  BenchStatus (*heap_fill)(BenchHeap* heap, uint64_t value, unsigned pattern_size);
  /// Encodes a copy of src (of the same size); not waited for.
  BenchStatus (*heap_copy_from)(BenchHeap* heap, const BenchHeap* src);
};

}  // namespace mpsrt::python
