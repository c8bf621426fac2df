// A test-and-test-and-set lock for short critical sections on hot paths (the allocator's
// cache hit). Uncontended: one atomic exchange to lock and one store to unlock, about half
// the cost of a std::mutex pair. Contended: spins briefly, then yields the CPU.
#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace mpsrt::detail {

class SpinLock {
 public:
  void lock() noexcept {
    for (unsigned spins = 0;;) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 128) {
#if defined(__x86_64__) || defined(__i386__)
          _mm_pause();
#endif
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept {
    locked_.store(false, std::memory_order_release);
  }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace mpsrt::detail
