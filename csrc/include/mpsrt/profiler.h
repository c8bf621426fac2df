// The signpost profiler: operation, copy and allocator signposts, nvtx-style ranges, statistics
// and a Chrome/Perfetto trace export.
//
// While a session runs (start() .. stop()), every command encoded on a stream records its CPU
// encode interval on the calling thread's track and, once its command buffer completes, its
// device interval on the stream's track, joined by a flow arrow. Allocations, frees and heap
// changes record instants plus "allocated" and "reserved" counters. On Apple the same
// signposts also go to os_signpost (subsystem "mpsrt"). Records are kept per thread in a
// bounded buffer (MPSRT_PROFILE_RECORDS each); what does not fit is counted and reported.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "mpsrt/api.h"

namespace mpsrt {
class Stream;
}

/// The signpost profiler: sessions, marks and ranges, host operations, the Chrome/Perfetto
/// trace export, GPU captures and statistics.
namespace mpsrt::profiler {

/// Signpost modes (bits, combinable), as torch.mps.profiler's "interval" and "event".
enum Mode : unsigned {
  kInterval = 1,  ///< intervals: the CPU encode and the device execution of each command
  kEvent = 2,     ///< instants marking the completion of each command
};

/// Starts a session (clearing the records of the previous one). `modes` is a combination of
/// Mode bits; wait_until_completed makes every profiled command buffer commit-and-wait, so that
/// each command runs alone on the device timeline. Throws std::invalid_argument for modes
/// outside 1..3 and mpsrt::Error when a session is already running.
MPSRT_API void start(unsigned modes, bool wait_until_completed = false);
/// Ends the session: waits for the profiled work of every open device to complete (so that
/// its device intervals are recorded), then prints the statistics MPSRT_LOG_PROFILE_INFO asks
/// for to stderr. Does nothing when no session runs.
MPSRT_API void stop();
/// True while a session runs.
MPSRT_API bool is_active() noexcept;

/// An instant on the calling thread's track. Cost with the profiler off: one load.
MPSRT_API void mark(std::string_view message);
/// Opens a range on the calling thread; returns its 0-based nesting depth. Ranges nest per
/// thread and are recorded (as one interval) when popped during a session.
MPSRT_API int range_push(std::string_view message);
/// Closes the calling thread's innermost range; returns the depth it had. Throws mpsrt::Error
/// when the thread has no open range.
MPSRT_API int range_pop();
/// Opens a range that any thread may end (torch.cuda.nvtx.range_start): returns its id, a
/// positive integer never given twice in the process. Such ranges do not nest; a session
/// records each as an asynchronous slice of the process (its own row in a trace viewer).
MPSRT_API int64_t range_start(std::string_view message);
/// Ends the range that range_start() returned `id` for, from any thread. Throws
/// std::invalid_argument when no range with that id is open (never started, or ended already).
MPSRT_API void range_end(int64_t id);

/// An operation the host runs in a stream's order (the PyTorch device runs each aten operator's
/// CPU kernel on device memory this way, after the stream's queued work): host_op_begin()
/// returns its start time, or 0 when no session runs (then host_op_end() records nothing);
/// host_op_end() records an interval named `name` on the stream's track, beside the device
/// intervals of the stream's commands, and counts it in the statistics' "host op" section
/// (MPSRT_LOG_PROFILE_INFO bit 4 logs each, bit 64 prints the section). Cost with no session:
/// one load each.
MPSRT_API int64_t host_op_begin() noexcept;
/// Records the host operation that host_op_begin() returned `begin` for (see host_op_begin()).
MPSRT_API void host_op_end(std::string_view name, const Stream& stream, int64_t begin);
/// What a host operation on device memory does first, in one call: waits for the work queued so
/// far on the calling thread's current stream of `device` (-1: the current device), rethrowing
/// its failure as Stream::synchronize() does, and returns host_op_begin(). Cost while every
/// stream of the process is idle and no session runs: a few loads (no lock, no call into a
/// device; every stream's first queued command, commit or failure ends that). Throws
/// std::invalid_argument for a bad device index.
MPSRT_API int64_t host_op_enter(int device = -1);

/// What an export wrote.
struct TraceSummary {
  uint64_t events = 0;   ///< trace events written (metadata included)
  uint64_t records = 0;  ///< records exported
  uint64_t dropped = 0;  ///< records lost because a thread's buffer was full
};
/// Writes the records of the current (or last) session as Chrome/Perfetto trace JSON: a track
/// per stream (command buffers and device intervals), a track per host thread (encode
/// intervals, ranges, marks, allocator instants), counter tracks for allocated and reserved
/// bytes per device, and flow arrows from each encode to its execution. Throws mpsrt::Error
/// when the file cannot be written.
MPSRT_API TraceSummary export_trace(const std::string& path);

/// GPU capture of the current device's work for the platform's GPU debugger: on metal a
/// .gputrace document through MTLCaptureManager, which needs MTL_CAPTURE_ENABLED=1 in the
/// environment when the process starts; the other backends have none. True when a capture can
/// be started now.
MPSRT_API bool capture_available();
/// Starts a capture of the current device written to `path`. Throws mpsrt::Error when capture
/// is unavailable (saying why) or a capture already runs.
MPSRT_API void begin_capture(const std::string& path);
/// Waits for the captured device's work, then ends the capture (writing the document). Does
/// nothing when no capture runs.
MPSRT_API void end_capture();
/// True while a capture runs.
MPSRT_API bool is_capturing() noexcept;

/// Per-operation statistics of the current (or last) session as a readable table: counts,
/// total / mean / max CPU encode and device times, bytes, copy bandwidth, dropped records.
MPSRT_API std::string statistics();

}  // namespace mpsrt::profiler
