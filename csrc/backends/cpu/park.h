// Spin briefly, then park: the hand-off primitive of the cpu backend.
//
// Measured on the 2-vCPU development VM: waking a parked thread on the other core costs
// ~90 us (the idle vCPU is halted by the host), a spinning hand-off ~0.4 us. So a waiter
// first spins (pause loop, checking its predicate) for up to kPureSpinNs, then keeps checking
// between sched_yield() calls until `spin_ns`, then parks on a futex (Linux) or a condition
// variable (elsewhere). The yields matter when the waiter and the thread it waits for share a
// CPU: a pure spin would burn the time slice the other thread needs (~100 us per hand-off). A
// notifier pays one atomic increment plus one load; the futex wake syscall happens only when
// somebody is parked.
#pragma once

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace mpsrt::cpu {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

inline int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// A word that waiters park on and notifiers bump. The predicate carries the real state.
class ParkWord {
 public:
  static constexpr int64_t kPureSpinNs = 2000;

  /// Waits until pred() is true: spins for spin_ns, then parks. timeout_ns < 0: no timeout.
  /// Returns pred() at the end (false only on timeout).
  template <class Pred>
  bool wait(Pred&& pred, int64_t spin_ns, int64_t timeout_ns) {
    if (pred()) return true;
    const int64_t start = now_ns();
    // Saturating: a timeout near INT64_MAX must not overflow into the past.
    const int64_t deadline =
        (timeout_ns < 0 || timeout_ns > INT64_MAX - start) ? INT64_MAX : start + timeout_ns;
    const int64_t spin_end = start + (spin_ns < deadline - start ? spin_ns : deadline - start);
    const int64_t pure_end = spin_end - start < kPureSpinNs ? spin_end : start + kPureSpinNs;
    for (unsigned i = 1;; ++i) {
      cpu_relax();
      if (pred()) return true;
      if ((i & 31) == 0 && now_ns() >= pure_end) break;
    }
    while (now_ns() < spin_end) {
      std::this_thread::yield();
      if (pred()) return true;
    }
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    bool ok = true;
    for (;;) {
      const uint32_t seen = word_.load(std::memory_order_seq_cst);
      if (pred()) break;
      const int64_t now = now_ns();
      if (now >= deadline) {
        ok = pred();
        break;
      }
      park(seen, deadline == INT64_MAX ? -1 : deadline - now);
    }
    waiters_.fetch_sub(1, std::memory_order_relaxed);
    return ok;
  }

  /// Call after changing the state a predicate reads (with a seq_cst store or RMW).
  /// Cost when nobody is parked: one load. A waiter registers itself before its last check of
  /// the predicate, so either it sees the new state or this call sees it and bumps the word
  /// (which makes a futex wait that is about to start return at once).
  void notify() noexcept {
    if (waiters_.load(std::memory_order_seq_cst) != 0) {
      word_.fetch_add(1, std::memory_order_seq_cst);
      wake();
    }
  }

 private:
#if defined(__linux__)
  void park(uint32_t seen, int64_t timeout_ns) noexcept {
    struct timespec ts;
    struct timespec* tsp = nullptr;
    if (timeout_ns >= 0) {
      ts.tv_sec = static_cast<time_t>(timeout_ns / 1000000000);
      ts.tv_nsec = static_cast<long>(timeout_ns % 1000000000);
      tsp = &ts;
    }
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAIT_PRIVATE, seen, tsp, nullptr,
            0);
  }
  void wake() noexcept {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
            nullptr, 0);
  }
#else
  void park(uint32_t seen, int64_t timeout_ns) {
    std::unique_lock<std::mutex> lock(mu_);
    auto changed = [&] { return word_.load(std::memory_order_seq_cst) != seen; };
    if (timeout_ns < 0) {
      cv_.wait(lock, changed);
    } else {
      cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), changed);
    }
  }
  void wake() {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
#endif
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word must be 32 bits");
  std::atomic<uint32_t> word_{0};
  std::atomic<uint32_t> waiters_{0};
};

}  // namespace mpsrt::cpu
