// Buffer views (mpsrt/allocator.h, Buffer::view): a Buffer over a byte range of another, sharing
// its memory and keeping it alive; fills, copies and random ops through a view touch exactly its
// bytes; the allocator counts the memory once; record_stream on a view protects the whole
// allocation. Every test runs on each backend that is built and available.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/access.h"
#include "core/runtime.h"
#include "core/stream.h"
#include "mpsrt/mpsrt.h"
#include "stream_gate.h"

namespace {

using namespace std::chrono_literals;
using mpsrt::Buffer;
using mpsrt::RandomSpec;
using mpsrt::detail::Runtime;
using mpsrt::detail::StreamImpl;
using mpsrt::test::StreamGate;

constexpr size_t kKiB = size_t(1) << 10;
constexpr size_t kMiB = size_t(1) << 20;

int64_t stat(const std::string& key) {
  return mpsrt::memory_stats(0).at(key);
}

// The bytes of a host-visible Buffer after the device's pending work.
std::vector<uint8_t> bytes_of(const Buffer& b) {
  mpsrt::synchronize(0);
  const auto* p = static_cast<const uint8_t*>(b.host_ptr());
  EXPECT_NE(p, nullptr);
  return p ? std::vector<uint8_t>(p, p + b.nbytes()) : std::vector<uint8_t>{};
}

void set_bytes(Buffer& b, uint8_t v) {
  std::vector<uint8_t> host(b.nbytes(), v);
  b.copy_from_host(host.data(), host.size());
}

class ViewTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string backend = GetParam();
    const mpsrt::detail::EnvLookup lookup = [&backend](const char* name) -> const char* {
      return std::strcmp(name, "MPSRT_BACKEND") == 0 ? backend.c_str() : nullptr;
    };
    Runtime::reset(&lookup);
  }
  void TearDown() override { Runtime::reset(nullptr); }
};

TEST_P(ViewTest, AViewIsTheSameMemoryAtAnOffset) {
  Buffer base(256);
  const uint64_t allocated = mpsrt::current_allocated_memory(0);
  const int64_t allocs = stat("allocation.all.allocated");
  Buffer v = base.view(64, 32);
  ASSERT_TRUE(v.defined());
  EXPECT_EQ(v.nbytes(), 32u);
  EXPECT_EQ(v.offset(), 64u);
  EXPECT_EQ(v.address(), base.address() + 64);
  EXPECT_EQ(v.device(), base.device());
  EXPECT_EQ(v.stream(), base.stream());
  if (base.host_ptr() != nullptr) {
    EXPECT_EQ(v.host_ptr(), static_cast<uint8_t*>(base.host_ptr()) + 64);
  }
  EXPECT_TRUE(v.shared());
  EXPECT_TRUE(base.shared());
  // Counted once: no allocation, no bytes.
  EXPECT_EQ(mpsrt::current_allocated_memory(0), allocated);
  EXPECT_EQ(stat("allocation.all.allocated"), allocs);
  // A view of a view: offsets relative to the view, composed.
  Buffer w = v.view(8, 8);
  EXPECT_EQ(w.offset(), 72u);
  EXPECT_EQ(w.address(), base.address() + 72);
  // The whole range and the empty range at the end are valid.
  EXPECT_EQ(base.view(0, 256).address(), base.address());
  Buffer end = base.view(256, 0);
  EXPECT_TRUE(end.defined());
  EXPECT_EQ(end.nbytes(), 0u);
  end.fill(1, 1, mpsrt::default_stream(0));  // nothing to do, nothing written
  Buffer none;
  EXPECT_FALSE(none.view(0, 0).defined());
}

TEST_P(ViewTest, FillsThroughAViewTouchOnlyItsBytes) {
  Buffer base(256);
  set_bytes(base, 0x11);
  Buffer v = base.view(64, 32);
  v.fill(0xABCD, 2, mpsrt::default_stream(0));
  const std::vector<uint8_t> b = bytes_of(base);
  for (size_t i = 0; i < b.size(); ++i) {
    const uint8_t want = i >= 64 && i < 96 ? (i % 2 == 0 ? 0xCD : 0xAB) : 0x11;
    ASSERT_EQ(b[i], want) << "byte " << i;
  }
  // Host writes through a view land in the base too.
  Buffer head = base.view(0, 4);
  set_bytes(head, 0x7F);
  EXPECT_EQ(bytes_of(base)[3], 0x7F);
  EXPECT_EQ(bytes_of(base)[4], 0x11);
}

TEST_P(ViewTest, CopiesBetweenViewsOfOneAndOfTwoBuffers) {
  Buffer a(128), b(128);
  std::vector<uint8_t> ramp(128);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<uint8_t>(i);
  a.copy_from_host(ramp.data(), ramp.size());
  set_bytes(b, 0);
  const mpsrt::Stream s = mpsrt::default_stream(0);
  b.view(16, 32).copy_from(a.view(64, 32), s);  // into another buffer
  a.view(0, 16).copy_from(a.view(100, 16), s);  // within one buffer, disjoint ranges
  const std::vector<uint8_t> ab = bytes_of(a), bb = bytes_of(b);
  for (size_t i = 0; i < 128; ++i) {
    ASSERT_EQ(bb[i], i >= 16 && i < 48 ? static_cast<uint8_t>(i + 48) : 0) << "b byte " << i;
    ASSERT_EQ(ab[i], i < 16 ? static_cast<uint8_t>(i + 100) : static_cast<uint8_t>(i))
        << "a byte " << i;
  }
}

TEST_P(ViewTest, RandomFillOfAViewEqualsTheSameFillOfAFreshBuffer) {
  RandomSpec r;
  r.op = RandomSpec::Op::Bits;
  r.dtype = RandomSpec::DType::U32;
  const mpsrt::Stream s = mpsrt::default_stream(0);
  for (size_t offset : {size_t(0), size_t(4), size_t(12), size_t(1000)}) {
    Buffer base(2048), fresh(64);
    set_bytes(base, 0x5A);
    Buffer v = base.view(offset, 64);
    mpsrt::Generator g1(0), g2(0);
    g1.manual_seed(1234);
    g2.manual_seed(1234);
    mpsrt::random_fill(v, 16, r, g1, s);
    mpsrt::random_fill(fresh, 16, r, g2, s);
    const std::vector<uint8_t> all = bytes_of(base), want = bytes_of(fresh);
    ASSERT_EQ(std::vector<uint8_t>(all.begin() + offset, all.begin() + offset + 64), want)
        << "offset " << offset;
    for (size_t i = 0; i < all.size(); ++i) {
      if (i < offset || i >= offset + 64) {
        ASSERT_EQ(all[i], 0x5A) << "offset " << offset << " i " << i;
      }
    }
  }
}

TEST_P(ViewTest, AViewKeepsTheMemoryAliveAfterTheBaseIsReset) {
  const uint64_t before = mpsrt::current_allocated_memory(0);
  Buffer base(kKiB);
  const uint64_t at = base.address();
  const uint64_t with_base = mpsrt::current_allocated_memory(0);
  Buffer v = base.view(512, 256);
  base.reset();
  EXPECT_FALSE(base.defined());
  EXPECT_FALSE(v.shared()) << "the view is the last holder";
  EXPECT_EQ(mpsrt::current_allocated_memory(0), with_base) << "freed while a view lives";
  Buffer other(kKiB);
  EXPECT_NE(other.address(), at) << "the viewed memory was handed out again";
  other.reset();
  v.fill(0x42, 1, mpsrt::default_stream(0));
  for (uint8_t x : bytes_of(v)) ASSERT_EQ(x, 0x42);
  // Moves carry the hold; the last reset frees.
  Buffer moved(std::move(v));
  EXPECT_FALSE(v.defined());
  EXPECT_EQ(moved.address(), at + 512);
  Buffer assigned;
  assigned = std::move(moved);
  EXPECT_EQ(mpsrt::current_allocated_memory(0), with_base);
  assigned.reset();
  EXPECT_EQ(mpsrt::current_allocated_memory(0), before);
}

TEST_P(ViewTest, ViewsOfViewsOutliveEveryIntermediate) {
  const uint64_t before = mpsrt::current_allocated_memory(0);
  Buffer w;
  {
    Buffer base(4 * kKiB);
    Buffer v = base.view(kKiB, 2 * kKiB);
    w = v.view(kKiB, 16);
  }
  EXPECT_GT(mpsrt::current_allocated_memory(0), before);
  w.fill(0x99, 1, mpsrt::default_stream(0));
  for (uint8_t x : bytes_of(w)) ASSERT_EQ(x, 0x99);
  w.reset();
  EXPECT_EQ(mpsrt::current_allocated_memory(0), before);
}

TEST_P(ViewTest, RecordStreamOnAViewProtectsTheWholeAllocation) {
  StreamImpl* other = mpsrt::detail::Access::impl(mpsrt::stream_from_pool(0, 0));
  const mpsrt::Stream s1 = mpsrt::detail::Access::make_stream(other);
  StreamGate gate;
  gate.block(*other);
  Buffer a(3 * kMiB);
  const uint64_t at = a.address();
  {
    Buffer v = a.view(kMiB, kKiB);
    v.record_stream(s1);  // a small range in the middle
  }
  a.reset();
  Buffer b(3 * kMiB);
  EXPECT_NE(b.address(), at) << "reused while a stream recorded on a view still had work";
  // A fill on the other stream through a view records that stream for the whole block too.
  Buffer c(kKiB);
  const uint64_t at_c = c.address();
  c.view(0, 16).fill(7, 1, s1);
  other->commit(mpsrt::SyncType::Commit);
  c.reset();
  Buffer d(kKiB);
  EXPECT_NE(d.address(), at_c) << "reused while the other stream's fill through a view was queued";
  gate.release();
  other->synchronize();
}

TEST_P(ViewTest, ConcurrentViewsAndResetsFreeExactlyOnce) {
  const uint64_t before = mpsrt::current_allocated_memory(0);
  for (int round = 0; round < 20; ++round) {
    auto base = std::make_unique<Buffer>(64 * kKiB);
    std::vector<Buffer> views(8);
    for (size_t i = 0; i < views.size(); ++i) views[i] = base->view(i * kKiB, kKiB);
    std::vector<std::thread> threads;
    std::atomic<int> go{0};
    for (size_t t = 0; t < views.size(); ++t) {
      threads.emplace_back([&, t] {
        while (go.load() == 0) std::this_thread::yield();
        for (int k = 0; k < 50; ++k) {
          Buffer more = views[t].view(0, 512);
          more.reset();
        }
        views[t].reset();
      });
    }
    go.store(1);
    base.reset();  // concurrently with the threads' views and resets
    for (std::thread& t : threads) t.join();
    ASSERT_EQ(mpsrt::current_allocated_memory(0), before) << "round " << round;
  }
}

std::vector<std::string> usable_backends() {
  return mpsrt::available_backends();
}

INSTANTIATE_TEST_SUITE_P(ViewsOn, ViewTest, ::testing::ValuesIn(usable_backends()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
