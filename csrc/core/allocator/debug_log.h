// MPSRT_DEBUG_ALLOCATOR: an observer that logs allocator events to stderr. Registered only
// when the variable is set, so it costs nothing otherwise and never changes behaviour.
//   1  heaps obtained from and returned to the backend, out-of-memory events
//   2  frees (blocks returning to the cache)
//   4  allocations
//   8  large only: skip events of the small pool
#pragma once

#include <cstdint>

#include "core/allocator/events.h"

namespace mpsrt::detail {

class DebugLog final : public AllocatorObserver {
 public:
  DebugLog(int device, uint32_t flags) : device_(device), flags_(flags) {}
  void on_event(const AllocEvent& e) override;

 private:
  int device_;
  uint32_t flags_;
};

}  // namespace mpsrt::detail
