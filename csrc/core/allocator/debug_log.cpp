#include "core/allocator/debug_log.h"

#include <cinttypes>
#include <cstdio>

namespace mpsrt::detail {

void DebugLog::on_event(const AllocEvent& e) {
  if ((flags_ & kDebugLargeOnly) != 0 && e.pool == Pool::Small) return;
  const char* pool = pool_name(e.pool);
  switch (e.action) {
    case AllocAction::Alloc:
      if ((flags_ & kDebugAllocs) == 0) return;
      std::fprintf(stderr,
                   "[allocator] device %d: alloc %zu bytes (block %zu, %s pool) at 0x%" PRIx64
                   " on stream %" PRId64 "\n",
                   device_, e.requested, e.size, pool, e.address, e.stream);
      return;
    case AllocAction::FreeRequested:
      if ((flags_ & kDebugFrees) == 0) return;
      std::fprintf(stderr,
                   "[allocator] device %d: free %zu bytes (block %zu, %s pool) at 0x%" PRIx64 "\n",
                   device_, e.requested, e.size, pool, e.address);
      return;
    case AllocAction::SegmentAlloc:
    case AllocAction::SegmentFree:
      if ((flags_ & kDebugHeaps) == 0) return;
      std::fprintf(stderr,
                   "[allocator] device %d: %s heap of %zu bytes (%s pool) at 0x%" PRIx64 "\n",
                   device_, e.action == AllocAction::SegmentAlloc ? "new" : "released", e.size,
                   pool, e.address);
      return;
    case AllocAction::Oom:
      if ((flags_ & kDebugHeaps) == 0) return;
      std::fprintf(stderr, "[allocator] device %d: out of memory for %zu bytes (%s pool)\n",
                   device_, e.size, pool);
      return;
    case AllocAction::Retry:
    case AllocAction::EmptyCache:
    case AllocAction::SyncAllStreams:
    case AllocAction::FreeCompleted:
      return;
  }
}

}  // namespace mpsrt::detail
