// The process-wide runtime: options, the active backend and its devices, opened lazily.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/options.h"
#include "mpsrt/device.h"

namespace mpsrt::detail {

class StreamImpl;
class CachingAllocator;
class PoolDevice;
class MemoryStats;
class History;
class DebugLog;
class GeneratorImpl;
class StagingPool;
namespace prof {
class AllocatorTrace;
}
inline int& current_device_slot() noexcept;

/// 0 in a process that did not fork; bumped in a child process after fork(). Objects of a
/// runtime made before the fork (Buffers, Streams, Events) are stale in the child: their
/// threads stayed in the parent. Cost: one relaxed load.
extern std::atomic<uint64_t> g_fork_generation;
inline uint64_t fork_generation() noexcept {
  return g_fork_generation.load(std::memory_order_relaxed);
}
/// Throws mpsrt::Error: `what` belongs to the runtime of the parent process.
[[noreturn]] MPSRT_COLD void throw_forked(const char* what);

/// A backend timeline event with the bookkeeping that lets it be reused: values only grow
/// (a late signal from a previous owner can never complete a newer record), and the
/// timestamp slot the device writes into outlives every command that refers to it.
struct PooledEvent {
  std::unique_ptr<backend::TimelineEvent> event;
  uint64_t last_value = 0;    // highest value ever recorded (guarded by the owner)
  uint64_t timestamp_ns = 0;  // written by the device at the last timed record
};

/// One open device: the backend device and the core state that belongs to it.
class DeviceContext {
 public:
  DeviceContext(int index, std::unique_ptr<backend::Device> dev, const Options& options);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int index() const noexcept { return index_; }
  /// True in a child process forked after this device was opened (see fork_generation()).
  bool stale() const noexcept { return fork_generation_ != fork_generation(); }
  backend::Device& backend_device() noexcept { return *dev_; }
  DeviceProperties properties(const char* backend_name) const;
  StreamImpl& default_stream() noexcept { return *default_stream_; }
  /// A stream from the device's pool, round-robin within its priority class (as torch.cuda):
  /// priority < 0 high, 0 normal, > 0 low. Pool streams are created on first use and live as
  /// long as the device.
  StreamImpl& pool_stream(int priority);
  /// The calling thread's current stream on this device (the default stream until set).
  StreamImpl& current_stream() noexcept;
  /// Makes s the calling thread's current stream on this device; returns the previous one.
  StreamImpl& set_current_stream(StreamImpl& s) noexcept;
  /// Every stream created on the device, the default stream first.
  std::vector<StreamImpl*> streams();
  /// Waits for every stream of the device; rethrows the first stream error.
  void synchronize();
  /// Waits for every stream without consuming errors.
  void wait_idle();
  /// A timeline event from the device's pool. Pooled events live as long as the device, so a
  /// command still waiting on or signalling a released one stays safe.
  PooledEvent* acquire_event();
  void release_event(PooledEvent* e);
  /// Events acquired and not released (live Events of this device).
  size_t events_in_use();

  static constexpr int kPoolStreamsPerPriority = 8;
  static constexpr int kPriorityClasses = 3;
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
  std::unique_ptr<backend::Device> dev_;
  std::unique_ptr<StreamImpl> default_stream_;
  std::mutex streams_mu_;
  std::array<std::array<std::unique_ptr<StreamImpl>, kPoolStreamsPerPriority>, kPriorityClasses>
      pool_;
  std::array<std::atomic<uint32_t>, kPriorityClasses> pool_next_{};
  int64_t next_stream_id_ = 1;
  std::vector<StreamImpl*> all_streams_;  // guarded by streams_mu_
  std::mutex events_mu_;
  std::vector<std::unique_ptr<PooledEvent>> all_events_;
  std::vector<PooledEvent*> free_events_;
  uint64_t generation_;  // matches the thread-local current-stream table to this device
  uint64_t fork_generation_ = fork_generation();
  std::unique_ptr<MemoryStats> stats_;
  std::unique_ptr<History> history_;
  std::unique_ptr<DebugLog> debug_log_;
  std::unique_ptr<prof::AllocatorTrace> alloc_trace_;
  std::unique_ptr<PoolDevice> pool_device_;  // this device as its allocator sees it
  std::unique_ptr<CachingAllocator> allocator_;
  std::unique_ptr<StagingPool> staging_;
  std::shared_ptr<GeneratorImpl> generator_;
};

/// The built backends that work on this machine, best first: those with a hardware device in
/// the order given, then those whose devices are all software ones (Backend::software_only).
std::vector<backend::Backend*> preferred_backends(const std::vector<backend::Backend*>& all);

/// The backend the runtime uses, and a sentence saying why, for users.
struct BackendChoice {
  backend::Backend* backend = nullptr;
  std::string reason;
};
/// `wanted` is MPSRT_BACKEND ("" when unset: the first of preferred_backends(all)). Throws
/// std::invalid_argument for an unknown or unbuilt name, mpsrt::Error when the named backend
/// or every backend is unavailable.
BackendChoice choose_backend(const std::string& wanted, const std::vector<backend::Backend*>& all);

class Runtime {
 public:
  /// The runtime, initialised on first use. Throws std::invalid_argument for a bad option and
  /// mpsrt::Error when the chosen backend cannot start; the next call tries again.
  static Runtime& get() {
    Runtime* r = instance_.load(std::memory_order_acquire);
    return MPSRT_LIKELY(r != nullptr) ? *r : init_slow();
  }
  /// Tears the runtime down (waiting for all work) so that the next call re-initialises it,
  /// reading options from `env` (nullptr: the process environment). For tests and fork
  /// handling only: no object of the old runtime may be used afterwards.
  static void reset(const EnvLookup* env);

  const Options& options() const noexcept { return options_; }
  backend::Backend& backend() const noexcept { return *backend_; }
  /// Why backend() was chosen (see choose_backend).
  const std::string& backend_reason() const noexcept { return backend_reason_; }
  int device_count() const noexcept { return device_count_; }
  /// An index checked against device_count(); -1 means the calling thread's current device.
  int resolve(int index) const { return check(index == -1 ? current_device_slot() : index); }
  /// Throws std::invalid_argument unless 0 <= index < device_count().
  int check(int index) const {
    if (MPSRT_UNLIKELY(index < 0 || index >= device_count_)) bad_index(index);
    return index;
  }
  /// The device, opened on first use. index as in resolve().
  DeviceContext& device(int index) {
    const int i = resolve(index);
    DeviceContext* d = devices_[static_cast<size_t>(i)].load(std::memory_order_acquire);
    return MPSRT_LIKELY(d != nullptr) ? *d : open_device(i);
  }
  /// Opened devices only (for synchronize-all and teardown).
  std::vector<DeviceContext*> open_devices() const;

  // pthread_atfork handlers (registered once per process): the parent's runtime is left
  // behind in the child, where its threads do not exist, and a new one starts on first use.
  static void fork_prepare();
  static void fork_parent();
  static void fork_child();

 private:
  explicit Runtime(Options options);
  ~Runtime();
  static Runtime& init_slow();
  [[noreturn]] MPSRT_COLD void bad_index(int index) const;
  DeviceContext& open_device(int index);

  static std::atomic<Runtime*> instance_;
  Options options_;
  backend::Backend* backend_ = nullptr;
  std::string backend_reason_;
  int device_count_ = 0;
  std::unique_ptr<std::atomic<DeviceContext*>[]> devices_;
  mutable std::mutex open_mu_;
};

/// The calling thread's current device index (not validated).
inline int& current_device_slot() noexcept {
  thread_local int index = 0;
  return index;
}

}  // namespace mpsrt::detail
