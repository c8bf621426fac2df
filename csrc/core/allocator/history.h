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

/// The bit of an action in History's skip mask.
constexpr uint32_t action_bit(AllocAction a) noexcept {
  return uint32_t(1) << static_cast<unsigned>(a);
}

class History final : public AllocatorObserver {
 public:
  void on_event(const AllocEvent& e) override;
  /// Call under the allocator's lock. `context` is torch.cuda's level: trace entries keep
  /// their frames from HistoryContext::Alloc on; `skip` holds action_bit()s not recorded;
  /// the entries are dropped when recording stops or `clear` is set.
  void configure(bool enabled, size_t max_entries, HistoryContext context, uint32_t skip,
                 bool clear);
  bool enabled() const noexcept { return enabled_; }
  const std::deque<TraceEntry>& entries() const noexcept { return entries_; }
  void clear() { entries_.clear(); }

 private:
  void push(AllocAction action, const AllocEvent& e, int64_t time_us);

  bool enabled_ = false;
  bool with_frames_ = false;
  uint32_t skip_ = 0;
  size_t max_entries_ = SIZE_MAX;
  std::deque<TraceEntry> entries_;
};

}  // namespace mpsrt::detail
