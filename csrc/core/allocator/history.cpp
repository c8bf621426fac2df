#include "core/allocator/history.h"

#include <chrono>

namespace mpsrt::detail {

void History::on_event(const AllocEvent& e) {
  if (!enabled_) return;
  if (e.action == AllocAction::Retry || e.action == AllocAction::EmptyCache) return;
  TraceEntry t;
  t.action = e.action;
  t.address = e.address;
  t.size = e.size;
  t.stream = e.stream;
  t.time_us = std::chrono::duration_cast<std::chrono::microseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  if (e.context != nullptr) t.frames = *e.context;
  entries_.push_back(std::move(t));
  while (entries_.size() > max_entries_) entries_.pop_front();
}

void History::configure(bool enabled, size_t max_entries) {
  enabled_ = enabled;
  max_entries_ = max_entries == 0 ? SIZE_MAX : max_entries;
  if (!enabled_) entries_.clear();
  while (entries_.size() > max_entries_) entries_.pop_front();
}

}  // namespace mpsrt::detail
