// The profiler's allocator trace: an observer of one device's caching allocator that records
// allocations, frees, heap changes, out-of-memory and empty_cache as instants, each followed by
// a sample of the device's "allocated" and "reserved" counters.
#include "core/allocator/stats.h"
#include "core/profiler.h"
#include "core/profiler_records.h"
#include "core/profiler_session.h"

namespace mpsrt::detail::prof {

void AllocatorTrace::on_event(const AllocEvent& e) {
  if (MPSRT_LIKELY(flags() == 0)) return;
  Record r;
  r.begin = r.end = now_ns();
  r.a = e.size;
  r.b = e.address;
  r.device = static_cast<uint8_t>(device_);
  r.stream = static_cast<int32_t>(e.pool);
  bool counters = true;
  switch (e.action) {
    case AllocAction::Alloc:
      r.kind = Kind::Alloc;
      break;
    case AllocAction::FreeRequested:
      r.kind = Kind::Free;
      break;
    case AllocAction::SegmentAlloc:
      r.kind = Kind::SegmentAlloc;
      break;
    case AllocAction::SegmentFree:
      r.kind = Kind::SegmentFree;
      break;
    case AllocAction::Oom:
      r.kind = Kind::Oom;
      r.a = e.requested;
      counters = false;
      break;
    case AllocAction::EmptyCache:
      r.kind = Kind::EmptyCache;
      counters = false;
      break;
    case AllocAction::Retry:
    case AllocAction::SyncAllStreams:
    case AllocAction::FreeCompleted:
      return;
  }
  with_buffer([&](ThreadBuffer& t) {
    t.push_locked(r);
    if (counters) t.push_locked(counter_record(r.begin));
  });
}

void AllocatorTrace::sample() const {
  if (flags() != 0) push(counter_record(now_ns()));
}

Record AllocatorTrace::counter_record(int64_t at) const {
  Record c;
  c.begin = c.end = at;
  c.kind = Kind::Counter;
  c.device = static_cast<uint8_t>(device_);
  c.a = static_cast<uint64_t>(stats_.allocated_bytes[0].current);
  c.b = static_cast<uint64_t>(stats_.reserved_bytes[0].current);
  return c;
}

}  // namespace mpsrt::detail::prof
