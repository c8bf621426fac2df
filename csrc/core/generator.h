// Generator state: (seed, offset) under a lock; ops reserve their Philox blocks at encode time.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>

#include "mpsrt/generator.h"

namespace mpsrt::detail {

/// A seed from the OS's entropy source.
uint64_t nondeterministic_seed();

class GeneratorImpl {
 public:
  explicit GeneratorImpl(uint64_t seed, uint64_t offset = 0) : seed_(seed), offset_(offset) {}
  /// (seed, offset), read together under the lock.
  std::pair<uint64_t, uint64_t> seed_and_offset() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {seed_, offset_};
  }
  void manual_seed(uint64_t seed) {
    std::lock_guard<std::mutex> lock(mu_);
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seed_;
  }
  uint64_t offset() const {
    std::lock_guard<std::mutex> lock(mu_);
    return offset_;
  }
  void set_offset(uint64_t o) {
    std::lock_guard<std::mutex> lock(mu_);
    offset_ = o;
  }
  /// (seed, first block) for an op of `words` 32-bit words; the offset moves past them.
  /// Cost: one short lock.
  std::pair<uint64_t, uint64_t> reserve(uint64_t words);
  RngState state() const;
  void set_state(const uint8_t* data, size_t size);

 private:
  mutable std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

}  // namespace mpsrt::detail
