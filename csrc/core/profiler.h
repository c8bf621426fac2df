// The profiler's core side: the flags the hot paths test, the records, and the hooks the
// streams and the allocator call while a session runs. See mpsrt/profiler.h for the API.
//
// The files, one role each: profiler_session.* (the session and the per-thread record
// buffers), profiler_recorder.cpp (the stream hooks below), profiler_alloc_trace.cpp (the
// allocator's observer), profiler_ranges.* (marks, ranges and host ops),
// profiler_records.* (the records, their names and a session's snapshot), profiler_stats.cpp
// and trace_json.cpp (the statistics and the trace of a snapshot), profiler_fork.cpp (the fork
// handlers), profiler_api.cpp (sessions, export and statistics of mpsrt/profiler.h: with
// profiler_capture.cpp, the GPU capture, the only ones that reach the runtime).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

#include "backends/backend.h"
#include "core/allocator/events.h"
#include "mpsrt/api.h"

namespace mpsrt::detail {

class MemoryStats;
class Runtime;

namespace prof {

/// Session flags; 0 when no session runs (the only thing a hot path reads).
enum Flags : uint32_t {
  kIntervals = 1,  // encode and device intervals
  kEvents = 2,     // completion instants
  kWait = 4,       // every profiled command buffer commits and waits
  kSchedule = 8,   // a command buffer's interval starts at its commit, not its device start
};
extern std::atomic<uint32_t> g_flags;
/// Cost: one relaxed load.
inline uint32_t flags() noexcept {
  return g_flags.load(std::memory_order_relaxed);
}

/// MPSRT_TRACE_SIGNPOSTS bits (torch.mps's ProfileOptions).
enum TraceBits : uint32_t {
  kTraceAllEvents = 1,
  kTraceAllIntervals = 2,
  kTraceWaitUntilCompleted = 4,
  kTraceIncludeSchedule = 8,
  kTraceUseIntervals = 16,
  kTraceUseEvents = 32,
  kTraceMask = 63,
};
/// MPSRT_LOG_PROFILE_INFO bits (torch.mps's LogOptions).
enum LogBits : uint32_t {
  kLogOperationInfo = 1,
  kLogCopyInfo = 2,
  kLogCpuFallbackInfo = 4,
  kLogAllStats = 8,
  kLogOperationStats = 16,
  kLogCopyStats = 32,
  kLogCpuFallbackStats = 64,
  kLogIncludeGpuTime = 128,
  kLogIncludeKernelTime = 256,
  kLogIncludeBufferId = 512,
  kLogMask = 1023,
};

/// The clock of every record: the steady clock in nanoseconds (CLOCK_MONOTONIC on Linux).
inline int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// What a signpost is about. Names in op_name().
enum class Op : uint8_t {
  Fill,
  Copy,
  CopyFromHost,
  RandomBits,
  Uniform,
  Normal,
  RandomInt,
  Bernoulli,
  Callback,
  EventRecord,
  EventWait,
  CommandBuffer,
  CopyToHost,
  Kernel,
  CopyPeer,  // a copy between two devices' Buffers (Buffer::copy_from across devices)
  kCount,
};
const char* op_name(Op op) noexcept;
inline bool is_copy(Op op) noexcept {
  return op == Op::Copy || op == Op::CopyFromHost || op == Op::CopyToHost || op == Op::CopyPeer;
}

/// The operation a stream encodes, for the signposts.
struct OpDesc {
  Op op;
  uint64_t bytes = 0;
  uint64_t buffer_id = 0;  ///< destination address, for MPSRT_LOG_PROFILE_INFO's buffer ids
};

/// One profiled command of an open command buffer: its encode interval and the device
/// timestamps its command buffer writes around it.
struct PendingOp {
  OpDesc desc;
  int64_t host_begin = 0;
  int64_t host_end = 0;
  uint64_t device_begin = 0;  // written by the device
  uint64_t device_end = 0;
  uint64_t flow = 0;
};

/// The profiled commands of one command buffer; handed to its completion.
struct Batch {
  std::deque<PendingOp> ops;  // stable addresses: the device writes into them
  uint64_t session = 0;
  uint32_t flags = 0;
  int device = 0;
  int64_t stream = 0;
  int64_t host_offset_ns = 0;  // device clock + offset = record clock
  int64_t commit_ns = 0;
};

/// A new batch for the current session.
Batch* new_batch(int device, int64_t stream, int64_t host_offset_ns);
/// Appends a command to `b` and returns it (flow id assigned).
PendingOp& add_op(Batch& b, const OpDesc& d);
/// Records the encode interval of `op` (call once host_end is set), on the calling thread.
void record_encode(const Batch& b, const PendingOp& op);
/// Records the device side of a completed command buffer: its interval, each command's
/// interval or completion instant, and the per-command log lines MPSRT_LOG_PROFILE_INFO asks
/// for. Runs on the thread that reports the completion.
void complete(const Batch& b, const backend::Completion& c);
/// A host-side copy (no command buffer): an interval on the calling thread's track and a
/// device-less copy in the statistics.
void record_host_copy(Op op, int device, uint64_t bytes, int64_t begin_ns, int64_t end_ns);

/// Starts a session from MPSRT_TRACE_SIGNPOSTS / MPSRT_LOG_PROFILE_INFO, when they ask for one
/// (called once the runtime is up). Statistics are then printed at stop() or at exit.
/// Defined with the API (profiler_api.cpp), which takes from `rt` what the session needs.
void start_from_options(Runtime& rt);
/// Ends any session without waiting or printing (runtime reset).
void reset();
/// fork() handlers (profiler_fork.cpp): the profiler's locks are held across the fork; in the
/// child the session ends and only the forking thread's buffer stays registered.
void fork_prepare();
void fork_parent();
void fork_child();

/// Installs `sink` (nullptr: none), a platform's own tracing tool, and returns the previous one:
/// the runtime installs its backend's (Backend::trace_sink) while it runs; a test may install
/// its own. A sink is never destroyed by the profiler and may still be called after it is
/// replaced: give one that lives to the end of the process. Cost when none is installed: one
/// acquire load in a session's paths only.
backend::TraceSink* set_platform_sink(backend::TraceSink* sink) noexcept;

struct Record;  // profiler_records.h

/// Allocator signposts and the allocated / reserved counters of one device
/// (profiler_alloc_trace.cpp).
class AllocatorTrace final : public AllocatorObserver {
 public:
  AllocatorTrace(int device, const MemoryStats& stats) : device_(device), stats_(stats) {}
  void on_event(const AllocEvent& e) override;
  /// A counter sample with the current values (the allocator's lock must be held).
  void sample() const;

 private:
  // The allocated / reserved counter sample at time `at` (the allocator's lock held).
  Record counter_record(int64_t at) const;

  int device_;
  const MemoryStats& stats_;
};

}  // namespace prof
}  // namespace mpsrt::detail
