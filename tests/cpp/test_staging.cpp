// Host <-> device copies through the public API (Buffer::copy_from_host / copy_to_host) and the
// staging pool behind them on discrete memory. Every test runs on each backend that is built and
// available, and once more on vulkan with the discrete memory model forced
// (MPSRT_VULKAN_MEMORY=discrete), with a small pool (MPSRT_STAGING_BYTES=65536: 4 chunks of
// 16 KiB) so that copies many times the pool pass through it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/runtime.h"
#include "mpsrt/mpsrt.h"

namespace {

using mpsrt::Buffer;
using mpsrt::detail::Runtime;

constexpr size_t kPool = 65536;
constexpr size_t kChunk = kPool / 4;

int64_t stat(const std::string& key) {
  return mpsrt::memory_stats(0).at(key);
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

std::vector<uint8_t> read(const Buffer& b) {
  std::vector<uint8_t> out(b.nbytes());
  b.copy_to_host(out.data(), out.size());
  return out;
}

// "cpu", "vulkan", ... and "vulkan_discrete" (vulkan with MPSRT_VULKAN_MEMORY=discrete).
class StagingTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string backend = GetParam();
    const bool discrete = backend == "vulkan_discrete";
    if (discrete) backend = "vulkan";
    env_ = {{"MPSRT_BACKEND", backend}, {"MPSRT_STAGING_BYTES", std::to_string(kPool)}};
    if (discrete) env_["MPSRT_VULKAN_MEMORY"] = "discrete";
    const mpsrt::detail::EnvLookup lookup = [this](const char* name) -> const char* {
      auto it = env_.find(name);
      return it == env_.end() ? nullptr : it->second.c_str();
    };
    Runtime::reset(&lookup);
    unified_ = mpsrt::get_device_properties(0).unified_memory;
    if (discrete) {
      EXPECT_FALSE(unified_);
    }
  }
  void TearDown() override { Runtime::reset(nullptr); }

  std::map<std::string, std::string> env_;
  bool unified_ = true;
};

TEST_P(StagingTest, TheMemoryModelSaysWhetherTheHostSeesBuffers) {
  Buffer b(4096);
  EXPECT_EQ(b.host_ptr() != nullptr, unified_);
  EXPECT_NE(b.address(), 0u);
  if (unified_) {
    EXPECT_EQ(reinterpret_cast<uint64_t>(b.host_ptr()), b.address());
  }
}

TEST_P(StagingTest, RoundTripsBelowAtAndAboveTheChunkAndThePool) {
  for (size_t n : {size_t(1), size_t(1000), kChunk - 1, kChunk, kChunk + 1, kPool - 3, kPool,
                   5 * kPool + 7, size_t(1) << 20}) {
    SCOPED_TRACE(n);
    const std::vector<uint8_t> src = pattern(n, static_cast<uint32_t>(n));
    Buffer b(n);
    b.copy_from_host(src.data(), n);
    EXPECT_EQ(read(b), src);
    // Through a device copy too: what the host wrote is what the device reads.
    Buffer c(n);
    c.copy_from(b, mpsrt::current_stream());
    EXPECT_EQ(read(c), src);
  }
}

TEST_P(StagingTest, HostCopiesComeAfterTheDevicesPendingWork) {
  const size_t n = 3 * kPool + 100;
  Buffer b(n);
  b.fill(0x5A, 1, mpsrt::current_stream());  // not waited for
  EXPECT_EQ(read(b), std::vector<uint8_t>(n, 0x5A));
  // A fill on another stream, then the host's bytes: the host's win.
  Buffer c(n);
  mpsrt::Stream side = mpsrt::stream_from_pool();
  c.fill(0x11, 1, side);
  const std::vector<uint8_t> src = pattern(n, 7);
  c.copy_from_host(src.data(), n);
  EXPECT_EQ(read(c), src);
}

TEST_P(StagingTest, ViewsCopyOnlyTheirBytes) {
  const size_t n = 2 * kPool + 13;
  Buffer base(n);
  const std::vector<uint8_t> zeros(n, 0);
  base.copy_from_host(zeros.data(), n);
  Buffer v = base.view(kChunk + 3, kPool + 5);  // unaligned offset and size
  const std::vector<uint8_t> src = pattern(v.nbytes(), 3);
  v.copy_from_host(src.data(), src.size());
  EXPECT_EQ(read(v), src);
  std::vector<uint8_t> want = zeros;
  std::copy(src.begin(), src.end(), want.begin() + static_cast<ptrdiff_t>(kChunk + 3));
  EXPECT_EQ(read(base), want);
}

TEST_P(StagingTest, StagingMemoryIsBoundedCountedAndReleasedByEmptyCache) {
  mpsrt::empty_cache(0);
  EXPECT_EQ(stat("staging_bytes.current"), 0);
  mpsrt::reset_peak_memory_stats(0);
  const int64_t copies = stat("num_staged_copies");
  const std::vector<uint8_t> src = pattern(7 * kPool + 1, 11);
  Buffer b(src.size());
  b.copy_from_host(src.data(), src.size());
  EXPECT_EQ(read(b), src);
  const uint64_t driver = mpsrt::driver_allocated_memory(0);
  if (unified_) {
    EXPECT_EQ(stat("staging_bytes.peak"), 0);
    EXPECT_EQ(stat("num_staged_copies"), copies);
    return;
  }
  EXPECT_EQ(stat("num_staged_copies"), copies + 2);
  EXPECT_GT(stat("staging_bytes.current"), 0);
  EXPECT_LE(stat("staging_bytes.peak"), static_cast<int64_t>(kPool));
  EXPECT_EQ(stat("staging_bytes.current") % static_cast<int64_t>(kChunk), 0);
  mpsrt::empty_cache(0);
  EXPECT_EQ(stat("staging_bytes.current"), 0);
  // Staging memory is host memory: not the device's bytes.
  EXPECT_EQ(mpsrt::driver_allocated_memory(0), driver);
  // The pool fills again on the next copy.
  EXPECT_EQ(read(b), src);
  EXPECT_GT(stat("staging_bytes.current"), 0);
  mpsrt::reset_accumulated_memory_stats(0);
  EXPECT_EQ(stat("num_staged_copies"), 0);
}

TEST_P(StagingTest, ConcurrentHostCopiesShareThePool) {
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<int> ok(kThreads, 0);
  mpsrt::reset_peak_memory_stats(0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &ok] {
      for (int round = 0; round < 3; ++round) {
        const std::vector<uint8_t> src = pattern(3 * kPool + static_cast<size_t>(t) * 111 + 1,
                                                 static_cast<uint32_t>(t * 10 + round));
        Buffer b(src.size());
        b.copy_from_host(src.data(), src.size());
        if (read(b) != src) return;
      }
      ok[static_cast<size_t>(t)] = 1;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(std::accumulate(ok.begin(), ok.end(), 0), kThreads);
  EXPECT_LE(stat("staging_bytes.peak"), static_cast<int64_t>(kPool));
}

TEST_P(StagingTest, BadArgumentsAreRefusedAndTheRuntimeStaysUsable) {
  Buffer b(100);
  std::vector<uint8_t> host(101);
  try {
    b.copy_to_host(host.data(), 101);
    ADD_FAILURE() << "a wrong size was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "[buffer] copy_to_host: the destination has 101 bytes but the buffer 100; sizes "
                 "must match");
  }
  try {
    b.copy_to_host(nullptr, 100);
    ADD_FAILURE() << "a null destination was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("null pointer"), std::string::npos) << e.what();
  }
  EXPECT_THROW(b.copy_from_host(host.data(), 99), std::invalid_argument);
  EXPECT_THROW(b.copy_from_host(nullptr, 100), std::invalid_argument);
  // An empty Buffer copies nothing.
  Buffer empty;
  empty.copy_to_host(nullptr, 0);
  empty.copy_from_host(nullptr, 0);
  const std::vector<uint8_t> src = pattern(100, 5);
  b.copy_from_host(src.data(), 100);
  EXPECT_EQ(read(b), src);
}

TEST_P(StagingTest, AddressesAreUniqueAmongLiveBuffers) {
  std::vector<Buffer> live;
  std::set<uint64_t> seen;
  for (size_t n : {size_t(100), size_t(1) << 20, size_t(3) << 20, size_t(12) << 20}) {
    for (int i = 0; i < 3; ++i) {
      live.emplace_back(n);
      EXPECT_TRUE(seen.insert(live.back().address()).second);
    }
  }
  // Ranges do not overlap either.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const Buffer& b : live) ranges.emplace_back(b.address(), b.address() + b.nbytes());
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
}

std::vector<std::string> staging_params() {
  std::vector<std::string> out = mpsrt::available_backends();
  if (std::find(out.begin(), out.end(), "vulkan") != out.end()) out.push_back("vulkan_discrete");
  return out;
}

INSTANTIATE_TEST_SUITE_P(StagingOn, StagingTest, ::testing::ValuesIn(staging_params()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
