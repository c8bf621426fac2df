// Tests of the cpu backend's helper threads (backends/cpu/thread_pool.h): every index runs
// exactly once, run() returns only when all are done, concurrent callers stay correct.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "backends/cpu/thread_pool.h"

namespace {

using mpsrt::cpu::ThreadPool;
using namespace std::chrono_literals;

// Runs n indices and checks that each ran exactly once by the time run() returned.
::testing::AssertionResult runs_each_index_once(ThreadPool& pool, int n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n > 0 ? n : 1));
  for (auto& h : hits) h.store(0);
  pool.run(n, [&](int i) {
    if (i >= 0 && i < n) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (int i = 0; i < n; ++i) {
    const int h = hits[static_cast<size_t>(i)].load();
    if (h != 1) {
      return ::testing::AssertionFailure()
             << "index " << i << " of " << n << " ran " << h << " times";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(ThreadPool, EveryIndexRunsExactlyOnce) {
  for (int helpers : {0, 1, 3}) {
    for (int64_t spin_ns : {int64_t(0), int64_t(50000)}) {
      SCOPED_TRACE("helpers=" + std::to_string(helpers) + " spin_ns=" + std::to_string(spin_ns));
      ThreadPool pool(helpers, spin_ns);
      EXPECT_EQ(pool.helpers(), helpers);
      for (int n : {0, 1, 2, 3, 7, 64, 1000}) {
        for (int rep = 0; rep < 20; ++rep) ASSERT_TRUE(runs_each_index_once(pool, n)) << "n=" << n;
      }
    }
  }
}

TEST(ThreadPool, HelpersShareTheWork) {
  ThreadPool pool(3, 1'000'000);
  std::mutex mu;
  std::set<std::thread::id> threads;
  pool.run(64, [&](int) {
    std::this_thread::sleep_for(1ms);
    std::lock_guard<std::mutex> lock(mu);
    threads.insert(std::this_thread::get_id());
  });
  EXPECT_GE(threads.size(), 2u) << "64 ms of work ran on one thread only";
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 1u) << "the caller did not take part";
}

TEST(ThreadPool, ConcurrentCallersEachGetTheirWholeJob) {
  ThreadPool pool(3, 0);
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int rep = 0; rep < 200; ++rep) {
        if (!runs_each_index_once(pool, 17 + t * 5)) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPool, DestroyingAnIdlePoolIsPrompt) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    auto pool = std::make_unique<ThreadPool>(3, 0);  // helpers park at once
    ASSERT_TRUE(runs_each_index_once(*pool, 10));
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

}  // namespace
