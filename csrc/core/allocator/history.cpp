#include "core/allocator/history.h"

#include <chrono>

namespace mpsrt::detail {

void History::push(AllocAction action, const AllocEvent& e, int64_t time_us) {
  if ((skip_ & action_bit(action)) != 0) return;
  TraceEntry t;
  t.action = action;
  t.address = e.address;
  t.size = e.size;
  t.stream = e.stream;
  t.time_us = time_us;
  if (with_frames_ && e.context != nullptr) t.frames = *e.context;
  entries_.push_back(std::move(t));
  while (entries_.size() > max_entries_) entries_.pop_front();
}

void History::on_event(const AllocEvent& e) {
  if (!enabled_) return;
  switch (e.action) {
    case AllocAction::Retry:
    case AllocAction::EmptyCache:
    case AllocAction::SyncAllStreams:
    case AllocAction::FreeCompleted:
      return;
    default:
      break;
  }
  const int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  push(e.action, e, now);
  // Frees are stream-ordered: the block is the cache's once requested, so the completion is
  // recorded with the request (torch.cuda records it when the block's events complete).
  if (e.action == AllocAction::FreeRequested) push(AllocAction::FreeCompleted, e, now);
}

void History::configure(bool enabled, size_t max_entries, HistoryContext context, uint32_t skip,
                        bool clear) {
  enabled_ = enabled;
  with_frames_ = context == HistoryContext::Alloc || context == HistoryContext::All;
  skip_ = skip;
  max_entries_ = max_entries == 0 ? SIZE_MAX : max_entries;
  if (!enabled_ || clear) entries_.clear();
  while (entries_.size() > max_entries_) entries_.pop_front();
}

}  // namespace mpsrt::detail
