// The process-wide runtime: options, the active backend and its devices, opened lazily.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/backend.h"
#include "core/options.h"
#include "mpsrt/device.h"

namespace mpsrt::detail {

class StreamImpl;
class CachingAllocator;
class MemoryStats;
class History;
class DebugLog;
inline int& current_device_slot() noexcept;

/// One open device: the backend device and the core state that belongs to it.
class DeviceContext {
 public:
  DeviceContext(int index, std::unique_ptr<backend::Device> dev, const Options& options);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int index() const noexcept { return index_; }
  backend::Device& backend_device() noexcept { return *dev_; }
  DeviceProperties properties(const char* backend_name) const;
  StreamImpl& default_stream() noexcept { return *default_stream_; }
  /// Waits for every stream of the device; rethrows the first stream error.
  void synchronize();
  /// Waits for every stream without consuming errors.
  void wait_idle();
  CachingAllocator& allocator() noexcept { return *allocator_; }
  MemoryStats& stats() noexcept { return *stats_; }
  History& history() noexcept { return *history_; }

 private:
  int index_;
  std::unique_ptr<backend::Device> dev_;
  std::unique_ptr<StreamImpl> default_stream_;
  std::unique_ptr<MemoryStats> stats_;
  std::unique_ptr<History> history_;
  std::unique_ptr<DebugLog> debug_log_;
  std::unique_ptr<CachingAllocator> allocator_;
};

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

 private:
  explicit Runtime(Options options);
  ~Runtime();
  static Runtime& init_slow();
  [[noreturn]] MPSRT_COLD void bad_index(int index) const;
  DeviceContext& open_device(int index);

  static std::atomic<Runtime*> instance_;
  Options options_;
  backend::Backend* backend_ = nullptr;
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
