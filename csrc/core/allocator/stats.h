// torch.cuda-style memory statistics, kept by observing allocator events.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "core/allocator/events.h"

namespace mpsrt::detail {

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;  // total ever added
  int64_t freed = 0;      // total ever removed
  void add(int64_t n) {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void sub(int64_t n) {
    current -= n;
    freed += n;
  }
  void reset_accumulated() {
    allocated = 0;
    freed = 0;
  }
};

/// Index 0: all; 1: small pool; 2: large pool (large and huge heaps, as torch.cuda's names).
using StatArray = std::array<Stat, 3>;

class MemoryStats final : public AllocatorObserver {
 public:
  void on_event(const AllocEvent& e) override;
  /// Call under the allocator's lock (CachingAllocator::locked).
  void reset_peak();
  /// torch.cuda's resetAccumulatedStats: zeroes every stat's allocated/freed totals and the
  /// num_* counters. Call under the allocator's lock.
  void reset_accumulated();
  /// torch.cuda's key names; inactive split figures come from a walk of the heaps.
  std::map<std::string, int64_t> to_map(const StatArray& inactive_split_bytes,
                                        const StatArray& inactive_split) const;

  StatArray allocated_bytes, reserved_bytes, requested_bytes, allocation, segment;
  int64_t num_alloc_retries = 0;
  int64_t num_ooms = 0;
  int64_t num_device_alloc = 0;
  int64_t num_device_free = 0;
  int64_t num_empty_cache = 0;
  int64_t num_sync_all_streams = 0;
};

}  // namespace mpsrt::detail
