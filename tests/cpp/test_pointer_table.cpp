// Tests of the PyTorch device glue's lock-free pointer table (csrc/torch/fallback/
// pointer_table.h): what the capturing CPU allocator keeps of each allocation in mpsrt memory.
// Every entry must be found exactly once, with its own value, however many are live (past the
// table's room they go to its overflow map) and whichever threads put and take them.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "torch/fallback/pointer_table.h"

namespace {

using Table = mpsrt::torch_glue::PointerTable<int, 64, 4>;

// Distinct 64-byte-aligned addresses, as allocations are.
std::vector<void*> addresses(size_t n, uintptr_t base = 0x10000) {
  std::vector<void*> out;
  for (size_t i = 0; i < n; ++i) out.push_back(reinterpret_cast<void*>(base + 64 * i));
  return out;
}

TEST(PointerTable, FindsEachEntryOnceWithItsValue) {
  Table t;
  std::vector<int> values(10);
  const auto ps = addresses(values.size());
  for (size_t i = 0; i < ps.size(); ++i) t.put(ps[i], &values[i]);
  EXPECT_EQ(t.take(reinterpret_cast<void*>(0x9990)), nullptr);  // never put
  for (size_t i = ps.size(); i-- > 0;) EXPECT_EQ(t.take(ps[i]), &values[i]) << i;
  for (void* p : ps) EXPECT_EQ(t.take(p), nullptr) << "taken twice";
}

TEST(PointerTable, MoreLiveEntriesThanSlotsOverflowAndAreAllFound) {
  Table t;
  std::vector<int> values(1000);
  const auto ps = addresses(values.size());
  for (size_t i = 0; i < ps.size(); ++i) t.put(ps[i], &values[i]);
  EXPECT_GE(t.spilled(), values.size() - 64);
  for (size_t i = 0; i < ps.size(); i += 2) EXPECT_EQ(t.take(ps[i]), &values[i]) << i;
  // Freed slots are used again; the overflow's entries are still found.
  std::vector<int> more(100);
  const auto qs = addresses(more.size(), 0x900000);
  for (size_t i = 0; i < qs.size(); ++i) t.put(qs[i], &more[i]);
  for (size_t i = 1; i < ps.size(); i += 2) EXPECT_EQ(t.take(ps[i]), &values[i]) << i;
  for (size_t i = 0; i < qs.size(); ++i) EXPECT_EQ(t.take(qs[i]), &more[i]) << i;
  EXPECT_EQ(t.spilled(), 0u);
}

TEST(PointerTable, ThreadsPuttingAndTakingTheirOwnAndEachOthersEntries) {
  // Four threads put entries; each entry is taken by the next thread (as memory one thread
  // allocated is freed by another), while the others keep putting and taking.
  constexpr int kThreads = 4;
  constexpr size_t kPerThread = 20000;
  auto t = std::make_unique<mpsrt::torch_glue::PointerTable<int, 256, 8>>();
  std::vector<std::vector<int>> values(kThreads, std::vector<int>(kPerThread));
  std::vector<std::vector<void*>> ps;
  for (int k = 0; k < kThreads; ++k) {
    ps.push_back(addresses(kPerThread, 0x100000 + static_cast<uintptr_t>(k) * 0x10000000));
  }
  std::vector<std::atomic<size_t>> put(kThreads);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&, k] {
      const int from = (k + kThreads - 1) % kThreads;  // takes what the previous thread put
      size_t taken = 0;
      for (size_t i = 0; i < kPerThread; ++i) {
        t->put(ps[k][i], &values[k][i]);
        put[k].store(i + 1, std::memory_order_release);
        while (taken < put[from].load(std::memory_order_acquire)) {
          if (t->take(ps[from][taken]) != &values[from][taken]) wrong.fetch_add(1);
          ++taken;
        }
      }
      while (taken < kPerThread) {
        while (taken < put[from].load(std::memory_order_acquire)) {
          if (t->take(ps[from][taken]) != &values[from][taken]) wrong.fetch_add(1);
          ++taken;
        }
        std::this_thread::yield();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  for (int k = 0; k < kThreads; ++k)
    for (void* p : ps[k]) ASSERT_EQ(t->take(p), nullptr);
  EXPECT_EQ(t->spilled(), 0u);
}

}  // namespace
