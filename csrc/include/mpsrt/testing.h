// Hooks for mpsrt's own tests and benchmarks, beside the API rather than part of it (not in
// mpsrt.h): tearing the runtime down to start it again under other settings, and raw device
// memory straight from the backend for the benchmarks' C baselines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "mpsrt/api.h"

namespace mpsrt::testing {

/// Tears the runtime down, so that the next call starts it again and reads its settings from
/// `env` (nullptr: the process environment). Objects of the old runtime must be gone: throws
/// mpsrt::Error ("[runtime] ...") when a device still has live Buffers or Events, and leaves the
/// runtime as it was.
MPSRT_API void reset_runtime(const std::map<std::string, std::string>* env);

/// A heap of raw device memory from the backend, outside the caching allocator, driven
/// through the device's default stream. Its destructor waits for the device's work first.
class MPSRT_API RawHeap {
 public:
  /// nbytes of memory on `device` (-1: the current device). Throws mpsrt::Error (out of
  /// memory) when the backend refuses.
  RawHeap(size_t nbytes, int device = -1);
  ~RawHeap();
  RawHeap(const RawHeap&) = delete;
  RawHeap& operator=(const RawHeap&) = delete;

  size_t nbytes() const noexcept;
  /// The memory as the host sees it; throws mpsrt::Error when it is not host-visible.
  uint8_t* host() const;
  /// Encodes a fill of the whole heap (whole patterns) with the pattern of pattern_size bytes
  /// (1, 2, 4 or 8; anything else throws std::invalid_argument). Not waited for.
  void fill(uint64_t value, unsigned pattern_size = 1);
  /// Encodes a copy of src (of the same size; else std::invalid_argument). Not waited for.
  void copy_from(const RawHeap& src);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mpsrt::testing
