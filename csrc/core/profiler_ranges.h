// The profiler's open ranges (profiler_ranges.cpp: marks, ranges and host ops of
// mpsrt/profiler.h), as the rest of the profiler sees them.
#pragma once

#include <mutex>

namespace mpsrt::detail::prof {

/// Forgets the calling thread's open ranges (runtime reset).
void clear_thread_ranges();
/// The lock of the ranges range_start() opened: the fork handlers hold it across a fork.
std::mutex& async_ranges_mutex();

}  // namespace mpsrt::detail::prof
