#include "core/allocator/debug_log.h"

#include <cinttypes>
#include <cstdio>

namespace mpsrt::detail {

void DebugLog::on_event(const AllocEvent& e) {
  if ((flags_ & 8u) != 0 && e.pool == 0) return;
  const char* pool = e.pool == 0 ? "small" : (e.pool == 1 ? "large" : "huge");
  switch (e.action) {
    case AllocAction::Alloc:
      if (flags_ & 4u) {
        std::fprintf(stderr,
                     "[allocator] device %d: alloc %zu bytes (block %zu, %s pool) at 0x%" PRIx64
                     " on stream %" PRId64 "\n",
                     device_, e.requested, e.size, pool, e.address, e.stream);
      }
      break;
    case AllocAction::FreeRequested:
      if (flags_ & 2u) {
        std::fprintf(
            stderr, "[allocator] device %d: free %zu bytes (block %zu, %s pool) at 0x%" PRIx64 "\n",
            device_, e.requested, e.size, pool, e.address);
      }
      break;
    case AllocAction::SegmentAlloc:
    case AllocAction::SegmentFree:
      if (flags_ & 1u) {
        std::fprintf(stderr,
                     "[allocator] device %d: %s heap of %zu bytes (%s pool) at 0x%" PRIx64 "\n",
                     device_, e.action == AllocAction::SegmentAlloc ? "new" : "released", e.size,
                     pool, e.address);
      }
      break;
    case AllocAction::Oom:
      if (flags_ & 1u) {
        std::fprintf(stderr, "[allocator] device %d: out of memory for %zu bytes (%s pool)\n",
                     device_, e.size, pool);
      }
      break;
    case AllocAction::Retry:
    case AllocAction::EmptyCache:
    case AllocAction::SyncAllStreams:
    case AllocAction::FreeCompleted:
      break;
  }
}

}  // namespace mpsrt::detail
