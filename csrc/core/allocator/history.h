// Allocation history for snapshots (PyTorch memory-visualizer format), kept by observing
// allocator events into a bounded ring.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

#include "core/allocator/events.h"

namespace mpsrt::detail {

struct TraceEntry {
  AllocAction action;
  uint64_t address = 0;
  size_t size = 0;
  int64_t stream = 0;
  int64_t time_us = 0;  // microseconds since the Unix epoch
  ContextPtr frames;
};

class History final : public AllocatorObserver {
 public:
  void on_event(const AllocEvent& e) override;
  /// Call under the allocator's lock.
  void configure(bool enabled, size_t max_entries);
  bool enabled() const noexcept { return enabled_; }
  const std::deque<TraceEntry>& entries() const noexcept { return entries_; }
  void clear() { entries_.clear(); }

 private:
  bool enabled_ = false;
  size_t max_entries_ = SIZE_MAX;
  std::deque<TraceEntry> entries_;
};

}  // namespace mpsrt::detail
