// Allocator events: statistics, history and the profiler are observers layered on these,
// not code inside the allocator's paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpsrt/allocator.h"

namespace mpsrt::detail {

/// The frames of the code that made an allocation (Python frames when recording asks).
using Context = StackFrames;
using ContextPtr = std::shared_ptr<const Context>;

/// The allocator's pools (core/allocator/caching_allocator.h: the size classes).
enum class Pool : uint8_t { Small = 0, Large = 1, Huge = 2 };
constexpr int kNumPools = 3;
/// "small", "large" or "huge" (snapshots, logs, messages).
constexpr const char* pool_name(Pool p) noexcept {
  switch (p) {
    case Pool::Small:
      return "small";
    case Pool::Large:
      return "large";
    case Pool::Huge:
      break;
  }
  return "huge";
}

enum class AllocAction : uint8_t {
  Alloc,           // a block handed out
  FreeRequested,   // the user freed it (stream-ordered: may still be in use)
  SegmentAlloc,    // a heap obtained from the backend
  SegmentFree,     // a heap returned to the backend
  Retry,           // the out-of-memory ladder went past "new heap"
  Oom,             // an allocation failed
  EmptyCache,      // empty_cache() ran
  SyncAllStreams,  // every stream of the device was waited for (empty_cache, OOM ladder)
  FreeCompleted,   // history only (never emitted): a freed block is reusable
};

struct AllocEvent {
  AllocAction action;
  Pool pool = Pool::Small;
  uint64_t address = 0;
  size_t size = 0;       // block or heap bytes
  size_t requested = 0;  // bytes asked for (Alloc / FreeRequested)
  int64_t stream = 0;    // stream id
  bool split = false;    // Alloc/FreeRequested: the heap holds other blocks too
  /// Who caused it, when history records stacks: the allocating call (Alloc, SegmentAlloc),
  /// the freeing call or else the allocating one (FreeRequested), the releasing call or else
  /// the segment's allocating one (SegmentFree).
  const ContextPtr* context = nullptr;
};

class AllocatorObserver {
 public:
  virtual ~AllocatorObserver() = default;
  /// Called under the allocator's lock: must be quick and must not call the allocator.
  virtual void on_event(const AllocEvent& e) = 0;
};

}  // namespace mpsrt::detail
