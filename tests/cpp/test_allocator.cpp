// Tests of the caching allocator (core/allocator/) through mpsrt::Buffer and the public memory
// API (mpsrt/allocator.h), reaching into detail::CachingAllocator / Block only to read block
// and heap sizes. Every test runs on each backend that is built and available; each installs
// its own environment with Runtime::reset(&env) and restores the process's at the end.
//
// The rules under test (caching_allocator.h):
//   <= 1 MiB -> small pool, 8 MiB heaps; < 10 MiB -> large pool, 32 MiB heaps; >= 10 MiB ->
//   huge, a new heap of the request rounded to 2 MiB; blocks in 512 B steps everywhere. Large
//   and huge heaps share one set of free blocks. Best fit, split with a minimum remainder of
//   512 B (small) / 1 MiB (large, huge), coalesce on free, exact-size bins (flushed when they
//   cannot serve), stream-ordered frees, hard limit, low watermark, cache limit, consolidation
//   of wholly free large heaps, out-of-memory ladder, stats and history.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/access.h"
#include "core/allocator/caching_allocator.h"
#include "core/runtime.h"
#include "core/stream.h"
#include "mpsrt/mpsrt.h"
#include "stream_gate.h"

namespace {

using namespace std::chrono_literals;
using mpsrt::test::StreamGate;
using Env = std::map<std::string, std::string>;
using mpsrt::Buffer;
using mpsrt::detail::Pool;
using mpsrt::detail::Runtime;
using mpsrt::detail::StreamImpl;

constexpr size_t kKiB = size_t(1) << 10;
constexpr size_t kMiB = size_t(1) << 20;

std::vector<std::string> usable_backends() {
  return mpsrt::available_backends();
}

// ------------------------------------------------------------------------------ helpers

mpsrt::detail::CachingAllocator& allocator() {
  return Runtime::get().device(0).allocator();
}

StreamImpl& default_impl() {
  return *mpsrt::detail::Access::impl(mpsrt::default_stream(0));
}

int64_t stat(const std::string& key) {
  const std::map<std::string, int64_t> m = mpsrt::memory_stats(0);
  auto it = m.find(key);
  if (it == m.end()) {
    ADD_FAILURE() << "memory_stats() has no key " << key;
    return -1;
  }
  return it->second;
}

size_t block_size(const Buffer& b) {
  return mpsrt::detail::Access::block(b)->size;
}
size_t heap_size(const Buffer& b) {
  return mpsrt::detail::Access::block(b)->heap->size;
}
uint64_t heap_base(const Buffer& b) {
  return mpsrt::detail::Access::block(b)->heap->base;
}
Pool pool_of(const Buffer& b) {
  return mpsrt::detail::Access::block(b)->pool;
}

// The allocator's byte formatting ("300.00 MiB", "512 B"), to find figures in messages.
std::string human(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%" PRIu64 " B", n);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", v, units[u]);
  }
  return buf;
}

std::string exact_ratio(double r) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", r);
  return buf;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Every heap is a chain of 512-aligned blocks covering it exactly, with no two free blocks
// side by side (coalescing), and the snapshot's totals agree with the counters and the stats.
::testing::AssertionResult heaps_consistent() {
  const mpsrt::MemorySnapshot snap = mpsrt::memory_snapshot(0);
  uint64_t reserved = 0;
  uint64_t allocated = 0;
  for (const mpsrt::SegmentInfo& s : snap.segments) {
    if (s.blocks.empty()) return ::testing::AssertionFailure() << "a heap without blocks";
    uint64_t at = s.address;
    uint64_t seg_alloc = 0;
    bool prev_free = false;
    for (const mpsrt::BlockInfo& b : s.blocks) {
      if (b.address != at) {
        return ::testing::AssertionFailure()
               << "heap 0x" << std::hex << s.address << ": block at 0x" << b.address
               << " but the previous block ends at 0x" << at;
      }
      if (b.address % 512 != 0 || b.size % 512 != 0 || b.size == 0) {
        return ::testing::AssertionFailure() << "block 0x" << std::hex << b.address << std::dec
                                             << " of " << b.size << " B is not 512-aligned";
      }
      if (!b.allocated && prev_free) {
        return ::testing::AssertionFailure() << "two free blocks side by side in heap 0x"
                                             << std::hex << s.address << " (not coalesced)";
      }
      if (b.allocated) {
        seg_alloc += b.size;
        if (b.requested_size == 0 || b.requested_size > b.size) {
          return ::testing::AssertionFailure()
                 << "allocated block of " << b.size << " B requested " << b.requested_size;
        }
      }
      prev_free = !b.allocated;
      at += b.size;
    }
    if (at != s.address + s.total_size) {
      return ::testing::AssertionFailure()
             << "blocks of heap 0x" << std::hex << s.address << " do not cover it exactly";
    }
    if (seg_alloc != s.allocated_size) {
      return ::testing::AssertionFailure() << "segment allocated_size " << s.allocated_size
                                           << " != sum of allocated blocks " << seg_alloc;
    }
    reserved += s.total_size;
    allocated += seg_alloc;
  }
  if (reserved != mpsrt::reserved_memory(0) ||
      static_cast<int64_t>(reserved) != stat("reserved_bytes.all.current")) {
    return ::testing::AssertionFailure()
           << "heaps total " << reserved
           << " B but reserved_memory() = " << mpsrt::reserved_memory(0)
           << " and reserved_bytes.all.current = " << stat("reserved_bytes.all.current");
  }
  if (allocated != mpsrt::current_allocated_memory(0) ||
      static_cast<int64_t>(allocated) != stat("allocated_bytes.all.current")) {
    return ::testing::AssertionFailure()
           << "allocated blocks total " << allocated
           << " B but current_allocated_memory() = " << mpsrt::current_allocated_memory(0)
           << " and allocated_bytes.all.current = " << stat("allocated_bytes.all.current");
  }
  if (static_cast<int64_t>(snap.segments.size()) != stat("segment.all.current")) {
    return ::testing::AssertionFailure()
           << snap.segments.size()
           << " heaps but segment.all.current = " << stat("segment.all.current");
  }
  return ::testing::AssertionSuccess();
}

// Free blocks in heaps that also hold allocated blocks (torch.cuda's "inactive split").
std::pair<int64_t, int64_t> inactive_split_from_snapshot() {
  int64_t count = 0;
  int64_t bytes = 0;
  for (const mpsrt::SegmentInfo& s : mpsrt::memory_snapshot(0).segments) {
    if (s.allocated_size == 0) continue;
    for (const mpsrt::BlockInfo& b : s.blocks) {
      if (b.allocated) continue;
      ++count;
      bytes += static_cast<int64_t>(b.size);
    }
  }
  return {count, bytes};
}

// Bytes of heaps that hold no allocated block (what empty_cache / the cache limit release).
uint64_t empty_heap_bytes() {
  uint64_t n = 0;
  for (const mpsrt::SegmentInfo& s : mpsrt::memory_snapshot(0).segments) {
    if (s.allocated_size == 0) n += s.total_size;
  }
  return n;
}

class AllocatorTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { use_env({}); }
  void TearDown() override { Runtime::reset(nullptr); }

  // Re-creates the runtime on the test's backend with these extra variables.
  void use_env(Env env) {
    env["MPSRT_BACKEND"] = GetParam();
    const mpsrt::detail::EnvLookup lookup = [&env](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    };
    Runtime::reset(&lookup);
  }

  bool is_cpu() const { return GetParam() == "cpu"; }

  // A fraction of recommended_max_memory() that gives a limit of `bytes`.
  static double fraction_for(uint64_t bytes) {
    return static_cast<double>(bytes) / static_cast<double>(mpsrt::recommended_max_memory(0));
  }
};

// ------------------------------------------------------------------------------ size classes

TEST_P(AllocatorTest, SmallRequestsRoundTo512AndShareOneHeapBackToBack) {
  const uint64_t driver0 = mpsrt::driver_allocated_memory(0);
  const std::vector<size_t> sizes = {1, 511, 512, 513, 1000, 4097, kMiB - 1, kMiB};
  const std::vector<size_t> want = {512, 512, 512, 1024, 1024, 4608, kMiB, kMiB};
  std::vector<Buffer> bufs;
  for (size_t n : sizes) bufs.emplace_back(n);
  for (size_t i = 0; i < bufs.size(); ++i) {
    SCOPED_TRACE("request of " + std::to_string(sizes[i]) + " B");
    const Buffer& b = bufs[i];
    ASSERT_TRUE(b.defined());
    EXPECT_EQ(b.nbytes(), sizes[i]);
    EXPECT_EQ(block_size(b), want[i]);
    EXPECT_EQ(pool_of(b), Pool::Small);
    EXPECT_EQ(b.address() % 512, 0u);
    EXPECT_EQ(b.device(), 0);
    EXPECT_EQ(b.stream(), mpsrt::default_stream(0));
    EXPECT_EQ(heap_base(b), heap_base(bufs[0])) << "small buffers must share one heap";
    if (i > 0) {
      EXPECT_EQ(b.address(), bufs[i - 1].address() + want[i - 1])
          << "a split hands out the block right after the previous one";
    }
    if (b.host_ptr() != nullptr) {
      EXPECT_EQ(reinterpret_cast<uint64_t>(b.host_ptr()), b.address());
    }
  }
  EXPECT_GE(heap_size(bufs[0]), 8 * kMiB);
  if (is_cpu()) {
    EXPECT_EQ(heap_size(bufs[0]), 8 * kMiB);
    EXPECT_EQ(mpsrt::driver_allocated_memory(0), driver0 + 8 * kMiB);
  }
  EXPECT_EQ(stat("segment.small_pool.current"), 1);
  EXPECT_EQ(stat("segment.large_pool.current"), 0);
  EXPECT_EQ(stat("num_device_alloc"), 1);
  const size_t total = std::accumulate(want.begin(), want.end(), size_t(0));
  EXPECT_EQ(mpsrt::current_allocated_memory(0), total);
  EXPECT_EQ(stat("allocated_bytes.small_pool.current"), static_cast<int64_t>(total));
  EXPECT_TRUE(heaps_consistent());
}

TEST_P(AllocatorTest, SmallHeapHoldsEightOneMiBBlocksThenANewHeap) {
  std::vector<Buffer> bufs;
  for (int i = 0; i < 8; ++i) bufs.emplace_back(kMiB);
  for (const Buffer& b : bufs) EXPECT_EQ(heap_base(b), heap_base(bufs[0]));
  EXPECT_EQ(stat("segment.small_pool.current"), 1);
  if (is_cpu()) {
    bufs.emplace_back(kMiB);
    EXPECT_NE(heap_base(bufs.back()), heap_base(bufs[0])) << "the first 8 MiB heap is full";
    EXPECT_EQ(stat("segment.small_pool.current"), 2);
  }
  EXPECT_TRUE(heaps_consistent());
}

TEST_P(AllocatorTest, LargeRequestsShare32MiBHeaps) {
  Buffer a(kMiB + 1);
  Buffer b(10 * kMiB - 1);
  Buffer c(3 * kMiB);
  EXPECT_EQ(pool_of(a), Pool::Large);
  EXPECT_EQ(pool_of(b), Pool::Large);
  EXPECT_EQ(block_size(a), kMiB + 512);
  EXPECT_EQ(block_size(b), 10 * kMiB);
  EXPECT_EQ(block_size(c), 3 * kMiB);
  EXPECT_EQ(heap_base(a), heap_base(b));
  EXPECT_EQ(heap_base(a), heap_base(c));
  EXPECT_EQ(b.address(), a.address() + kMiB + 512);
  EXPECT_EQ(c.address(), b.address() + 10 * kMiB);
  EXPECT_GE(heap_size(a), 32 * kMiB);
  if (is_cpu()) {
    EXPECT_EQ(heap_size(a), 32 * kMiB);
  }
  EXPECT_EQ(stat("segment.large_pool.current"), 1);
  EXPECT_EQ(stat("segment.small_pool.current"), 0);
  EXPECT_EQ(stat("allocated_bytes.large_pool.current"),
            static_cast<int64_t>(kMiB + 512 + 13 * kMiB));
  EXPECT_TRUE(heaps_consistent());
}

TEST_P(AllocatorTest, HugeRequestsGetNewHeapsRoundedTo2MiB) {
  struct Case {
    size_t request, block, heap;
  };
  // Blocks round to 512 B; the heap to 2 MiB; a remainder under 1 MiB stays with the block.
  const std::vector<Case> cases = {
      {10 * kMiB, 10 * kMiB, 10 * kMiB},
      {11 * kMiB + 512 * kKiB + 1, 12 * kMiB, 12 * kMiB},  // remainder 0.5 MiB - 512: kept
      {10 * kMiB + 1, 10 * kMiB + 512, 12 * kMiB},         // remainder 2 MiB - 512: split
      {33 * kMiB - 5, 33 * kMiB, 34 * kMiB}};              // remainder 1 MiB: split
  std::vector<Buffer> bufs;
  size_t total = 0;
  size_t heaps = 0;
  for (const Case& c : cases) {
    bufs.emplace_back(c.request);
    const Buffer& b = bufs.back();
    SCOPED_TRACE("request of " + std::to_string(c.request) + " B");
    EXPECT_EQ(pool_of(b), Pool::Huge);
    EXPECT_EQ(b.nbytes(), c.request);
    EXPECT_EQ(b.address(), heap_base(b)) << "a huge block starts its new heap";
    EXPECT_GE(heap_size(b), c.heap);
    if (is_cpu()) {
      EXPECT_EQ(heap_size(b), c.heap) << "a huge heap is the request rounded to 2 MiB";
      EXPECT_EQ(block_size(b), c.block);
    }
    total += block_size(b);
    heaps += heap_size(b);
  }
  for (size_t i = 1; i < bufs.size(); ++i) EXPECT_NE(heap_base(bufs[i]), heap_base(bufs[i - 1]));
  // torch.cuda's names: huge heaps count in large_pool.
  EXPECT_EQ(stat("segment.large_pool.current"), 4);
  EXPECT_EQ(stat("allocated_bytes.large_pool.current"), static_cast<int64_t>(total));
  EXPECT_EQ(stat("reserved_bytes.large_pool.current"), static_cast<int64_t>(heaps));
  EXPECT_TRUE(heaps_consistent());
}

TEST_P(AllocatorTest, LargeAndHugeBlocksShareFreeSpace) {
  if (!is_cpu()) GTEST_SKIP() << "relies on the exact 32 MiB heap of the cpu backend";
  Buffer big(40 * kMiB);  // a huge heap
  const uint64_t at = big.address();
  big.reset();
  Buffer medium(5 * kMiB);  // the free huge block serves a large request (split)
  EXPECT_EQ(medium.address(), at);
  EXPECT_EQ(stat("num_device_alloc"), 1);
  Buffer rest(20 * kMiB);  // and the rest a huge one
  EXPECT_EQ(rest.address(), at + 5 * kMiB);
  EXPECT_EQ(stat("num_device_alloc"), 1);
  EXPECT_TRUE(heaps_consistent());
}

TEST_P(AllocatorTest, ARemainderBelowTheSplitThresholdStaysWithTheBlock) {
  if (!is_cpu()) GTEST_SKIP() << "relies on the exact 32 MiB heap of the cpu backend";
  // Large pool: 3 x 9.5 MiB leave 3.5 MiB; a 3 MiB request would leave 0.5 MiB (< 1 MiB):
  // it gets the whole 3.5 MiB.
  std::vector<Buffer> bufs;
  for (int i = 0; i < 3; ++i) bufs.emplace_back(9 * kMiB + 512 * kKiB);
  Buffer d(3 * kMiB);
  EXPECT_EQ(heap_base(d), heap_base(bufs[0]));
  EXPECT_EQ(block_size(d), 3 * kMiB + 512 * kKiB);
  EXPECT_EQ(d.nbytes(), 3 * kMiB);
  EXPECT_EQ(stat("allocated_bytes.large_pool.current"), static_cast<int64_t>(32 * kMiB));
  EXPECT_EQ(stat("requested_bytes.large_pool.current"),
            static_cast<int64_t>(3 * (9 * kMiB + 512 * kKiB) + 3 * kMiB));
  // Small pool: a 1 KiB hole takes a 512 B request and keeps a free 512 B block.
  Buffer s1(kKiB);
  Buffer s2(512);
  const uint64_t hole = s1.address();
  s1.reset();
  mpsrt::memory_stats(0);  // merge the exact-size bins: best fit sees the hole
  Buffer s3(512);
  EXPECT_EQ(s3.address(), hole);
  EXPECT_EQ(block_size(s3), 512u);
  EXPECT_TRUE(heaps_consistent());
}

// ------------------------------------------------------------------------------ split, coalesce

TEST_P(AllocatorTest, FreeingInEveryOrderCoalescesToOneBlock) {
  const uint64_t driver0 = mpsrt::driver_allocated_memory(0);
  // Small pool (4 blocks + the free tail of the heap) and large pool likewise.
  const std::vector<std::vector<size_t>> layouts = {{512, 4096, 1536, kMiB},
                                                    {kMiB + 512, 3 * kMiB, 2 * kMiB, 5 * kMiB}};
  for (const std::vector<size_t>& sizes : layouts) {
    std::vector<int> order = {0, 1, 2, 3};
    do {
      std::string trace = "sizes from " + std::to_string(sizes[0]) + ", free order";
      for (int i : order) trace += " " + std::to_string(i);
      SCOPED_TRACE(trace);
      std::vector<Buffer> bufs;
      for (size_t n : sizes) bufs.emplace_back(n);
      for (size_t i = 1; i < bufs.size(); ++i) {
        ASSERT_EQ(heap_base(bufs[i]), heap_base(bufs[0]));
        ASSERT_EQ(bufs[i].address(), bufs[i - 1].address() + block_size(bufs[i - 1]));
      }
      const size_t heap = heap_size(bufs[0]);
      for (int i : order) {
        bufs[static_cast<size_t>(i)].reset();
        ASSERT_TRUE(heaps_consistent());
        const auto split = inactive_split_from_snapshot();
        EXPECT_EQ(stat("inactive_split.all.current"), split.first);
        EXPECT_EQ(stat("inactive_split_bytes.all.current"), split.second);
      }
      EXPECT_EQ(stat("inactive_split.all.current"), 0);
      EXPECT_EQ(stat("inactive_split_bytes.all.current"), 0);
      const mpsrt::MemorySnapshot snap = mpsrt::memory_snapshot(0);
      ASSERT_EQ(snap.segments.size(), 1u);
      ASSERT_EQ(snap.segments[0].blocks.size(), 1u) << "the free blocks were not merged";
      EXPECT_EQ(snap.segments[0].blocks[0].size, heap);
      EXPECT_FALSE(snap.segments[0].blocks[0].allocated);
      mpsrt::empty_cache(0);
      EXPECT_EQ(mpsrt::reserved_memory(0), 0u);
      EXPECT_EQ(mpsrt::driver_allocated_memory(0), driver0);
    } while (std::next_permutation(order.begin(), order.end()));
  }
}

TEST_P(AllocatorTest, InactiveSplitCountsFreeBlocksOfPartlyUsedHeaps) {
  Buffer a(kKiB);
  Buffer b(2 * kKiB);
  Buffer c(kKiB);
  const size_t heap = heap_size(a);
  // Only the tail is free.
  EXPECT_EQ(stat("inactive_split.small_pool.current"), 1);
  EXPECT_EQ(stat("inactive_split_bytes.small_pool.current"), static_cast<int64_t>(heap - 4 * kKiB));
  b.reset();  // a hole between a and c
  EXPECT_EQ(stat("inactive_split.small_pool.current"), 2);
  EXPECT_EQ(stat("inactive_split_bytes.small_pool.current"), static_cast<int64_t>(heap - 2 * kKiB));
  EXPECT_EQ(stat("inactive_split.all.current"), 2);
  EXPECT_EQ(stat("inactive_split.large_pool.current"), 0);
  c.reset();  // the hole, c and the tail merge
  EXPECT_EQ(stat("inactive_split.small_pool.current"), 1);
  EXPECT_EQ(stat("inactive_split_bytes.small_pool.current"), static_cast<int64_t>(heap - kKiB));
  a.reset();
  EXPECT_EQ(stat("inactive_split.all.current"), 0);
  EXPECT_EQ(stat("inactive_split_bytes.all.current"), 0);
}

TEST_P(AllocatorTest, BestFitPicksTheSmallestHoleThenTheLowestAddress) {
  Buffer a(4 * kKiB);
  Buffer sep1(512);
  Buffer b(2 * kKiB);
  Buffer sep2(512);
  Buffer c(2 * kKiB);
  Buffer sep3(512);
  const uint64_t at_a = a.address();
  const uint64_t at_b = b.address();
  const uint64_t at_c = c.address();
  a.reset();
  c.reset();
  b.reset();
  // Freed blocks wait unmerged in exact-size bins until a request cannot use them; reading
  // the statistics merges them, so best fit below sees every hole.
  mpsrt::memory_stats(0);
  // Holes: 4 KiB at a, 2 KiB at b, 2 KiB at c, and the big tail.
  Buffer x(1536);
  EXPECT_EQ(x.address(), at_b) << "best fit: the smallest hole, lowest address first";
  Buffer y(2 * kKiB);
  EXPECT_EQ(y.address(), at_c) << "the other 2 KiB hole";
  Buffer z(3 * kKiB);
  EXPECT_EQ(z.address(), at_a) << "3 KiB fits only the 4 KiB hole before the tail";
  Buffer w(512);
  EXPECT_EQ(w.address(), at_b + 1536) << "the 512 B left of the first 2 KiB hole";
  Buffer v(kKiB);
  EXPECT_EQ(v.address(), at_a + 3 * kKiB) << "the 1 KiB left of the 4 KiB hole";
  EXPECT_TRUE(heaps_consistent());
}

TEST_P(AllocatorTest, AFreedBlockIsReusedAtOnceOnTheSameStream) {
  for (size_t n : {size_t(1000), 3 * kMiB, 20 * kMiB}) {
    SCOPED_TRACE("size " + std::to_string(n));
    Buffer a(n);
    const int64_t device_allocs = stat("num_device_alloc");
    const uint64_t at = a.address();
    a.fill(0x5A, 1, mpsrt::default_stream(0));  // queued work on the block's own stream
    a.reset();
    Buffer b(n);
    EXPECT_EQ(b.address(), at);
    EXPECT_EQ(stat("num_device_alloc"), device_allocs) << "no new heap for the reuse";
  }
  mpsrt::synchronize(0);
}

TEST_P(AllocatorTest, ZeroBytesAndMoves) {
  Buffer z(0);
  EXPECT_FALSE(z.defined());
  EXPECT_EQ(z.nbytes(), 0u);
  EXPECT_EQ(z.address(), 0u);
  EXPECT_EQ(z.host_ptr(), nullptr);
  EXPECT_EQ(stat("allocation.all.current"), 0);
  EXPECT_EQ(stat("num_device_alloc"), 0);
  Buffer a(1000);
  const uint64_t at = a.address();
  Buffer b(std::move(a));
  EXPECT_FALSE(a.defined());  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(b.address(), at);
  EXPECT_EQ(stat("allocation.all.current"), 1);
  Buffer c(2000);
  c = std::move(b);  // frees c's old block
  EXPECT_EQ(c.address(), at);
  EXPECT_EQ(stat("allocation.all.current"), 1);
  EXPECT_EQ(mpsrt::current_allocated_memory(0), 1024u);
  c.reset();
  c.reset();
  EXPECT_EQ(stat("allocation.all.current"), 0);
  EXPECT_EQ(mpsrt::current_allocated_memory(0), 0u);
}

// ------------------------------------------------------------------------------ releasing heaps

TEST_P(AllocatorTest, EmptyCacheReleasesOnlyHeapsWithoutLiveBlocks) {
  const uint64_t driver0 = mpsrt::driver_allocated_memory(0);
  Buffer keep(kKiB);       // small heap stays
  Buffer gone(5 * kMiB);   // large heap becomes empty
  Buffer huge(40 * kMiB);  // so does this one (too big for the large heap)
  const uint64_t small_heap = heap_size(keep);
  gone.reset();
  huge.reset();
  EXPECT_EQ(stat("segment.all.current"), 3) << "freeing alone releases nothing";
  mpsrt::empty_cache(0);
  EXPECT_EQ(stat("segment.all.current"), 1);
  EXPECT_EQ(stat("num_device_free"), 2);
  EXPECT_EQ(stat("num_empty_cache"), 1);
  EXPECT_EQ(mpsrt::reserved_memory(0), small_heap);
  if (is_cpu()) {
    EXPECT_EQ(mpsrt::driver_allocated_memory(0), driver0 + small_heap);
  }
  EXPECT_EQ(keep.address() % 512, 0u);
  keep.reset();
  mpsrt::empty_cache(0);
  EXPECT_EQ(mpsrt::reserved_memory(0), 0u);
  EXPECT_EQ(mpsrt::driver_allocated_memory(0), driver0);
  EXPECT_EQ(stat("num_device_free"), 3);
  EXPECT_TRUE(heaps_consistent());
}

TEST_P(AllocatorTest, CacheLimitReturnsThePreviousAndCapsCachedHeaps) {
  EXPECT_EQ(mpsrt::set_cache_limit(0, 0), SIZE_MAX) << "no cap by default";
  EXPECT_EQ(mpsrt::set_cache_limit(24 * kMiB, 0), 0u);
  EXPECT_EQ(mpsrt::set_cache_limit(0, 0), 24 * kMiB);
  // Cap 0: a heap that becomes empty goes back to the driver at once.
  {
    std::vector<Buffer> bufs;
    for (int i = 0; i < 3; ++i) bufs.emplace_back(10 * kMiB);
    for (Buffer& b : bufs) {
      b.reset();
      EXPECT_EQ(mpsrt::reserved_memory(0) - mpsrt::current_allocated_memory(0), 0u);
    }
    EXPECT_EQ(stat("num_device_free"), 3);
  }
  // Cap 24 MiB: at most 24 MiB of empty heaps stay cached after any free.
  EXPECT_EQ(mpsrt::set_cache_limit(24 * kMiB, 0), 0u);
  std::mt19937_64 rng(7);
  std::vector<Buffer> live;
  for (int step = 0; step < 300; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const size_t pick = rng() % 10;
      const size_t n = pick < 5   ? 1 + rng() % kMiB
                       : pick < 8 ? kMiB + 1 + rng() % (9 * kMiB)
                                  : 10 * kMiB + rng() % (8 * kMiB);
      live.emplace_back(n);
    } else {
      const size_t i = rng() % live.size();
      std::swap(live[i], live.back());
      live.pop_back();
      ASSERT_LE(empty_heap_bytes(), 24 * kMiB) << "after a free at step " << step;
    }
    if (live.size() > 12) {
      live.erase(live.begin());
      ASSERT_LE(empty_heap_bytes(), 24 * kMiB) << "after a free at step " << step;
    }
  }
  live.clear();
  EXPECT_LE(empty_heap_bytes(), 24 * kMiB);
  // Lowering the cap releases at once.
  EXPECT_EQ(mpsrt::set_cache_limit(0, 0), 24 * kMiB);
  EXPECT_EQ(mpsrt::reserved_memory(0), 0u);
  EXPECT_EQ(mpsrt::set_cache_limit(SIZE_MAX, 0), 0u);
  EXPECT_TRUE(heaps_consistent());
}

TEST_P(AllocatorTest, LowWatermarkReleasesCachedHeapsOldestFirst) {
  if (!is_cpu()) GTEST_SKIP() << "relies on the exact 8 MiB small heaps of the cpu backend";
  // Two wholly free small heaps, A (emptied first) then B, then a huge request that needs a
  // new heap. Consolidation only touches large heaps, so whatever small heap goes, the low
  // watermark released it.
  auto run = [](uint64_t* base_a, uint64_t* base_b) {
    std::vector<Buffer> a;
    for (int i = 0; i < 8; ++i) a.emplace_back(kMiB);  // fills heap A
    Buffer b(kMiB);                                    // heap B
    *base_a = heap_base(a[0]);
    *base_b = heap_base(b);
    EXPECT_NE(*base_a, *base_b);
    a.clear();  // A is emptied first: the oldest cached heap
    b.reset();
    return Buffer(20 * kMiB);
  };
  std::vector<uint64_t> bases;
  auto heap_bases = [&bases] {
    bases.clear();
    for (const auto& s : mpsrt::memory_snapshot(0).segments) bases.push_back(s.address);
  };
  uint64_t base_a = 0, base_b = 0;
  {
    // Default watermark (1.4 x recommended): nothing is collected.
    Buffer big = run(&base_a, &base_b);
    EXPECT_EQ(stat("num_device_free"), 0);
    EXPECT_EQ(stat("segment.small_pool.current"), 2);
  }
  const uint64_t rec = mpsrt::recommended_max_memory(0);
  // Low watermark 32 MiB: 16 MiB cached + a new 20 MiB heap is 4 MiB too many: releasing the
  // oldest heap (A) is enough.
  use_env({{"MPSRT_LOW_WATERMARK_RATIO",
            exact_ratio(static_cast<double>(32 * kMiB) / static_cast<double>(rec))}});
  ASSERT_EQ(mpsrt::recommended_max_memory(0), rec);
  Buffer big = run(&base_a, &base_b);
  EXPECT_EQ(stat("num_device_free"), 1);
  heap_bases();
  EXPECT_EQ(std::find(bases.begin(), bases.end(), base_a), bases.end())
      << "the oldest cached heap was not released";
  EXPECT_NE(std::find(bases.begin(), bases.end(), base_b), bases.end())
      << "the newer cached heap was released though releasing the older one was enough";
  EXPECT_EQ(mpsrt::reserved_memory(0), 28 * kMiB);
  // Past the watermark with nothing cached: the new heap is made anyway (the limit is soft).
  Buffer b2(kMiB);  // uses heap B
  Buffer c(24 * kMiB);
  EXPECT_EQ(mpsrt::reserved_memory(0), 52 * kMiB);
  EXPECT_EQ(stat("num_ooms"), 0);
  EXPECT_EQ(mpsrt::driver_allocated_memory(0), 52 * kMiB);
  EXPECT_TRUE(heaps_consistent());
}

TEST_P(AllocatorTest, WhollyFreeLargeHeapsAreConsolidatedWhenANewHeapIsNeeded) {
  if (!is_cpu()) GTEST_SKIP() << "relies on the exact heap sizes of the cpu backend";
  {
    Buffer a(20 * kMiB);
    Buffer b(24 * kMiB);
  }
  EXPECT_EQ(stat("segment.large_pool.current"), 2);
  Buffer keep(kKiB);    // a small heap: never consolidated
  Buffer c(30 * kMiB);  // fits neither cached block
  EXPECT_EQ(stat("num_device_free"), 2);
  EXPECT_EQ(stat("segment.large_pool.current"), 1);
  EXPECT_EQ(heap_size(c), 74 * kMiB) << "one heap for the 44 MiB released and the request";
  EXPECT_EQ(mpsrt::reserved_memory(0), 74 * kMiB + heap_size(keep));
  Buffer d(44 * kMiB);  // fits the rest of the consolidated heap
  EXPECT_EQ(heap_base(d), heap_base(c));
  EXPECT_EQ(stat("num_device_alloc"), 4);
  EXPECT_TRUE(heaps_consistent());
}

// ------------------------------------------------------------------------------ hard limit

TEST_P(AllocatorTest, FractionLimitRaisesOutOfMemoryWithAFullMessageAndRecovers) {
  const uint64_t driver0 = mpsrt::driver_allocated_memory(0);
  const double f = fraction_for(256 * kMiB);
  const double prev = mpsrt::set_per_process_memory_fraction(f, 0);
  EXPECT_DOUBLE_EQ(prev, 1.7) << "the default MPSRT_HIGH_WATERMARK_RATIO";
  const uint64_t limit = allocator().high_limit();
  EXPECT_NEAR(static_cast<double>(limit), 256.0 * kMiB, 1.0);
  Buffer hold(100 * kMiB);
  try {
    Buffer big(300 * kMiB);
    ADD_FAILURE() << "300 MiB were allocated past a 256 MiB limit";
  } catch (const mpsrt::OutOfMemory& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(has(msg, "300.00 MiB")) << "names the size: " << msg;
    EXPECT_TRUE(has(msg, "huge")) << "names the pool: " << msg;
    EXPECT_TRUE(has(msg, "allocated 100.00 MiB")) << msg;
    EXPECT_TRUE(has(msg, "cached 0 B")) << msg;
    EXPECT_TRUE(has(msg, "limit " + human(limit))) << msg;
    EXPECT_TRUE(has(msg, "MPSRT_HIGH_WATERMARK_RATIO")) << msg;
    EXPECT_TRUE(has(msg, "set_per_process_memory_fraction")) << msg;
  }
  EXPECT_EQ(stat("num_ooms"), 1);
  EXPECT_EQ(stat("num_alloc_retries"), 1);
  EXPECT_EQ(mpsrt::current_allocated_memory(0), 100 * kMiB) << "the failure leaked";
  EXPECT_EQ(stat("allocation.all.current"), 1);
  // Within the limit: works.
  {
    Buffer more(100 * kMiB);
    EXPECT_TRUE(more.defined());
    EXPECT_EQ(mpsrt::current_allocated_memory(0), 200 * kMiB);
  }
  // A small request when the limit leaves no room for an 8 MiB heap names the small pool.
  Buffer fill(150 * kMiB);
  try {
    Buffer small(kKiB);
    ADD_FAILURE() << "a new 8 MiB heap was made past the limit";
  } catch (const mpsrt::OutOfMemory& e) {
    EXPECT_TRUE(has(e.what(), "small")) << e.what();
    EXPECT_TRUE(has(e.what(), "1.00 KiB")) << e.what();
  }
  EXPECT_EQ(stat("num_ooms"), 2);
  fill.reset();
  hold.reset();
  EXPECT_EQ(mpsrt::current_allocated_memory(0), 0u);
  EXPECT_EQ(stat("allocated_bytes.all.current"), 0);
  EXPECT_EQ(stat("allocation.all.current"), 0);
  EXPECT_EQ(stat("requested_bytes.all.current"), 0);
  mpsrt::empty_cache(0);
  EXPECT_EQ(mpsrt::reserved_memory(0), 0u);
  EXPECT_EQ(mpsrt::driver_allocated_memory(0), driver0);
  // Bad fractions change nothing; 0 lifts the limit.
  for (double bad : {-0.1, 2.5, std::nan("")}) {
    EXPECT_THROW(mpsrt::set_per_process_memory_fraction(bad, 0), std::invalid_argument) << bad;
  }
  EXPECT_DOUBLE_EQ(mpsrt::set_per_process_memory_fraction(0.0, 0), f);
  {
    Buffer big(300 * kMiB);
    EXPECT_TRUE(big.defined()) << "fraction 0 means no limit";
  }
  EXPECT_DOUBLE_EQ(mpsrt::set_per_process_memory_fraction(prev, 0), 0.0);
}

TEST_P(AllocatorTest, EnvironmentHighWatermarkSetsTheLimit) {
  const uint64_t rec = mpsrt::recommended_max_memory(0);
  const std::string ratio = exact_ratio(static_cast<double>(200 * kMiB) / static_cast<double>(rec));
  use_env({{"MPSRT_HIGH_WATERMARK_RATIO", ratio}, {"MPSRT_LOW_WATERMARK_RATIO", ratio}});
  EXPECT_NEAR(static_cast<double>(allocator().high_limit()), 200.0 * kMiB, 1.0);
  try {
    Buffer big(256 * kMiB);
    ADD_FAILURE() << "256 MiB were allocated past a 200 MiB limit";
  } catch (const mpsrt::OutOfMemory& e) {
    EXPECT_TRUE(has(e.what(), "256.00 MiB")) << e.what();
    EXPECT_TRUE(has(e.what(), "MPSRT_HIGH_WATERMARK_RATIO")) << e.what();
  }
  Buffer ok(150 * kMiB);
  EXPECT_TRUE(ok.defined());
  EXPECT_EQ(stat("num_ooms"), 1);
}

TEST_P(AllocatorTest, LargerThanMaxBufferSizeIsOutOfMemoryAndCounted) {
  const uint64_t max_buffer = mpsrt::get_device_properties(0).max_buffer_size;
  try {
    Buffer b(max_buffer + 1);
    ADD_FAILURE() << "a buffer larger than max_buffer_size was allocated";
  } catch (const mpsrt::OutOfMemory& e) {
    EXPECT_TRUE(has(e.what(), "max_buffer_size")) << e.what();
  }
  EXPECT_EQ(stat("num_ooms"), 1) << "every OutOfMemory raised counts in num_ooms";
  Buffer ok(1000);
  EXPECT_TRUE(ok.defined());
  EXPECT_EQ(mpsrt::current_allocated_memory(0), 1024u);
}

// ------------------------------------------------------------------------------ the OOM ladder

TEST_P(AllocatorTest, ReclaimCallbackGetsTheBytesNeededAndCanFreeForARetry) {
  const double prev = mpsrt::set_per_process_memory_fraction(fraction_for(256 * kMiB), 0);
  auto held = std::make_shared<Buffer>(200 * kMiB);
  const uint64_t held_at = held->address();
  std::vector<size_t> asked;
  const int id = mpsrt::add_reclaim_callback(
      [&asked, held](size_t needed) {
        asked.push_back(needed);
        held->reset();
        return true;
      },
      0);
  Buffer b(150 * kMiB);
  ASSERT_TRUE(b.defined());
  EXPECT_EQ(asked, std::vector<size_t>{150 * kMiB});
  EXPECT_FALSE(held->defined());
  EXPECT_EQ(b.address(), held_at) << "the retry reuses the freed block";
  EXPECT_EQ(stat("num_alloc_retries"), 1);
  EXPECT_EQ(stat("num_ooms"), 0);
  EXPECT_EQ(mpsrt::current_allocated_memory(0), 150 * kMiB);
  mpsrt::remove_reclaim_callback(id, 0);
  EXPECT_THROW(mpsrt::remove_reclaim_callback(id, 0), std::invalid_argument);
  // Without the callback the ladder ends in OutOfMemory.
  EXPECT_THROW(Buffer(150 * kMiB), mpsrt::OutOfMemory);
  EXPECT_EQ(asked.size(), 1u);
  mpsrt::set_per_process_memory_fraction(prev, 0);
}

TEST_P(AllocatorTest, AThrowingReclaimCallbackIsSkipped) {
  const double prev = mpsrt::set_per_process_memory_fraction(fraction_for(256 * kMiB), 0);
  auto held = std::make_shared<Buffer>(200 * kMiB);
  int thrower_calls = 0;
  int good_calls = 0;
  const int bad = mpsrt::add_reclaim_callback(
      [&thrower_calls](size_t) -> bool {
        ++thrower_calls;
        throw std::runtime_error("reclaim callback exploded");
      },
      0);
  const int good = mpsrt::add_reclaim_callback(
      [&good_calls, held](size_t) {
        ++good_calls;
        held->reset();
        return true;
      },
      0);
  ::testing::internal::CaptureStderr();
  Buffer b(200 * kMiB);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(b.defined());
  EXPECT_EQ(thrower_calls, 1);
  EXPECT_EQ(good_calls, 1);
  EXPECT_TRUE(has(err, "reclaim callback exploded")) << "the skipped error is reported: " << err;
  mpsrt::remove_reclaim_callback(bad, 0);
  mpsrt::remove_reclaim_callback(good, 0);
  mpsrt::set_per_process_memory_fraction(prev, 0);
}

TEST_P(AllocatorTest, CallbacksThatCannotHelpEndInOutOfMemory) {
  const double prev = mpsrt::set_per_process_memory_fraction(fraction_for(256 * kMiB), 0);
  Buffer hold(200 * kMiB);
  std::vector<size_t> asked;
  const int id = mpsrt::add_reclaim_callback(
      [&asked](size_t needed) {
        asked.push_back(needed);
        return false;
      },
      0);
  EXPECT_THROW(Buffer(100 * kMiB), mpsrt::OutOfMemory);
  EXPECT_EQ(asked, std::vector<size_t>{100 * kMiB}) << "called once, with the rounded size";
  EXPECT_EQ(stat("num_ooms"), 1);
  EXPECT_EQ(stat("num_alloc_retries"), 1);
  mpsrt::remove_reclaim_callback(id, 0);
  mpsrt::set_per_process_memory_fraction(prev, 0);
}

TEST_P(AllocatorTest, TheLadderFreesCachedHeapsBeforeRaising) {
  const double prev = mpsrt::set_per_process_memory_fraction(fraction_for(256 * kMiB), 0);
  {
    Buffer a(100 * kMiB);
    Buffer b(60 * kMiB);
  }  // 160 MiB cached in two heaps
  EXPECT_EQ(mpsrt::reserved_memory(0), 160 * kMiB);
  Buffer c(200 * kMiB);  // fits no cached block; 160 + 200 > 256
  ASSERT_TRUE(c.defined());
  // The cached heaps go back either when the new heap is consolidated (before the ladder's
  // retry rungs) or on the "free all cached" rung: at most one retry is counted.
  EXPECT_LE(stat("num_alloc_retries"), 1);
  EXPECT_EQ(stat("num_ooms"), 0);
  EXPECT_EQ(stat("num_device_free"), 2);
  EXPECT_EQ(mpsrt::reserved_memory(0), 200 * kMiB);
  if (is_cpu()) {
    EXPECT_EQ(mpsrt::driver_allocated_memory(0), 200 * kMiB);
  }
  EXPECT_TRUE(heaps_consistent());
  mpsrt::set_per_process_memory_fraction(prev, 0);
}

// ------------------------------------------------------------------------------ statistics

TEST_P(AllocatorTest, StatsFollowAModel) {
  struct Model {
    int64_t alloc_cur = 0, alloc_peak = 0, alloc_total = 0, alloc_freed = 0;
    int64_t small_cur = 0, large_cur = 0;
    int64_t req_cur = 0;
    int64_t n_cur = 0, n_peak = 0, n_total = 0, n_freed = 0;
    void add(size_t block, size_t req, bool small) {
      alloc_cur += static_cast<int64_t>(block);
      alloc_total += static_cast<int64_t>(block);
      alloc_peak = std::max(alloc_peak, alloc_cur);
      (small ? small_cur : large_cur) += static_cast<int64_t>(block);
      req_cur += static_cast<int64_t>(req);
      n_peak = std::max(n_peak, ++n_cur);
      ++n_total;
    }
    void sub(size_t block, size_t req, bool small) {
      alloc_cur -= static_cast<int64_t>(block);
      alloc_freed += static_cast<int64_t>(block);
      (small ? small_cur : large_cur) -= static_cast<int64_t>(block);
      req_cur -= static_cast<int64_t>(req);
      --n_cur;
      ++n_freed;
    }
  } m;
  auto check = [&](const char* when) {
    SCOPED_TRACE(when);
    EXPECT_EQ(stat("allocated_bytes.all.current"), m.alloc_cur);
    EXPECT_EQ(stat("allocated_bytes.all.peak"), m.alloc_peak);
    EXPECT_EQ(stat("allocated_bytes.all.allocated"), m.alloc_total);
    EXPECT_EQ(stat("allocated_bytes.all.freed"), m.alloc_freed);
    EXPECT_EQ(stat("allocated_bytes.small_pool.current"), m.small_cur);
    EXPECT_EQ(stat("allocated_bytes.large_pool.current"), m.large_cur);
    EXPECT_EQ(stat("active_bytes.all.current"), m.alloc_cur);
    EXPECT_EQ(stat("requested_bytes.all.current"), m.req_cur);
    EXPECT_EQ(stat("allocation.all.current"), m.n_cur);
    EXPECT_EQ(stat("allocation.all.peak"), m.n_peak);
    EXPECT_EQ(stat("allocation.all.allocated"), m.n_total);
    EXPECT_EQ(stat("allocation.all.freed"), m.n_freed);
    EXPECT_EQ(static_cast<int64_t>(mpsrt::current_allocated_memory(0)), m.alloc_cur);
    EXPECT_EQ(stat("reserved_bytes.all.current"), static_cast<int64_t>(mpsrt::reserved_memory(0)));
    EXPECT_TRUE(heaps_consistent());
  };
  check("at start");
  Buffer s1(1000);
  m.add(1024, 1000, true);
  Buffer s2(512);
  m.add(512, 512, true);
  Buffer l1(2 * kMiB + 1);
  m.add(2 * kMiB + 512, 2 * kMiB + 1, false);
  Buffer h1(40 * kMiB);  // too big for l1's 32 MiB heap: a heap of its own
  m.add(40 * kMiB, 40 * kMiB, false);
  check("after 4 allocations");
  const int64_t small_heap = static_cast<int64_t>(heap_size(s1));
  const int64_t large_heap = static_cast<int64_t>(heap_size(l1));
  const int64_t huge_heap = static_cast<int64_t>(heap_size(h1));
  EXPECT_EQ(stat("segment.all.current"), 3);
  EXPECT_EQ(stat("segment.small_pool.current"), 1);
  EXPECT_EQ(stat("segment.large_pool.current"), 2);
  EXPECT_EQ(stat("reserved_bytes.small_pool.current"), small_heap);
  EXPECT_EQ(stat("reserved_bytes.large_pool.current"), large_heap + huge_heap);
  EXPECT_EQ(stat("num_device_alloc"), 3);
  EXPECT_EQ(stat("num_device_free"), 0);

  s1.reset();
  m.sub(1024, 1000, true);
  h1.reset();
  m.sub(40 * kMiB, 40 * kMiB, false);
  check("after 2 frees");
  EXPECT_EQ(stat("allocated_bytes.all.peak"),
            static_cast<int64_t>(1024 + 512 + 2 * kMiB + 512 + 40 * kMiB));

  mpsrt::reset_peak_memory_stats(0);
  m.alloc_peak = m.alloc_cur;
  m.n_peak = m.n_cur;
  check("after reset_peak_memory_stats");
  EXPECT_EQ(stat("reserved_bytes.all.peak"), stat("reserved_bytes.all.current"));
  EXPECT_EQ(stat("segment.all.peak"), stat("segment.all.current"));

  Buffer s3(100);
  m.add(512, 100, true);
  check("after one more");
  s2.reset();
  m.sub(512, 512, true);
  s3.reset();
  m.sub(512, 100, true);
  l1.reset();
  m.sub(2 * kMiB + 512, 2 * kMiB + 1, false);
  check("after freeing all");
  mpsrt::empty_cache(0);
  EXPECT_EQ(stat("reserved_bytes.all.current"), 0);
  EXPECT_EQ(stat("reserved_bytes.all.freed"), small_heap + large_heap + huge_heap);
  EXPECT_EQ(stat("reserved_bytes.all.allocated"), small_heap + large_heap + huge_heap);
  EXPECT_EQ(stat("segment.all.current"), 0);
  EXPECT_EQ(stat("segment.all.freed"), 3);
  EXPECT_EQ(stat("num_device_alloc"), 3);
  EXPECT_EQ(stat("num_device_free"), 3);
  EXPECT_EQ(stat("num_alloc_retries"), 0);
  EXPECT_EQ(stat("num_ooms"), 0);
  check("after empty_cache");
}

// ------------------------------------------------------------------------------ stream order

TEST_P(AllocatorTest, AHeapWithQueuedWorkIsNotReleasedUntilTheWorkIsDone) {
  StreamImpl* other = mpsrt::detail::Access::impl(mpsrt::stream_from_pool(0, 0));
  const uint64_t driver0 = mpsrt::driver_allocated_memory(0);
  StreamGate gate;
  gate.block(default_impl());
  Buffer a(12 * kMiB);
  const uint64_t at = a.address();
  a.fill(0xAB, 1, mpsrt::default_stream(0));  // queued behind the gate
  mpsrt::default_stream(0).commit(mpsrt::SyncType::Commit);
  EXPECT_FALSE(mpsrt::default_stream(0).query());
  a.reset();
  // Same stream: reusable at once (the stream runs in order).
  Buffer b(12 * kMiB);
  EXPECT_EQ(b.address(), at);
  b.fill(0xCD, 1, mpsrt::default_stream(0));
  b.reset();
  // Another stream must not get it while the default stream's work is pending.
  {
    Buffer c(12 * kMiB, mpsrt::detail::Access::make_stream(other));
    EXPECT_NE(c.address(), at) << "a block with pending work was handed to another stream";
  }
  // Nor may the heap go back to the driver by the cache limit; empty_cache waits for the work
  // (as torch.cuda's waits for the events of blocks whose free is pending), then releases it.
  EXPECT_EQ(mpsrt::set_cache_limit(0, 0), SIZE_MAX);
  bool found = false;
  for (const auto& s : mpsrt::memory_snapshot(0).segments) found = found || s.address == at;
  EXPECT_TRUE(found) << "the heap was released while its work was queued";
  EXPECT_GE(mpsrt::reserved_memory(0), 12 * kMiB);
  if (is_cpu()) {
    EXPECT_GE(mpsrt::driver_allocated_memory(0), driver0 + 12 * kMiB);
  }
  std::atomic<bool> emptied{false};
  std::thread emptier([&] {
    mpsrt::empty_cache(0);
    emptied = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(emptied.load()) << "empty_cache returned while the heap's work was queued";
  EXPECT_FALSE(mpsrt::default_stream(0).query()) << "the gate should still hold the stream";
  gate.release();
  emptier.join();
  EXPECT_EQ(mpsrt::reserved_memory(0), 0u);
  EXPECT_EQ(mpsrt::driver_allocated_memory(0), driver0);
  mpsrt::set_cache_limit(SIZE_MAX, 0);
  other->synchronize();
  mpsrt::empty_cache(0);
}

TEST_P(AllocatorTest, UseOnAnotherStreamDefersReuseUntilThatStreamIsDone) {
  StreamImpl* other = mpsrt::detail::Access::impl(mpsrt::stream_from_pool(0, 0));
  mpsrt::Stream s1 = mpsrt::detail::Access::make_stream(other);
  StreamGate gate;
  gate.block(*other);
  // Through record_stream.
  Buffer a(3 * kMiB);
  const uint64_t at_a = a.address();
  a.record_stream(s1);
  a.reset();
  Buffer b(3 * kMiB);
  EXPECT_NE(b.address(), at_a) << "reused while a recorded stream still had work queued";
  // Through a fill encoded on the other stream.
  Buffer c(kKiB);
  const uint64_t at_c = c.address();
  c.fill(7, 1, s1);
  other->commit(mpsrt::SyncType::Commit);
  c.reset();
  Buffer d(kKiB);
  EXPECT_NE(d.address(), at_c) << "reused while the other stream's fill was queued";
  d.reset();
  b.reset();
  // The cache limit releases what is idle only (empty_cache would wait for the stream).
  mpsrt::set_cache_limit(0, 0);
  EXPECT_GT(mpsrt::reserved_memory(0), 0u) << "released while another stream was using it";
  mpsrt::set_cache_limit(SIZE_MAX, 0);
  gate.release();
  other->synchronize();
  Buffer e(kKiB);
  EXPECT_EQ(e.address(), at_c) << "after the other stream finished, the block is reused";
  e.reset();
  mpsrt::empty_cache(0);
  EXPECT_EQ(mpsrt::reserved_memory(0), 0u);
}

// A freed block's fence is the stream's fence_value() at the free. It must cover every command
// encoded before the free even when another thread commits the open command buffer at that
// moment; otherwise the block counts as idle (reusable on another stream, its heap releasable)
// while its last command is still queued.
TEST_P(AllocatorTest, StreamFenceCoversWorkEncodedBeforeAConcurrentCommit) {
  StreamImpl& s = default_impl();
  // Each round: this thread encodes a command, so the fence is (last commit + 1), and then
  // reads fence_value() again and again while the committer thread commits that command
  // buffer. Before and after the commit the answer is the same number; it must never be less.
  std::atomic<int64_t> go{0};
  std::atomic<int64_t> committed{0};
  std::atomic<bool> stop{false};
  std::thread committer([&] {
    for (int64_t round = 1;; ++round) {
      while (go.load(std::memory_order_acquire) < round) {
        if (stop.load(std::memory_order_relaxed)) return;
        std::this_thread::yield();
      }
      s.commit(mpsrt::SyncType::Commit);
      committed.store(round, std::memory_order_release);
    }
  });
  int64_t stale = 0;
  int64_t rounds = 0;
  uint64_t want = 0;
  uint64_t got = 0;
  const auto until = std::chrono::steady_clock::now() + 1s;
  while (std::chrono::steady_clock::now() < until && stale == 0) {
    ++rounds;
    s.encode({mpsrt::detail::prof::Op::Callback},
             [](mpsrt::backend::CommandBuffer& cb) { cb.host_callback([] {}); });
    const uint64_t fence = s.fence_value();  // nobody commits yet: exact
    go.store(rounds, std::memory_order_release);
    while (committed.load(std::memory_order_acquire) < rounds) {
      const uint64_t f = s.fence_value();  // what free() would record now
      if (f < fence) {
        ++stale;
        want = fence;
        got = f;
      }
    }
  }
  stop = true;
  committer.join();
  s.synchronize();
  EXPECT_EQ(stale, 0) << "round " << rounds << ": fence_value() returned " << got
                      << " while a command encoded before the call will only be done at " << want
                      << " (a commit landed between its two loads): a block freed then counts as "
                         "idle while its last command is still queued";
}

// ------------------------------------------------------------------------------ history

TEST_P(AllocatorTest, HistoryRecordsEventsInOrderAndSnapshotsMatchTheStats) {
  auto frames = std::make_shared<const mpsrt::StackFrames>(
      mpsrt::StackFrames{{"test_allocator.cpp", 42, "make_buffers"}});
  int frame_calls = 0;
  mpsrt::record_memory_history(
      true, 0,
      [&frame_calls, frames] {
        ++frame_calls;
        return frames;
      },
      0);
  Buffer a(1000);
  Buffer b(20 * kMiB);
  const uint64_t at_a = a.address();
  const uint64_t at_b = b.address();
  const uint64_t heap_a = heap_base(a);
  const uint64_t heap_a_size = heap_size(a);
  EXPECT_EQ(frame_calls, 2);
  {
    const mpsrt::MemorySnapshot snap = mpsrt::memory_snapshot(0);
    ASSERT_EQ(snap.segments.size(), 2u);
    uint64_t total = 0;
    int allocated_blocks = 0;
    for (const mpsrt::SegmentInfo& s : snap.segments) {
      total += s.total_size;
      EXPECT_TRUE(s.pool == "small" || s.pool == "huge") << s.pool;
      for (const mpsrt::BlockInfo& bi : s.blocks) {
        if (!bi.allocated) continue;
        ++allocated_blocks;
        ASSERT_TRUE(bi.frames != nullptr);
        ASSERT_EQ(bi.frames->size(), 1u);
        EXPECT_EQ((*bi.frames)[0].name, "make_buffers");
        EXPECT_EQ(bi.requested_size, bi.address == at_a ? 1000u : 20 * kMiB);
      }
    }
    EXPECT_EQ(allocated_blocks, 2);
    EXPECT_EQ(static_cast<int64_t>(total), stat("reserved_bytes.all.current"));
    EXPECT_TRUE(heaps_consistent());
  }
  a.reset();
  b.reset();
  mpsrt::empty_cache(0);
  const mpsrt::MemorySnapshot snap = mpsrt::memory_snapshot(0);
  EXPECT_TRUE(snap.segments.empty());
  std::vector<std::string> actions;
  for (const mpsrt::TraceInfo& t : snap.trace) actions.push_back(t.action);
  const std::vector<std::string> want = {"segment_alloc", "alloc",          "segment_alloc",
                                         "alloc",         "free_requested", "free_requested",
                                         "segment_free",  "segment_free"};
  ASSERT_EQ(actions, want);
  EXPECT_EQ(snap.trace[0].address, heap_a);
  EXPECT_EQ(snap.trace[0].size, heap_a_size);
  EXPECT_EQ(snap.trace[1].address, at_a);
  EXPECT_EQ(snap.trace[1].size, 1024u);
  ASSERT_TRUE(snap.trace[1].frames != nullptr);
  EXPECT_EQ((*snap.trace[1].frames)[0].filename, "test_allocator.cpp");
  EXPECT_EQ(snap.trace[3].address, at_b);
  EXPECT_EQ(snap.trace[3].size, 20 * kMiB);
  EXPECT_EQ(snap.trace[4].address, at_a);
  EXPECT_EQ(snap.trace[5].address, at_b);
  for (size_t i = 1; i < snap.trace.size(); ++i) {
    EXPECT_GE(snap.trace[i].time_us, snap.trace[i - 1].time_us);
  }
  std::vector<uint64_t> freed = {snap.trace[6].address, snap.trace[7].address};
  std::sort(freed.begin(), freed.end());
  std::vector<uint64_t> made = {heap_a, at_b};
  std::sort(made.begin(), made.end());
  EXPECT_EQ(freed, made);
  // Stopping clears the trace and records nothing more.
  mpsrt::record_memory_history(false, 0, nullptr, 0);
  Buffer c(1000);
  EXPECT_TRUE(mpsrt::memory_snapshot(0).trace.empty());
  EXPECT_EQ(frame_calls, 2);
}

TEST_P(AllocatorTest, HistoryKeepsTheNewestMaxEntries) {
  mpsrt::record_memory_history(true, 3, nullptr, 0);
  std::vector<uint64_t> addrs;
  std::vector<Buffer> bufs;
  for (int i = 0; i < 5; ++i) {
    bufs.emplace_back(512);
    addrs.push_back(bufs.back().address());
  }
  for (Buffer& b : bufs) b.reset();  // 5 allocs, then 5 frees in allocation order
  const mpsrt::MemorySnapshot snap = mpsrt::memory_snapshot(0);
  ASSERT_EQ(snap.trace.size(), 3u);
  for (const mpsrt::TraceInfo& t : snap.trace) EXPECT_EQ(t.action, "free_requested");
  EXPECT_EQ(snap.trace[2].address, addrs[4]);
  EXPECT_TRUE(snap.trace[2].frames == nullptr || snap.trace[2].frames->empty());
  mpsrt::record_memory_history(false, 0, nullptr, 0);
}

TEST_P(AllocatorTest, HistoryRecordsOutOfMemory) {
  const double prev = mpsrt::set_per_process_memory_fraction(fraction_for(64 * kMiB), 0);
  mpsrt::record_memory_history(true, 0, nullptr, 0);
  EXPECT_THROW(Buffer(100 * kMiB), mpsrt::OutOfMemory);
  const mpsrt::MemorySnapshot snap = mpsrt::memory_snapshot(0);
  ASSERT_FALSE(snap.trace.empty());
  EXPECT_EQ(snap.trace.back().action, "oom");
  EXPECT_EQ(snap.trace.back().size, 100 * kMiB);
  mpsrt::record_memory_history(false, 0, nullptr, 0);
  mpsrt::set_per_process_memory_fraction(prev, 0);
}

// ------------------------------------------------------------------------------------------

TEST_P(AllocatorTest, GetPerProcessMemoryFractionReadsWhatSetWrote) {
  const double prev = mpsrt::get_per_process_memory_fraction(0);
  EXPECT_EQ(mpsrt::set_per_process_memory_fraction(1.25, 0), prev);
  EXPECT_EQ(mpsrt::get_per_process_memory_fraction(-1), 1.25);
  EXPECT_THROW(mpsrt::set_per_process_memory_fraction(2.5, 0), std::invalid_argument);
  EXPECT_EQ(mpsrt::get_per_process_memory_fraction(0), 1.25);
  mpsrt::set_per_process_memory_fraction(prev, 0);
}

TEST_P(AllocatorTest, ResetAccumulatedStatsZeroesTotalsAndCountersOnly) {
  { Buffer a(20 * kMiB); }
  mpsrt::empty_cache(0);
  Buffer keep(4096);
  const auto before = mpsrt::memory_stats(0);
  EXPECT_GE(before.at("allocation.all.allocated"), 2);
  EXPECT_GE(before.at("num_device_free"), 1);
  EXPECT_GE(before.at("num_sync_all_streams"), 1);
  mpsrt::reset_accumulated_memory_stats(0);
  const auto after = mpsrt::memory_stats(0);
  for (const auto& [k, v] : after) {
    const bool total = k.size() > 10 && (k.rfind(".allocated") == k.size() - 10 ||
                                         (k.size() > 6 && k.rfind(".freed") == k.size() - 6));
    if (total || k.rfind("num_", 0) == 0) {
      EXPECT_EQ(v, 0) << k;
    } else if (k != "max_split_size") {
      EXPECT_EQ(v, before.at(k)) << k;
    }
  }
}

TEST_P(AllocatorTest, MemGetInfoIsTotalMinusWhatTheProcessHolds) {
  const auto [free, total] = mpsrt::mem_get_info(0);
  EXPECT_EQ(total, mpsrt::get_device_properties(0).total_memory);
  EXPECT_EQ(free, total - mpsrt::driver_allocated_memory(0));
  Buffer b(40 * kMiB);
  EXPECT_LE(mpsrt::mem_get_info(0).first, free - 40 * kMiB);
}

TEST_P(AllocatorTest, SyncAllStreamsCountsEmptyCacheAndTheLastRung) {
  const int64_t n = stat("num_sync_all_streams");
  mpsrt::empty_cache(0);
  EXPECT_EQ(stat("num_sync_all_streams"), n + 1);
  const double prev = mpsrt::set_per_process_memory_fraction(fraction_for(64 * kMiB), 0);
  EXPECT_THROW(Buffer(100 * kMiB), mpsrt::OutOfMemory);
  EXPECT_EQ(stat("num_sync_all_streams"), n + 2);
  mpsrt::set_per_process_memory_fraction(prev, 0);
}

TEST_P(AllocatorTest, HistoryOptionsFreeStacksSegmentsAndSkips) {
  std::string who = "alloc_site";
  mpsrt::HistoryOptions o;
  o.context = mpsrt::HistoryContext::All;
  o.skip_actions = {"segment_alloc"};
  o.frames_fn = [&who] {
    return std::make_shared<const mpsrt::StackFrames>(mpsrt::StackFrames{{"f.py", 1, who}});
  };
  mpsrt::record_memory_history(true, o, 0);
  Buffer a(20 * kMiB);
  const uint64_t at = a.address();
  const mpsrt::MemorySnapshot mid = mpsrt::memory_snapshot(0);
  ASSERT_EQ(mid.segments.size(), 1u);
  ASSERT_TRUE(mid.segments[0].frames != nullptr);
  EXPECT_EQ((*mid.segments[0].frames)[0].name, "alloc_site");
  who = "free_site";
  a.reset();
  who = "empty_cache_site";
  mpsrt::empty_cache(0);
  const mpsrt::MemorySnapshot snap = mpsrt::memory_snapshot(0);
  std::vector<std::string> got;
  for (const mpsrt::TraceInfo& t : snap.trace) {
    ASSERT_TRUE(t.frames != nullptr) << t.action;
    got.push_back(t.action + "@" + (*t.frames)[0].name);
  }
  const std::vector<std::string> want = {"alloc@alloc_site", "free_requested@free_site",
                                         "free_completed@free_site",
                                         "segment_free@empty_cache_site"};
  EXPECT_EQ(got, want);
  EXPECT_EQ(snap.trace[0].address, at);
  // clear_history drops what was recorded; an unknown action is refused, nothing changed.
  o.clear_history = true;
  mpsrt::record_memory_history(true, o, 0);
  EXPECT_TRUE(mpsrt::memory_snapshot(0).trace.empty());
  o.skip_actions = {"bogus"};
  try {
    mpsrt::record_memory_history(true, o, 0);
    ADD_FAILURE() << "an unknown skip action was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[allocator] skip_actions: unknown action 'bogus'"),
              std::string::npos);
  }
  mpsrt::record_memory_history(false, mpsrt::HistoryOptions{}, 0);
}

// torch.cuda's context="state": each live block (and segment) keeps its allocation's stack;
// the trace keeps none, and a freed block keeps nothing.
TEST_P(AllocatorTest, HistoryStateContextKeepsOnlyLiveBlocksAllocationStacks) {
  std::string who = "alloc_a";
  mpsrt::HistoryOptions o;
  o.context = mpsrt::HistoryContext::State;
  o.frames_fn = [&who] {
    return std::make_shared<const mpsrt::StackFrames>(mpsrt::StackFrames{{"f.py", 1, who}});
  };
  mpsrt::record_memory_history(true, o, 0);
  Buffer a(4 * kMiB);  // both in one 32 MiB heap of the large pool
  who = "alloc_b";
  Buffer b(2 * kMiB);
  const uint64_t at_a = a.address(), at_b = b.address();
  who = "free_a";
  a.reset();
  const mpsrt::MemorySnapshot snap = mpsrt::memory_snapshot(0);
  mpsrt::record_memory_history(false, mpsrt::HistoryOptions{}, 0);
  ASSERT_EQ(snap.segments.size(), 1u);
  ASSERT_TRUE(snap.segments[0].frames != nullptr);
  EXPECT_EQ((*snap.segments[0].frames)[0].name, "alloc_a");  // the heap's first allocation
  int live = 0;
  for (const mpsrt::BlockInfo& bl : snap.segments[0].blocks) {
    if (bl.address == at_b) {
      ++live;
      ASSERT_TRUE(bl.allocated && bl.frames != nullptr);
      EXPECT_EQ((*bl.frames)[0].name, "alloc_b");
    } else {
      EXPECT_FALSE(bl.allocated);
      EXPECT_TRUE(bl.frames == nullptr) << "a freed block keeps no stack";
    }
  }
  EXPECT_EQ(live, 1);
  ASSERT_FALSE(snap.trace.empty());
  for (const mpsrt::TraceInfo& t : snap.trace) {
    EXPECT_TRUE(t.frames == nullptr) << t.action << ": no trace stacks with context state";
  }
  EXPECT_TRUE(std::any_of(snap.trace.begin(), snap.trace.end(), [&](const mpsrt::TraceInfo& t) {
    return t.action == "free_requested" && t.address == at_a;
  }));
}

// A function of this file that the unwinder must find on the stack (not inlined).
__attribute__((noinline)) mpsrt::StackFrames native_stack_here() {
  mpsrt::StackFrames s = mpsrt::native_stack();
  asm volatile("" ::: "memory");  // no tail call: this frame stays on the stack
  return s;
}

// stacks="all": native frames are return addresses, named on demand as torch's dladdr
// symbolizer names them (the file, the offset in it minus 1, the demangled function), from
// the file's symbol table, so that functions that are not exported are named too.
TEST(NativeStack, FramesAreReturnAddressesNamedOnDemand) {
  const mpsrt::StackFrames s = native_stack_here();
  ASSERT_GE(s.size(), 2u);
  for (const mpsrt::StackFrame& f : s) {
    EXPECT_NE(f.pc, 0u);
    EXPECT_TRUE(f.name.empty() && f.filename.empty()) << "symbolised when recorded";
  }
  const mpsrt::StackFrame top = mpsrt::symbolize_native_frame(s[0].pc);
  EXPECT_EQ(top.name, "(anonymous namespace)::native_stack_here()");
  EXPECT_NE(top.filename.find("mpsrt_tests"), std::string::npos) << top.filename;
  EXPECT_GT(top.line, 0);
  const mpsrt::StackFrame again = mpsrt::symbolize_native_frame(s[0].pc);
  EXPECT_EQ(again.name, top.name);
  EXPECT_EQ(again.line, top.line);
  // The test body called it: its frame is next (gtest names it Class_Name_Test::TestBody).
  const mpsrt::StackFrame caller = mpsrt::symbolize_native_frame(s[1].pc);
  EXPECT_NE(caller.name.find("FramesAreReturnAddressesNamedOnDemand"), std::string::npos)
      << caller.name;
  // An address in no loaded file: torch's words.
  EXPECT_EQ(mpsrt::symbolize_native_frame(16).name, "<unwind unsupported>");
}

// ------------------------------------------------------------------------------ concurrency

TEST_P(AllocatorTest, ConcurrentAllocAndFreeNeverOverlap) {
  constexpr int kThreads = 4;
  constexpr int kOps = 1500;
  std::mutex mu;
  std::map<uint64_t, uint64_t> live;  // address -> end
  std::atomic<int> failures{0};
  std::atomic<int64_t> allocations{0};
  std::string first_failure;
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (failures.fetch_add(1) == 0) first_failure = what;
  };
  auto add_range = [&](uint64_t a, uint64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    auto next = live.lower_bound(a);
    if (next != live.end() && next->first < e) return false;
    if (next != live.begin() && std::prev(next)->second > a) return false;
    live.emplace(a, e);
    return true;
  };
  auto remove_range = [&](uint64_t a) {
    std::lock_guard<std::mutex> lock(mu);
    live.erase(a);
  };
  auto worker = [&](int t) {
    std::mt19937_64 rng(1234 + static_cast<uint64_t>(t));
    struct Live {
      Buffer buf;
      uint8_t tag;
    };
    std::vector<Live> mine;
    auto drop = [&](size_t i) {
      Live& l = mine[i];
      if (auto* p = static_cast<uint8_t*>(l.buf.host_ptr())) {
        if (p[0] != l.tag || p[l.buf.nbytes() - 1] != l.tag) {
          fail("thread " + std::to_string(t) + ": a buffer's bytes were overwritten");
        }
      }
      remove_range(l.buf.address());
      std::swap(mine[i], mine.back());
      mine.pop_back();
    };
    for (int op = 0; op < kOps && failures.load() == 0; ++op) {
      if (!mine.empty() && (mine.size() >= 12 || rng() % 2 == 0)) {
        drop(rng() % mine.size());
        continue;
      }
      const uint64_t pick = rng() % 100;
      const size_t n = pick < 70   ? 1 + rng() % (64 * kKiB)
                       : pick < 90 ? 64 * kKiB + rng() % (2 * kMiB)
                       : pick < 98 ? 2 * kMiB + rng() % (8 * kMiB)
                                   : 10 * kMiB + rng() % (14 * kMiB);
      Buffer b(n);
      allocations.fetch_add(1);
      if (!b.defined() || b.nbytes() != n || b.address() % 512 != 0) {
        fail("thread " + std::to_string(t) + ": bad buffer for " + std::to_string(n) + " B");
        break;
      }
      if (!add_range(b.address(), b.address() + n)) {
        fail("thread " + std::to_string(t) + ": a new buffer overlaps a live one");
        break;
      }
      const auto tag = static_cast<uint8_t>(1 + t * 50 + op % 50);
      if (auto* p = static_cast<uint8_t*>(b.host_ptr())) p[0] = p[n - 1] = tag;
      mine.push_back({std::move(b), tag});
    }
    while (!mine.empty()) drop(mine.size() - 1);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_TRUE(live.empty());
  EXPECT_EQ(mpsrt::current_allocated_memory(0), 0u);
  EXPECT_EQ(stat("allocated_bytes.all.current"), 0);
  EXPECT_EQ(stat("requested_bytes.all.current"), 0);
  EXPECT_EQ(stat("allocation.all.current"), 0);
  EXPECT_EQ(stat("allocation.all.allocated"), allocations.load());
  EXPECT_EQ(stat("allocation.all.freed"), allocations.load());
  EXPECT_EQ(stat("allocated_bytes.all.allocated"), stat("allocated_bytes.all.freed"));
  EXPECT_EQ(stat("inactive_split.all.current"), 0);
  EXPECT_TRUE(heaps_consistent());
  mpsrt::empty_cache(0);
  EXPECT_EQ(mpsrt::reserved_memory(0), 0u);
  EXPECT_EQ(stat("num_device_alloc"), stat("num_device_free"));
  if (is_cpu()) {
    EXPECT_EQ(mpsrt::driver_allocated_memory(0), 0u);
  }
}

// Threads on different streams queue fills into their buffers and free some of them before the
// fill has run. A block may only move to another stream once the fill is done, so every buffer
// still holds its owner's pattern when its owner checks it.
TEST_P(AllocatorTest, ConcurrentStreamsNeverShareMemoryWithQueuedWork) {
  constexpr int kThreads = 4;
  constexpr int kOps = 600;
  std::atomic<int> failures{0};
  std::mutex mu;
  std::string first_failure;
  auto worker = [&](int t) {
    mpsrt::Stream s = mpsrt::stream_from_pool(0, 0);
    std::mt19937_64 rng(77 + static_cast<uint64_t>(t));
    struct Live {
      Buffer buf;
      uint8_t tag;
    };
    std::vector<Live> mine;
    for (int op = 0; op < kOps && failures.load() == 0; ++op) {
      if (!mine.empty() && (mine.size() >= 8 || rng() % 2 == 0)) {
        const size_t i = rng() % mine.size();
        if (rng() % 2 == 0) {
          s.synchronize();  // the fill is done: check the bytes
          const auto* p = static_cast<const uint8_t*>(mine[i].buf.host_ptr());
          const size_t n = mine[i].buf.nbytes();
          if (p != nullptr && (p[0] != mine[i].tag || p[n - 1] != mine[i].tag)) {
            std::lock_guard<std::mutex> lock(mu);
            if (failures.fetch_add(1) == 0) {
              first_failure = "thread " + std::to_string(t) + ": a buffer of " + std::to_string(n) +
                              " B holds another stream's bytes";
            }
          }
        }  // else: freed with its fill still queued
        std::swap(mine[i], mine.back());
        mine.pop_back();
        continue;
      }
      const uint64_t pick = rng() % 10;
      const size_t n = pick < 6   ? 1 + rng() % (64 * kKiB)
                       : pick < 9 ? 64 * kKiB + rng() % (2 * kMiB)
                                  : 10 * kMiB + rng() % (4 * kMiB);
      Buffer b(n, s);
      const auto tag = static_cast<uint8_t>(1 + t * 60 + op % 60);
      b.fill(tag, 1, s);
      if (rng() % 4 == 0) s.commit(mpsrt::SyncType::Commit);
      mine.push_back({std::move(b), tag});
    }
    mine.clear();
    s.synchronize();
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_EQ(mpsrt::current_allocated_memory(0), 0u);
  EXPECT_EQ(stat("allocation.all.current"), 0);
  mpsrt::synchronize(0);
  mpsrt::empty_cache(0);
  EXPECT_EQ(mpsrt::reserved_memory(0), 0u) << "a heap stayed after all streams finished";
  EXPECT_TRUE(heaps_consistent());
}

INSTANTIATE_TEST_SUITE_P(AllocatorOn, AllocatorTest, ::testing::ValuesIn(usable_backends()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
