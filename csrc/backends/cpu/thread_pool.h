// Helper threads that split one large kernel across the cores (fills, copies, RNG).
//
// run(n, fn) calls fn(0..n-1) on the calling thread and on the helpers, returning when all are
// done. Each helper has its own slot with a small state machine (idle -> posted -> taken ->
// done, tagged by job generation) and its own park word, so a helper that is slow to wake
// (a parked thread costs ~90 us to wake on this VM) is simply cancelled: the caller claims
// the work itself and waits only for helpers that actually took the job.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/cpu/park.h"

namespace mpsrt::cpu {

class ThreadPool {
 public:
  /// helpers: extra threads (0: run() is serial). spin_ns: how long idle helpers spin.
  ThreadPool(int helpers, int64_t spin_ns);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int helpers() const noexcept { return static_cast<int>(slots_.size()); }

  /// Runs fn(i) for every i in [0, n). When another caller holds the pool, runs serially.
  template <class F>
  void run(int n, F&& fn) {
    if (n <= 0) return;
    std::unique_lock<std::mutex> lock(run_mu_, std::try_to_lock);
    if (n == 1 || slots_.empty() || !lock.owns_lock()) {
      for (int i = 0; i < n; ++i) fn(i);
      return;
    }
    Job job;
    job.n = n;
    job.ctx = &fn;
    job.call = [](void* ctx, int i) { (*static_cast<F*>(ctx))(i); };
    run_job(job);
  }

 private:
  struct Job {
    int n = 0;
    void* ctx = nullptr;
    void (*call)(void*, int) = nullptr;
    std::atomic<int> next{0};
  };
  enum Phase : uint64_t { kIdle = 0, kPosted = 1, kTaken = 2, kDone = 3 };
  struct alignas(64) Slot {
    std::atomic<uint64_t> state{0};  // generation << 2 | phase
    Job* job = nullptr;
    ParkWord park;
    std::thread thread;
  };

  void run_job(Job& job);
  static void work(Job& job);
  void helper_loop(Slot& slot);

  std::mutex run_mu_;
  uint64_t generation_ = 0;
  std::atomic<bool> stop_{false};
  int64_t spin_ns_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace mpsrt::cpu
