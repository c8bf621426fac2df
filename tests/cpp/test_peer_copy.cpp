// Buffer::copy_from across devices (mpsrt/allocator.h): the bytes arrive, the copy is ordered
// after the source device's current stream and the destination stream (as a cross-device
// tensor.copy_ on CUDA), the profiler records it, and a stream of the wrong device is refused.
// Runs on each backend that is built and available with two devices (cpu: MPSRT_CPU_DEVICES=2);
// a backend with one device skips, saying so.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/access.h"
#include "core/runtime.h"
#include "core/stream.h"
#include "mpsrt/mpsrt.h"
#include "stream_gate.h"

namespace {

using mpsrt::Buffer;
using mpsrt::Stream;
using mpsrt::detail::Access;
using mpsrt::detail::Runtime;
using mpsrt::test::StreamGate;

std::vector<uint8_t> read(const Buffer& b) {
  std::vector<uint8_t> host(b.nbytes());
  b.copy_to_host(host.data(), host.size());
  return host;
}

void write(Buffer& b, const std::vector<uint8_t>& host) {
  b.copy_from_host(host.data(), host.size());
}

std::vector<uint8_t> ramp(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + seed);
  return v;
}

class PeerCopyTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string backend = GetParam();
    const mpsrt::detail::EnvLookup lookup = [&backend](const char* name) -> const char* {
      if (std::strcmp(name, "MPSRT_BACKEND") == 0) return backend.c_str();
      return std::strcmp(name, "MPSRT_CPU_DEVICES") == 0 ? "2" : nullptr;
    };
    Runtime::reset(&lookup);
    if (mpsrt::device_count() < 2) {
      GTEST_SKIP() << "needs 2 devices; backend " << backend << " has " << mpsrt::device_count();
    }
  }
  void TearDown() override { Runtime::reset(nullptr); }
};

TEST_P(PeerCopyTest, TheBytesArriveBothWaysAndThroughViews) {
  for (size_t n : {size_t(1), size_t(4096), size_t(3) << 20}) {
    SCOPED_TRACE(n);
    Buffer a(n, mpsrt::default_stream(0));
    Buffer b(n, mpsrt::default_stream(1));
    const std::vector<uint8_t> want = ramp(n, 3);
    write(a, want);
    b.copy_from(a, mpsrt::default_stream(1));
    EXPECT_EQ(read(b), want);
    const std::vector<uint8_t> back = ramp(n, 91);
    write(b, back);
    a.copy_from(b, mpsrt::current_stream(0));
    EXPECT_EQ(read(a), back);
  }
  // Views: exactly the view's bytes move, on a pool stream of the destination.
  Buffer src(256, mpsrt::default_stream(1));
  Buffer dst(256, mpsrt::default_stream(0));
  write(src, ramp(256, 5));
  write(dst, std::vector<uint8_t>(256, 0xEE));
  Buffer into = dst.view(64, 32);
  into.copy_from(src.view(128, 32), mpsrt::stream_from_pool(0, 0));
  std::vector<uint8_t> want(256, 0xEE);
  const std::vector<uint8_t> s = ramp(256, 5);
  std::memcpy(want.data() + 64, s.data() + 128, 32);
  EXPECT_EQ(read(dst), want);
}

// The source device's current stream still has a fill queued behind a blocked callback: the
// copy waits for it (it copies the filled bytes). The destination stream has a fill queued too:
// the copy comes after it (the fill does not overwrite the copied bytes).
TEST_P(PeerCopyTest, OrderedAfterTheSourceCurrentStreamAndTheDestinationStream) {
  constexpr size_t kBytes = 1 << 16;
  Buffer src(kBytes, mpsrt::default_stream(0));
  Buffer dst(kBytes, mpsrt::default_stream(1));
  write(src, std::vector<uint8_t>(kBytes, 0x11));
  const Stream from = mpsrt::stream_from_pool(0, 0);
  const Stream to = mpsrt::stream_from_pool(0, 1);
  const Stream previous = mpsrt::set_current_stream(from);
  StreamGate src_gate, dst_gate;
  src_gate.block(*Access::impl(from));
  src.fill(0x22, 1, from);
  dst_gate.block(*Access::impl(to));
  dst.fill(0x33, 1, to);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    src_gate.release();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    dst_gate.release();
  });
  dst.copy_from(src, to);
  opener.join();
  mpsrt::set_current_stream(previous);
  // Complete when it returns: later work on either stream and the host see the copy.
  EXPECT_EQ(read(dst), std::vector<uint8_t>(kBytes, 0x22));
  src.fill(0x44, 1, from);
  EXPECT_EQ(read(dst), std::vector<uint8_t>(kBytes, 0x22));
}

TEST_P(PeerCopyTest, TheProfilerRecordsIt) {
  Buffer a(1 << 12, mpsrt::default_stream(0));
  Buffer b(1 << 12, mpsrt::default_stream(1));
  a.fill(1, 1, mpsrt::default_stream(0));
  mpsrt::profiler::start(mpsrt::profiler::kInterval);
  b.copy_from(a, mpsrt::default_stream(1));
  mpsrt::profiler::stop();
  const std::string stats = mpsrt::profiler::statistics();
  EXPECT_NE(stats.find("copy_peer"), std::string::npos) << stats;
}

TEST_P(PeerCopyTest, AStreamOfAnotherDeviceThanTheDestinationIsRefused) {
  Buffer a(64, mpsrt::default_stream(0));
  Buffer b(64, mpsrt::default_stream(1));
  a.fill(7, 1, mpsrt::default_stream(0));
  try {
    b.copy_from(a, mpsrt::default_stream(0));
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "[buffer] copy_: the stream is on device 0 but the destination buffer on device "
                 "1; use a stream of the destination's device");
  }
  b.copy_from(a, mpsrt::default_stream(1));  // still usable
  EXPECT_EQ(read(b), std::vector<uint8_t>(64, 7));
}

INSTANTIATE_TEST_SUITE_P(PeerCopyOn, PeerCopyTest, ::testing::ValuesIn(mpsrt::available_backends()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
