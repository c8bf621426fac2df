// The process-wide runtime: options, the active backend (chosen, then given its settings)
// and its devices (core/device.h), opened lazily; fork handling.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/device.h"
#include "core/options.h"

namespace mpsrt::detail {

inline int& current_device_slot() noexcept;

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
  /// How many times reset() has run: what a client caches of the runtime (its devices' facts)
  /// holds while this stays the same. Cost: one load.
  static uint64_t generation() noexcept { return generation_.load(std::memory_order_acquire); }

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
  friend class Quiet;  // reads the running runtime without starting one
  explicit Runtime(Options options);
  ~Runtime();
  static Runtime& init_slow();
  [[noreturn]] MPSRT_COLD void bad_index(int index) const;
  DeviceContext& open_device(int index);

  static std::atomic<Runtime*> instance_;
  static std::atomic<uint64_t> generation_;
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
