// MPSRT_DEBUG_ALLOCATOR: an observer that logs allocator events to stderr. Registered only
// when the variable is set, so it costs nothing otherwise and never changes behaviour.
#pragma once

#include <cstdint>

#include "core/allocator/events.h"

namespace mpsrt::detail {

/// MPSRT_DEBUG_ALLOCATOR bits (the options table's help text says the same).
enum DebugAllocatorBits : uint32_t {
  kDebugHeaps = 1,      // heaps obtained from and returned to the backend, out-of-memory events
  kDebugFrees = 2,      // frees (blocks returning to the cache)
  kDebugAllocs = 4,     // allocations
  kDebugLargeOnly = 8,  // skip the events of the small pool (large and huge pools only)
};

class DebugLog final : public AllocatorObserver {
 public:
  DebugLog(int device, uint32_t flags) : device_(device), flags_(flags) {}
  void on_event(const AllocEvent& e) override;

 private:
  int device_;
  uint32_t flags_;
};

}  // namespace mpsrt::detail
