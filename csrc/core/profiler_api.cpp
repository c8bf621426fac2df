// The profiler's sessions as mpsrt/profiler.h and the runtime start and end them: start(),
// stop(), export_trace(), statistics(), the session MPSRT_TRACE_SIGNPOSTS starts with the
// runtime, and its report at exit. This file and profiler_capture.cpp are the profiler's only
// ones that reach the runtime: they pass the session what it takes from it (the options, the
// devices' names, the devices' counters at the start).
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/allocator/caching_allocator.h"
#include "core/profiler.h"
#include "core/profiler_ranges.h"
#include "core/profiler_records.h"
#include "core/profiler_session.h"
#include "core/runtime.h"
#include "mpsrt/error.h"
#include "mpsrt/profiler.h"

namespace mpsrt::detail::prof {

namespace {

bool g_exit_report = false;  // an environment-started session prints its statistics at exit
bool g_env_session = false;  // the running session was started by MPSRT_TRACE_SIGNPOSTS

std::vector<DeviceName> device_names(Runtime& rt) {
  std::vector<DeviceName> out;
  for (DeviceContext* d : rt.open_devices()) {
    const DeviceProperties p = d->properties(rt.backend().name());
    out.push_back({d->index(), p.backend + ": " + p.name});
  }
  return out;
}

void print_statistics_locked(std::vector<DeviceName> devices) {
  const uint32_t log = log_bits();
  const Snapshot s = snapshot(std::move(devices));
  if ((log & (kLogAllStats | kLogOperationStats | kLogCopyStats | kLogCpuFallbackStats)) != 0) {
    std::fputs(format_statistics(s, log).c_str(), stderr);
  }
  if (s.dropped() != 0) {
    std::fprintf(stderr,
                 "[profiler] %llu records were dropped: a thread's buffer was full "
                 "(MPSRT_PROFILE_RECORDS=%llu per thread); raise it for complete traces\n",
                 static_cast<unsigned long long>(s.dropped()),
                 static_cast<unsigned long long>(g_capacity.load()));
  }
  std::fflush(stderr);
}

/// Starts a session with `flags` and what the runtime's options add (session_mutex() held);
/// the counters start at the open devices' current levels.
void begin_locked(Runtime& rt, uint32_t flags) {
  const Options& o = rt.options();
  if ((o.trace_signposts & kTraceWaitUntilCompleted) != 0) flags |= kWait;
  if ((o.trace_signposts & kTraceIncludeSchedule) != 0) flags |= kSchedule;
  begin_session_locked({flags, o.profile_records, o.log_profile_info});
  for (DeviceContext* d : rt.open_devices()) {
    d->allocator().locked([&](const auto&) { d->allocator_trace().sample(); });
  }
}

void report_at_exit() {
  std::lock_guard<std::mutex> lock(session_mutex());
  if (flags() == 0) return;
  g_flags.store(0);
  print_statistics_locked({});
}

}  // namespace

void start_from_options(Runtime& rt) {
  const Options& o = rt.options();
  if (o.trace_signposts == 0) return;
  uint32_t modes = 0;
  if ((o.trace_signposts & (kTraceAllIntervals | kTraceUseIntervals)) != 0) modes |= kIntervals;
  if ((o.trace_signposts & (kTraceAllEvents | kTraceUseEvents)) != 0) modes |= kEvents;
  if (modes == 0) modes = kIntervals;
  std::lock_guard<std::mutex> lock(session_mutex());
  if (flags() != 0) return;
  begin_locked(rt, modes);
  g_env_session = true;
  if (!g_exit_report) {
    g_exit_report = true;
    std::atexit(report_at_exit);
  }
}

void reset() {
  std::lock_guard<std::mutex> lock(session_mutex());
  g_flags.store(0);
  clear_thread_ranges();
}

}  // namespace mpsrt::detail::prof

namespace mpsrt::profiler {

using detail::Runtime;
namespace prof = detail::prof;

void start(unsigned modes, bool wait_until_completed) {
  if (modes == 0 || modes > (kInterval | kEvent)) {
    detail::throw_invalid(
        "[profiler] start: modes must combine kInterval (1) and kEvent (2), got " +
        std::to_string(modes));
  }
  Runtime& rt = Runtime::get();
  std::lock_guard<std::mutex> lock(prof::session_mutex());
  if (prof::flags() != 0) {
    detail::throw_error(std::string("[profiler] start: a session is already running") +
                        (prof::g_env_session ? " (started by MPSRT_TRACE_SIGNPOSTS)" : "") +
                        "; stop() it first");
  }
  prof::g_env_session = false;
  prof::begin_locked(rt, modes | (wait_until_completed ? prof::kWait : 0u));
}

void stop() {
  std::lock_guard<std::mutex> lock(prof::session_mutex());
  if (prof::flags() == 0) return;
  prof::g_flags.store(0, std::memory_order_release);
  Runtime& rt = Runtime::get();
  // The work profiled so far completes now, so that its device intervals are in the session.
  for (detail::DeviceContext* d : rt.open_devices()) d->wait_idle();
  prof::print_statistics_locked(prof::device_names(rt));
}

bool is_active() noexcept {
  return prof::flags() != 0;
}

TraceSummary export_trace(const std::string& path) {
  std::lock_guard<std::mutex> lock(prof::session_mutex());
  return prof::write_trace_json(prof::snapshot(prof::device_names(Runtime::get())), path);
}

std::string statistics() {
  std::lock_guard<std::mutex> lock(prof::session_mutex());
  return prof::format_statistics(prof::snapshot(prof::device_names(Runtime::get())), 0);
}

}  // namespace mpsrt::profiler
