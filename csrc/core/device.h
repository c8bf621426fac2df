// One open device: the backend device and the core state that belongs to it (its streams,
// events, caching allocator and the allocator's observers, staging pool and default
// generator). The runtime (core/runtime.h) opens devices; the public device API
// (mpsrt/device.h) is in device_api.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "backends/backend.h"
#include "core/options.h"
#include "core/stream.h"
#include "mpsrt/device.h"

namespace mpsrt::detail {

class CachingAllocator;
class AllocDevice;
class EventPool;
class MemoryStats;
class History;
class DebugLog;
class GeneratorImpl;
class StagingPool;
namespace prof {
class AllocatorTrace;
}

/// 0 in a process that did not fork; bumped in a child process after fork(). Objects of a
/// runtime made before the fork (Buffers, Streams, Events) are stale in the child: their
/// threads stayed in the parent. Cost: one relaxed load.
extern std::atomic<uint64_t> g_fork_generation;
inline uint64_t fork_generation() noexcept {
  return g_fork_generation.load(std::memory_order_relaxed);
}
/// Throws mpsrt::Error: `what` belongs to the runtime of the parent process.
[[noreturn]] MPSRT_COLD void throw_forked(const char* what);

class DeviceContext {
 public:
  DeviceContext(int index, std::unique_ptr<backend::Device> dev, const Options& options);
  /// Waits for the device's work, then gives its memory back to the backend.
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int index() const noexcept { return index_; }
  /// True in a child process forked after this device was opened (see fork_generation()).
  bool stale() const noexcept { return fork_generation_ != fork_generation(); }
  backend::Device& backend_device() noexcept { return *dev_; }
  DeviceProperties properties(const char* backend_name) const;

  /// The device's streams: default, pool, each thread's current one.
  DeviceStreams& streams() noexcept { return streams_; }
  /// The pool of timeline events behind the device's Events.
  EventPool& events() noexcept { return *events_; }
  /// Waits for every stream of the device; rethrows the first stream error.
  void synchronize() { streams_.synchronize(); }
  /// Waits for every stream without consuming errors.
  void wait_idle() { streams_.wait_idle(); }

  CachingAllocator& allocator() noexcept { return *allocator_; }
  /// The device's default generator, seeded nondeterministically when the device opens.
  const std::shared_ptr<GeneratorImpl>& default_generator() noexcept { return generator_; }
  MemoryStats& stats() noexcept { return *stats_; }
  History& history() noexcept { return *history_; }
  prof::AllocatorTrace& allocator_trace() noexcept { return *alloc_trace_; }
  /// The staging pool of host <-> device copies (used where the memory is not host-visible).
  StagingPool& staging() noexcept { return *staging_; }

 private:
  int index_;
  uint64_t fork_generation_ = fork_generation();
  std::unique_ptr<backend::Device> dev_;
  std::unique_ptr<EventPool> events_;
  DeviceStreams streams_;  // after dev_: its default stream opens a queue of dev_
  std::unique_ptr<MemoryStats> stats_;
  std::unique_ptr<History> history_;
  std::unique_ptr<DebugLog> debug_log_;
  std::unique_ptr<prof::AllocatorTrace> alloc_trace_;
  std::unique_ptr<AllocDevice> alloc_device_;  // this device as its allocator sees it
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<StagingPool> staging_;
  std::shared_ptr<GeneratorImpl> generator_;
};

}  // namespace mpsrt::detail
