#include "backends/cpu/thread_pool.h"

#if defined(__linux__)
#include <pthread.h>
#endif

#include <string>

namespace mpsrt::cpu {

ThreadPool::ThreadPool(int helpers, int64_t spin_ns) : spin_ns_(spin_ns) {
  for (int i = 0; i < helpers; ++i) slots_.push_back(std::make_unique<Slot>());
  for (int i = 0; i < helpers; ++i) {
    Slot* s = slots_[static_cast<size_t>(i)].get();
    s->thread = std::thread([this, s, i] {
#if defined(__linux__)
      pthread_setname_np(pthread_self(), ("mpsrt-pool" + std::to_string(i)).c_str());
#else
      (void)i;
#endif
      helper_loop(*s);
    });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  for (auto& s : slots_) {
    s->park.notify();
    s->thread.join();
  }
}

void ThreadPool::work(Job& job) {
  for (int i = job.next.fetch_add(1, std::memory_order_relaxed); i < job.n;
       i = job.next.fetch_add(1, std::memory_order_relaxed)) {
    job.call(job.ctx, i);
  }
}

void ThreadPool::run_job(Job& job) {
  const uint64_t g = ++generation_;
  for (auto& s : slots_) {
    s->job = &job;
    s->state.store(g << 2 | kPosted, std::memory_order_release);
    s->park.notify();
  }
  work(job);
  // Cancel helpers that have not taken the job; wait for those that have.
  for (auto& s : slots_) {
    uint64_t expected = g << 2 | kPosted;
    if (s->state.compare_exchange_strong(expected, g << 2 | kIdle, std::memory_order_acq_rel)) {
      continue;
    }
    while (s->state.load(std::memory_order_acquire) != (g << 2 | kDone)) cpu_relax();
  }
}

void ThreadPool::helper_loop(Slot& slot) {
  for (;;) {
    slot.park.wait(
        [&] {
          return stop_.load(std::memory_order_acquire) ||
                 (slot.state.load(std::memory_order_acquire) & 3) == kPosted;
        },
        spin_ns_, -1);
    if (stop_.load(std::memory_order_acquire)) return;
    uint64_t st = slot.state.load(std::memory_order_acquire);
    if ((st & 3) != kPosted) continue;
    const uint64_t g = st >> 2;
    if (!slot.state.compare_exchange_strong(st, g << 2 | kTaken, std::memory_order_acq_rel)) {
      continue;  // cancelled by the caller
    }
    work(*slot.job);
    slot.state.store(g << 2 | kDone, std::memory_order_release);
  }
}

}  // namespace mpsrt::cpu
