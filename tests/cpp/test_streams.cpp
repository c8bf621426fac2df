// Tests of streams and events (mpsrt/stream.h, mpsrt/event.h) and of the cross-stream safety
// of Buffers that commands on other streams use. Every test runs on each backend that is built
// and available; each installs its own environment with Runtime::reset(&env) and restores the
// process's at the end.
//
// Ordering is checked with host callbacks that wait on a Gate (a test-owned latch) rather than
// with sleeps: a stream blocked behind a closed gate cannot make progress, so "B did not run yet"
// is deterministic. Sleeps appear only where the test measures time (elapsed_time) or gives a
// wrongly unblocked stream a chance to show itself; every wait has a generous timeout, so a
// broken runtime fails the test instead of hanging the run.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "core/access.h"
#include "core/runtime.h"
#include "core/stream.h"
#include "mpsrt/mpsrt.h"

namespace mpsrt {
// Readable failure messages for EXPECT_EQ on streams (found by argument-dependent lookup).
void PrintTo(const Stream& s, std::ostream* os) {
  *os << "Stream(device=" << s.device() << ", id=" << s.id() << ", priority=" << s.priority()
      << ")";
}
}  // namespace mpsrt

namespace {

using namespace std::chrono_literals;
using Env = std::map<std::string, std::string>;
using mpsrt::Buffer;
using mpsrt::Event;
using mpsrt::Stream;
using mpsrt::SyncType;
using mpsrt::detail::Runtime;

// How long a test waits for something that must happen before it calls the runtime broken.
constexpr auto kPatience = 10s;

// A latch that host callbacks wait on. wait() gives up after kPatience so that a failing test
// can never block the runtime's teardown forever.
class Gate {
 public:
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  bool wait() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kPatience, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

std::vector<std::string> usable_backends() {
  std::vector<std::string> out;
  for (mpsrt::backend::Backend* b : mpsrt::backend::all_backends()) {
    if (b->is_built() && b->is_available()) out.push_back(b->name());
  }
  return out;
}

// Skips the calling test where the device memory is not host-visible.
#define REQUIRE_HOST_VISIBLE(b)                                 \
  do {                                                          \
    if ((b).host_ptr() == nullptr) {                            \
      GTEST_SKIP() << "device memory is not host-visible here"; \
    }                                                           \
  } while (0)

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs f on another thread; true when it returned within `limit` (the thread is joined later
// by the future's destructor, after the test has opened its gates).
template <class F>
bool finishes_within(std::future<void>& fut, F&& f, std::chrono::milliseconds limit) {
  fut = std::async(std::launch::async, std::forward<F>(f));
  return fut.wait_for(limit) == std::future_status::ready;
}

class StreamTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { use_env({}); }
  void TearDown() override {
    // Whatever a failed assertion left blocked must finish before the runtime is torn down.
    for (auto& g : gates_) g->open();
    gates_.clear();
    Runtime::reset(nullptr);
  }

  bool is_cpu() const { return GetParam() == "cpu"; }

  // Re-initialises the runtime (lazily) from env plus MPSRT_BACKEND=<the parameter>.
  void use_env(Env env) {
    env["MPSRT_BACKEND"] = GetParam();
    const mpsrt::detail::EnvLookup lookup = [&env](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    };
    Runtime::reset(&lookup);
  }

  // Two devices: MPSRT_CPU_DEVICES=2 on cpu; other backends need two devices of their own.
  bool use_two_devices() {
    if (is_cpu()) use_env({{"MPSRT_CPU_DEVICES", "2"}});
    return mpsrt::device_count() >= 2;
  }

  std::shared_ptr<Gate> gate() {
    gates_.push_back(std::make_shared<Gate>());
    return gates_.back();
  }

  // Makes `s` wait behind a host callback until g opens; returns once the callback runs, so the
  // stream is known to be blocked (and committed) when this returns.
  static void block(Stream s, const std::shared_ptr<Gate>& g) {
    auto started = std::make_shared<std::atomic<bool>>(false);
    s.add_callback([g, started] {
      started->store(true);
      g->wait();
    });
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    while (!started->load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(100us);
    }
    ASSERT_TRUE(started->load()) << "a host callback on an idle stream never ran";
  }

  // Host view of a buffer's memory (nullptr where the device memory is not host-visible).
  static const uint32_t* words(const Buffer& b) { return static_cast<uint32_t*>(b.host_ptr()); }
  static ::testing::AssertionResult all_words(const Buffer& b, uint32_t want) {
    const uint32_t* p = words(b);
    if (p == nullptr) return ::testing::AssertionFailure() << "memory is not host-visible";
    for (size_t i = 0; i < b.nbytes() / 4; ++i) {
      if (p[i] != want) {
        return ::testing::AssertionFailure()
               << "word " << i << " is " << std::hex << p[i] << ", expected " << want;
      }
    }
    return ::testing::AssertionSuccess();
  }
  std::vector<std::shared_ptr<Gate>> gates_;
};

class EventTest : public StreamTest {};

// ---------------------------------------------------------------- ordering within a stream

TEST_P(StreamTest, FillsInOneStreamEndWithTheLast) {
  Stream s = mpsrt::stream_from_pool();
  Buffer a(64 << 10, s), b(64 << 10, s);
  REQUIRE_HOST_VISIBLE(a);
  const SyncType kinds[] = {SyncType::None, SyncType::Commit, SyncType::CommitAndContinue,
                            SyncType::CommitAdaptive};
  for (uint32_t i = 1; i <= 300; ++i) {
    a.fill(i, 4, s);
    b.copy_from(a, s);  // reads the fill just before it, never an older or newer one
    s.commit(kinds[i % 4]);
  }
  s.synchronize();
  EXPECT_TRUE(all_words(a, 300));
  EXPECT_TRUE(all_words(b, 300));
  EXPECT_TRUE(s.query());
}

TEST_P(StreamTest, CommitAndWaitReturnsWithTheWorkDone) {
  Stream s = mpsrt::stream_from_pool();
  Buffer a(4096, s);
  REQUIRE_HOST_VISIBLE(a);
  for (uint32_t i = 1; i <= 20; ++i) {
    a.fill(0xC0DE0000u + i, 4, s);
    s.commit(SyncType::CommitAndWait);
    EXPECT_TRUE(all_words(a, 0xC0DE0000u + i)) << "after CommitAndWait number " << i;
    EXPECT_TRUE(s.query());
  }
}

TEST_P(StreamTest, QueryIsFalseWhileACallbackSleepsAndTrueAfterSynchronize) {
  Stream s = mpsrt::stream_from_pool();
  EXPECT_TRUE(s.query()) << "a new stream has nothing pending";
  auto g = gate();
  block(s, g);
  EXPECT_FALSE(s.query());
  std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(s.query()) << "the callback is still waiting";
  g->open();
  s.synchronize();
  EXPECT_TRUE(s.query());
}

TEST_P(StreamTest, EncodedButUncommittedWorkCountsAsPending) {
  Stream s = mpsrt::stream_from_pool();
  Buffer a(4096, s);
  a.fill(1, 4, s);  // batched into the open command buffer, not committed
  EXPECT_FALSE(s.query());
  s.synchronize();  // commits it
  EXPECT_TRUE(s.query());
}

// ---------------------------------------------------------------- independence across streams

TEST_P(StreamTest, ABlockedStreamDoesNotBlockAnother) {
  Stream a = mpsrt::stream_from_pool();
  Stream b = mpsrt::stream_from_pool();
  ASSERT_NE(a, b);
  auto g = gate();
  block(a, g);
  Buffer x(1 << 20, b);
  std::future<void> fut;
  const bool done = finishes_within(
      fut,
      [&] {
        for (uint32_t i = 1; i <= 10; ++i) x.fill(i, 4, b);
        b.synchronize();
      },
      5000ms);
  EXPECT_TRUE(done) << "stream b's synchronize waited for stream a's blocked callback";
  EXPECT_FALSE(a.query()) << "stream a should still be blocked";
  if (done && x.host_ptr() != nullptr) {
    EXPECT_TRUE(all_words(x, 10));
  }
  g->open();
  a.synchronize();
  EXPECT_TRUE(a.query());
}

TEST_P(StreamTest, DefaultStreamIsNotBlockedByAPoolStream) {
  Stream a = mpsrt::stream_from_pool();
  auto g = gate();
  block(a, g);
  std::future<void> fut;
  EXPECT_TRUE(finishes_within(
      fut, [] { mpsrt::default_stream().commit(SyncType::CommitAndWait); }, 5000ms));
  g->open();
  a.synchronize();
}

// ---------------------------------------------------------------- wait_event / wait_stream

// a: [blocked] fill src=7, record e.  b: wait for e, copy src -> dst, record done.
// While a is blocked, b cannot have copied; once a runs, dst is 7.
TEST_P(StreamTest, WaitEventOrdersWorkOnAnotherStream) {
  Stream a = mpsrt::stream_from_pool();
  Stream b = mpsrt::stream_from_pool();
  Buffer src(64 << 10, a), dst(64 << 10, b);
  REQUIRE_HOST_VISIBLE(src);
  src.fill(1, 4, a);
  dst.fill(2, 4, b);
  mpsrt::synchronize();
  auto g = gate();
  block(a, g);
  src.fill(7, 4, a);
  Event e;
  e.record(a);  // stays in a's open command buffer: the wait below must commit it
  b.wait_event(e);
  dst.copy_from(src, b);
  Event done;
  done.record(b);
  EXPECT_FALSE(done.query());
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(done.query()) << "b ran past wait_event while a is still blocked";
  EXPECT_FALSE(e.query());
  EXPECT_TRUE(all_words(dst, 2)) << "b copied before a's fill";
  g->open();
  b.synchronize();
  EXPECT_TRUE(e.query());
  EXPECT_TRUE(done.query());
  EXPECT_TRUE(all_words(dst, 7)) << "b's copy did not see a's fill";
}

TEST_P(StreamTest, WaitStreamOrdersWorkOnAnotherStream) {
  Stream a = mpsrt::stream_from_pool();
  Stream b = mpsrt::stream_from_pool();
  Buffer src(64 << 10, a), dst(64 << 10, b);
  REQUIRE_HOST_VISIBLE(src);
  src.fill(1, 4, a);
  dst.fill(2, 4, b);
  mpsrt::synchronize();
  auto g = gate();
  block(a, g);
  src.fill(9, 4, a);  // not committed: wait_stream covers encoded work too
  b.wait_stream(a);
  dst.copy_from(src, b);
  std::atomic<bool> b_ran{false};
  b.add_callback([&] { b_ran = true; });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(b_ran.load()) << "b ran past wait_stream while a is still blocked";
  EXPECT_FALSE(b.query());
  g->open();
  b.synchronize();
  EXPECT_TRUE(b_ran.load());
  EXPECT_TRUE(all_words(dst, 9)) << "b's copy did not see a's fill";
  b.wait_stream(b);  // waiting on itself is a no-op, not a deadlock
  b.synchronize();
}

TEST_P(StreamTest, WaitOnANeverRecordedEventIsANoOp) {
  Stream b = mpsrt::stream_from_pool();
  Event e;
  b.wait_event(e);
  e.wait(b);
  std::future<void> fut;
  EXPECT_TRUE(finishes_within(
      fut, [&] { b.synchronize(); }, 5000ms));
}

// A pooled timeline event must not be handed to a new Event while commands of its previous
// owner can still be waiting on it: the new owner's (higher) signal would satisfy them early.
TEST_P(StreamTest, ADestroyedEventsWaitersAreNotReleasedByTheNextEvent) {
  Stream a = mpsrt::stream_from_pool();
  Stream b = mpsrt::stream_from_pool();
  Stream c = mpsrt::stream_from_pool();
  auto g = gate();
  block(a, g);
  {
    Event e;
    e.record(a);
    b.wait_event(e);
  }  // e is gone; b still waits for a
  std::atomic<bool> b_ran{false};
  b.add_callback([&] { b_ran = true; });
  {
    Event other;  // may reuse e's pooled timeline event
    other.record(c);
    other.synchronize();
  }
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(b_ran.load()) << "b ran past its wait_event while a is still blocked: a new "
                                "Event's signal released the waiters of a destroyed one";
  g->open();
  b.synchronize();
  EXPECT_TRUE(b_ran.load());
}

TEST_P(StreamTest, WaitStreamIsNotReleasedByALaterEvent) {
  Stream a = mpsrt::stream_from_pool();
  Stream b = mpsrt::stream_from_pool();
  Stream c = mpsrt::stream_from_pool();
  auto g = gate();
  block(a, g);
  b.wait_stream(a);  // uses a temporary event internally
  std::atomic<bool> b_ran{false};
  b.add_callback([&] { b_ran = true; });
  {
    Event other;
    other.record(c);
    other.synchronize();
  }
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(b_ran.load()) << "b ran past wait_stream(a) while a is still blocked";
  g->open();
  b.synchronize();
  EXPECT_TRUE(b_ran.load());
}

TEST_P(StreamTest, WaitEventAcrossDevices) {
  if (!use_two_devices()) GTEST_SKIP() << "needs two devices";
  Stream a = mpsrt::stream_from_pool(0, 0);
  Stream b = mpsrt::stream_from_pool(0, 1);
  ASSERT_EQ(b.device(), 1);
  auto g = gate();
  block(a, g);
  std::atomic<int> order{0};
  std::atomic<int> a_mark{0}, b_mark{0};
  a.add_callback([&] { a_mark = ++order; });
  Event e;
  e.record(a);
  EXPECT_EQ(e.device(), 0);
  b.wait_event(e);
  b.add_callback([&] { b_mark = ++order; });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(b_mark.load(), 0) << "device 1's stream ran past its wait on device 0's event";
  g->open();
  b.synchronize();
  EXPECT_EQ(a_mark.load(), 1);
  EXPECT_EQ(b_mark.load(), 2);
  Event f;
  f.record(a);
  EXPECT_THROW(f.record(b), std::invalid_argument) << "an event belongs to one device";
  Event t0(true), t1(true);
  t0.record(a);
  t1.record(b);
  t0.synchronize();
  t1.synchronize();
  EXPECT_THROW((void)t0.elapsed_time(t1), std::invalid_argument)
      << "elapsed_time between the timestamps of two devices";
}

// ---------------------------------------------------------------- callbacks and errors

TEST_P(StreamTest, AddCallbackRunsAfterPriorWorkOnARuntimeThread) {
  Stream s = mpsrt::stream_from_pool();
  Buffer a(1 << 20, s);
  REQUIRE_HOST_VISIBLE(a);
  a.fill(0, 4, s);
  s.synchronize();
  auto g = gate();
  block(s, g);  // so that the fill below is certainly not done when the callback is added
  a.fill(0x5EED, 4, s);
  std::thread::id ran_on;
  bool saw_fill = false;
  s.add_callback([&] {
    ran_on = std::this_thread::get_id();
    saw_fill = all_words(a, 0x5EED);
  });
  g->open();
  s.synchronize();
  EXPECT_TRUE(saw_fill) << "the callback ran before the fill encoded before it";
  EXPECT_NE(ran_on, std::thread::id());
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST_P(StreamTest, CallbacksRunInOrder) {
  Stream s = mpsrt::stream_from_pool();
  std::vector<int> seen;
  for (int i = 0; i < 100; ++i) s.add_callback([&seen, i] { seen.push_back(i); });
  s.synchronize();
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], i);
}

TEST_P(StreamTest, AddCallbackRejectsAnEmptyFunction) {
  Stream s = mpsrt::stream_from_pool();
  EXPECT_THROW(s.add_callback(std::function<void()>()), std::invalid_argument);
  EXPECT_TRUE(s.query());
}

TEST_P(StreamTest, ACallbackExceptionIsRaisedAtTheNextSynchronize) {
  Stream s = mpsrt::stream_from_pool();
  Stream other = mpsrt::stream_from_pool();
  s.add_callback([] { throw std::runtime_error("callback boom 17"); });
  other.add_callback([] {});
  EXPECT_NO_THROW(other.synchronize()) << "another stream's failure leaked into this one";
  try {
    s.synchronize();
    ADD_FAILURE() << "the failed callback was not reported";
  } catch (const mpsrt::Error& e) {
    EXPECT_TRUE(contains(e.what(), "callback boom 17")) << e.what();
  }
  EXPECT_NO_THROW(s.synchronize()) << "the same failure was reported twice";
  // The stream stays usable.
  Buffer a(4096, s);
  a.fill(33, 4, s);
  std::atomic<bool> ran{false};
  s.add_callback([&] { ran = true; });
  EXPECT_NO_THROW(s.synchronize());
  EXPECT_TRUE(ran.load());
  if (a.host_ptr() != nullptr) {
    EXPECT_TRUE(all_words(a, 33));
  }
  EXPECT_TRUE(s.query());
}

TEST_P(StreamTest, DeviceSynchronizeRaisesACallbackException) {
  Stream s = mpsrt::stream_from_pool();
  s.add_callback([] { throw std::runtime_error("device-level boom 18"); });
  try {
    mpsrt::synchronize();
    ADD_FAILURE() << "mpsrt::synchronize() did not report the failed callback";
  } catch (const mpsrt::Error& e) {
    EXPECT_TRUE(contains(e.what(), "device-level boom 18")) << e.what();
  }
  EXPECT_NO_THROW(mpsrt::synchronize());
  EXPECT_NO_THROW(s.synchronize());
}

// ---------------------------------------------------------------- host operations

// host_op_enter: what a host operation on device memory does first. Once every stream is idle
// it answers from a few loads (Quiet); each way work can be queued after that -- a command
// left open, a commit, a failure, another current stream -- must still be waited for or
// reported, and a bad device index still refused.
TEST_P(StreamTest, HostOpEnterWaitsForWorkQueuedAfterTheStreamsWentIdle) {
  using mpsrt::detail::Quiet;
  mpsrt::synchronize();
  EXPECT_EQ(mpsrt::profiler::host_op_enter(0), 0);  // no session: nothing to time
  EXPECT_TRUE(Quiet::holds(0)) << "every stream is idle, yet the next host op must look again";
  EXPECT_EQ(mpsrt::profiler::host_op_enter(), 0);
  EXPECT_THROW(mpsrt::profiler::host_op_enter(mpsrt::device_count()), std::invalid_argument);

  // A committed command: waited for.
  Stream s = mpsrt::current_stream();
  std::atomic<bool> ran{false};
  s.add_callback([&] {
    std::this_thread::sleep_for(20ms);
    ran = true;
  });
  EXPECT_FALSE(Quiet::holds(0));
  mpsrt::profiler::host_op_enter(0);
  EXPECT_TRUE(ran.load()) << "host_op_enter returned before the committed callback ran";
  EXPECT_TRUE(Quiet::holds(0));

  // A command left open (encoded, not committed): committed and waited for.
  Buffer a(4096, s);
  s.synchronize();
  mpsrt::profiler::host_op_enter(0);
  ASSERT_TRUE(Quiet::holds(0));
  a.fill(0x600D, 4, s);  // encoded, left open
  ASSERT_TRUE(mpsrt::detail::Access::impl(s)->has_open_work());
  EXPECT_FALSE(Quiet::holds(0));
  mpsrt::profiler::host_op_enter(0);
  EXPECT_TRUE(s.query());
  if (a.host_ptr() != nullptr) {
    EXPECT_TRUE(all_words(a, 0x600D));
  }

  // A failure: raised by the next host op, once.
  s.add_callback([] { throw std::runtime_error("host op boom 21"); });
  try {
    mpsrt::profiler::host_op_enter(0);
    ADD_FAILURE() << "the failed callback was not reported";
  } catch (const mpsrt::Error& e) {
    EXPECT_TRUE(contains(e.what(), "host op boom 21")) << e.what();
  }
  EXPECT_EQ(mpsrt::profiler::host_op_enter(0), 0);
  EXPECT_TRUE(Quiet::holds(0));

  // Another stream made current after the streams went idle: its work is waited for.
  Stream p = mpsrt::stream_from_pool();
  mpsrt::set_current_stream(p);
  std::atomic<bool> p_ran{false};
  p.add_callback([&] {
    std::this_thread::sleep_for(20ms);
    p_ran = true;
  });
  mpsrt::profiler::host_op_enter(0);
  EXPECT_TRUE(p_ran.load());
  mpsrt::set_current_stream(s);
}

// Work on a stream that is not current keeps the streams from being known idle, but a host op
// waits for its own current stream only.
TEST_P(StreamTest, HostOpEnterDoesNotWaitForOtherStreams) {
  mpsrt::synchronize();
  mpsrt::profiler::host_op_enter(0);
  Stream other = mpsrt::stream_from_pool();
  auto g = gate();
  block(other, g);
  EXPECT_FALSE(mpsrt::detail::Quiet::holds(0));
  std::future<void> fut;
  EXPECT_TRUE(finishes_within(
      fut, [] { mpsrt::profiler::host_op_enter(0); }, 5000ms))
      << "a host op waited for a stream that is not current";
  g->open();
  other.synchronize();
  mpsrt::profiler::host_op_enter(0);
  EXPECT_TRUE(mpsrt::detail::Quiet::holds(0));
}

// ---------------------------------------------------------------- back-pressure

// A stream has at most kMaxInFlight committed, unfinished command buffers: past that, commit
// blocks until the oldest completes. Behind a blocked callback, a thread committing many more
// must block, and everything must complete once the callback is released.
TEST_P(StreamTest, BackPressureBlocksTheCommitterUntilTheStreamDrains) {
  constexpr int kMax = static_cast<int>(mpsrt::detail::StreamImpl::kMaxInFlight);
  constexpr int kCommits = 4 * kMax;
  Stream s = mpsrt::stream_from_pool();
  auto g = gate();
  block(s, g);
  std::atomic<int> submitted{0}, ran{0};
  std::atomic<bool> finished{false};
  std::thread committer([&] {
    for (int i = 0; i < kCommits; ++i) {
      s.add_callback([&] { ran.fetch_add(1); });  // commits a command buffer each
      submitted.fetch_add(1);
    }
    finished = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (submitted.load() < kMax - 1 && !finished.load() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(50ms);  // time to run past the limit, were there none
  EXPECT_FALSE(finished.load()) << "the committer never blocked: " << submitted.load()
                                << " command buffers in flight behind a blocked callback";
  EXPECT_LE(submitted.load(), kMax) << "more than kMaxInFlight command buffers in flight";
  EXPECT_GE(submitted.load(), kMax - 1) << "the committer blocked before the limit";
  EXPECT_EQ(ran.load(), 0);
  // Other streams are unaffected.
  Stream other = mpsrt::stream_from_pool();
  ASSERT_NE(other, s);
  std::future<void> fut;
  EXPECT_TRUE(finishes_within(
      fut, [&] { other.commit(SyncType::CommitAndWait); }, 5000ms));
  g->open();
  committer.join();
  s.synchronize();
  EXPECT_EQ(submitted.load(), kCommits);
  EXPECT_EQ(ran.load(), kCommits);
  EXPECT_TRUE(s.query());
}

// query() answers at once, even while another thread is held in commit by back-pressure (it
// must not wait for the stream's lock, which that thread holds until the stream drains).
TEST_P(StreamTest, QueryDoesNotBlockWhileAnotherThreadIsHeldByBackPressure) {
  constexpr int kMax = static_cast<int>(mpsrt::detail::StreamImpl::kMaxInFlight);
  Stream s = mpsrt::stream_from_pool();
  auto g = gate();
  block(s, g);
  std::atomic<int> submitted{0};
  std::thread committer([&] {
    for (int i = 0; i < 2 * kMax; ++i) {
      s.commit(SyncType::Commit);
      submitted.fetch_add(1);
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (submitted.load() < kMax - 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(20ms);  // the committer is now waiting inside commit
  ASSERT_LT(submitted.load(), 2 * kMax) << "no back-pressure: nothing to test";
  std::future<void> fut;
  bool answer = true;
  EXPECT_TRUE(finishes_within(
      fut, [&] { answer = s.query(); }, 2000ms))
      << "query() blocked behind a commit held by back-pressure";
  g->open();
  committer.join();
  if (fut.valid()) fut.get();
  EXPECT_FALSE(answer) << "query() said done while a callback was still blocked";
  s.synchronize();
  EXPECT_TRUE(s.query());
}

TEST_P(StreamTest, ThousandsOfEmptyCommitsComplete) {
  Stream s = mpsrt::stream_from_pool();
  for (int i = 0; i < 3000; ++i) s.commit(SyncType::Commit);
  s.synchronize();
  EXPECT_TRUE(s.query());
}

// ---------------------------------------------------------------- threads

TEST_P(StreamTest, EightThreadsEachDriveTheirOwnStream) {
  constexpr int kThreads = 8, kBufs = 4, kIters = 200;
  std::vector<Stream> streams;
  for (int t = 0; t < kThreads; ++t) streams.push_back(mpsrt::stream_from_pool());
  std::set<uintptr_t> distinct;
  for (const Stream& s : streams) distinct.insert(s.handle());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kThreads));
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Stream s = streams[static_cast<size_t>(t)];
      mpsrt::set_current_stream(s);
      std::vector<Buffer> bufs;
      for (int j = 0; j < kBufs; ++j) bufs.emplace_back(16 << 10, s);
      auto pattern = [t](int it, int j) {
        return (uint32_t(t) << 24) | (uint32_t(it) << 8) | uint32_t(j);
      };
      for (int it = 0; it < kIters; ++it) {
        for (int j = 0; j < kBufs; ++j) bufs[static_cast<size_t>(j)].fill(pattern(it, j), 4, s);
        if (it % 16 == 0) s.commit(SyncType::Commit);
      }
      s.synchronize();
      if (mpsrt::current_stream() != s) errors[static_cast<size_t>(t)] += "current stream lost; ";
      for (int j = 0; j < kBufs; ++j) {
        const Buffer& b = bufs[static_cast<size_t>(j)];
        if (b.host_ptr() == nullptr) continue;
        ::testing::AssertionResult r = all_words(b, pattern(kIters - 1, j));
        if (!r)
          errors[static_cast<size_t>(t)] += "buffer " + std::to_string(j) + ": " + r.message();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    EXPECT_EQ(errors[static_cast<size_t>(t)], "") << "thread " << t;
}

// ---------------------------------------------------------------- pool, priorities, current

TEST_P(StreamTest, HandleIdentifiesTheStreamAndRoundTrips) {
  const Stream dflt = mpsrt::default_stream();
  const Stream pooled = mpsrt::stream_from_pool();
  EXPECT_NE(dflt.handle(), 0u);
  EXPECT_NE(dflt.handle(), pooled.handle());
  EXPECT_EQ(mpsrt::current_stream().handle(), dflt.handle());
  EXPECT_EQ(Stream::from_handle(dflt.handle()), dflt);
  EXPECT_EQ(Stream::from_handle(pooled.handle()), pooled);
  EXPECT_EQ(Stream::from_handle(pooled.handle()).id(), pooled.id());
  // The empty Stream (an empty Buffer's) is handle 0, and 0 gives it back.
  const Stream empty = mpsrt::Buffer().stream();
  EXPECT_EQ(empty.handle(), 0u);
  EXPECT_EQ(Stream::from_handle(0), empty);
  EXPECT_THROW(Stream::from_handle(0).check_owner(), std::invalid_argument);
}

TEST_P(StreamTest, PoolIsRoundRobinPerPriority) {
  Stream dflt = mpsrt::default_stream();
  EXPECT_EQ(dflt.id(), 0);
  EXPECT_EQ(dflt.priority(), 0);
  EXPECT_EQ(dflt.device(), 0);
  std::set<int64_t> ids;
  constexpr int kPool = mpsrt::detail::DeviceStreams::kPoolStreamsPerPriority;
  for (int p : {-1, 0, 1}) {
    std::vector<Stream> got;
    for (int i = 0; i < 3 * kPool; ++i) got.push_back(mpsrt::stream_from_pool(p));
    std::set<uintptr_t> distinct;
    for (int i = 0; i < kPool; ++i) distinct.insert(got[static_cast<size_t>(i)].handle());
    EXPECT_EQ(distinct.size(), static_cast<size_t>(kPool)) << "priority " << p;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], got[i % kPool]) << "priority " << p << ", stream " << i;
      EXPECT_EQ(got[i].priority(), p);
      EXPECT_NE(got[i], dflt);
      EXPECT_NE(got[i].id(), 0);
      ids.insert(got[i].id());
    }
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(3 * kPool)) << "stream ids are unique on a device";
  // Priorities outside -1..1 fall into the nearest class (torch.cuda clamps them).
  EXPECT_EQ(mpsrt::stream_from_pool(-100).priority(), -1);
  EXPECT_EQ(mpsrt::stream_from_pool(100).priority(), 1);
  EXPECT_THROW(mpsrt::stream_from_pool(0, 5), std::invalid_argument);
  EXPECT_THROW(mpsrt::stream_from_pool(0, -2), std::invalid_argument);
  EXPECT_THROW(mpsrt::default_stream(5), std::invalid_argument);
  EXPECT_THROW(mpsrt::current_stream(5), std::invalid_argument);
}

TEST_P(StreamTest, StreamsOfEveryPriorityRunWork) {
  for (int p : {-1, 0, 1}) {
    Stream s = mpsrt::stream_from_pool(p);
    Buffer a(4096, s);
    a.fill(uint32_t(100 + p), 4, s);
    s.synchronize();
    if (a.host_ptr() != nullptr) {
      EXPECT_TRUE(all_words(a, uint32_t(100 + p)));
    }
  }
}

TEST_P(StreamTest, CurrentStreamIsPerThreadAndPerDevice) {
  if (!use_two_devices()) GTEST_SKIP() << "needs two devices";
  const Stream d0 = mpsrt::default_stream(0), d1 = mpsrt::default_stream(1);
  EXPECT_NE(d0, d1);
  EXPECT_EQ(mpsrt::current_stream(), d0);
  EXPECT_EQ(mpsrt::current_stream(0), d0);
  EXPECT_EQ(mpsrt::current_stream(1), d1);
  const Stream s0 = mpsrt::stream_from_pool(0, 0), s1 = mpsrt::stream_from_pool(0, 1);
  EXPECT_EQ(s0.device(), 0);
  EXPECT_EQ(s1.device(), 1);

  EXPECT_EQ(mpsrt::set_current_stream(s0), d0);
  EXPECT_EQ(mpsrt::current_stream(), s0);
  EXPECT_EQ(mpsrt::current_stream(0), s0);
  EXPECT_EQ(mpsrt::current_stream(1), d1) << "setting device 0's stream changed device 1's";
  EXPECT_EQ(mpsrt::set_current_stream(s1), d1);
  EXPECT_EQ(mpsrt::current_device(), 0) << "set_current_stream changed the current device";
  EXPECT_EQ(mpsrt::current_stream(), s0);
  mpsrt::set_device(1);
  EXPECT_EQ(mpsrt::current_stream(), s1);
  mpsrt::set_device(0);

  // Another thread starts from the default streams and its changes stay its own.
  std::vector<bool> seen;
  std::thread([&] {
    seen.push_back(mpsrt::current_stream(0) == d0);
    seen.push_back(mpsrt::current_stream(1) == d1);
    mpsrt::set_current_stream(mpsrt::stream_from_pool(1, 0));
    seen.push_back(mpsrt::current_stream(0) != d0);
  }).join();
  EXPECT_EQ(seen, std::vector<bool>({true, true, true}));
  EXPECT_EQ(mpsrt::current_stream(0), s0);
  EXPECT_EQ(mpsrt::current_stream(1), s1);

  // Event::record() and Buffer(n) use the current stream of the current device.
  auto g = gate();
  block(s0, g);
  Event e;
  e.record();
  EXPECT_FALSE(e.query()) << "record() did not use the current stream (s0, blocked)";
  g->open();
  e.synchronize();
  EXPECT_TRUE(e.query());
  EXPECT_EQ(mpsrt::set_current_stream(d0), s0);
  EXPECT_EQ(mpsrt::set_current_stream(d1), s1);
}

TEST_P(StreamTest, CurrentStreamResetsWithTheRuntime) {
  Stream s = mpsrt::stream_from_pool();
  mpsrt::set_current_stream(s);
  EXPECT_EQ(mpsrt::current_stream(), s);
  use_env({});
  EXPECT_EQ(mpsrt::current_stream(), mpsrt::default_stream());
}

// ---------------------------------------------------------------- cross-stream buffer safety

// x lives on a and is written on b, which is blocked: once x is freed, its memory must not be
// handed to a new allocation on a until b's write is done, and is reusable afterwards. 16 MiB
// is in the huge pool (one heap of exactly the request), so the reuse is deterministic.
TEST_P(StreamTest, MemoryUsedByAnotherStreamIsNotReusedUntilThatStreamIsDone) {
  constexpr size_t kHuge = size_t(16) << 20;
  Stream a = mpsrt::stream_from_pool();
  Stream b = mpsrt::stream_from_pool();
  Buffer x(kHuge, a);
  const uint64_t addr = x.address();
  auto g = gate();
  block(b, g);
  x.fill(0xAB, 1, b);  // b becomes a user of x (recorded automatically)
  x.reset();
  Buffer y(kHuge, a);
  EXPECT_NE(y.address(), addr) << "memory still being written on b was reused on a";
  g->open();
  b.synchronize();
  Buffer z(kHuge, a);
  EXPECT_EQ(z.address(), addr) << "the memory did not become reusable after b completed";
  if (z.host_ptr() != nullptr) {
    const auto* p = static_cast<const uint8_t*>(z.host_ptr());
    EXPECT_EQ(p[0], 0xAB);
    EXPECT_EQ(p[kHuge - 1], 0xAB);
  }
}

TEST_P(StreamTest, SmallBufferUsedByAnotherStreamIsNotReusedEarly) {
  Stream a = mpsrt::stream_from_pool();
  Stream b = mpsrt::stream_from_pool();
  auto g = gate();
  block(b, g);
  Buffer src(4096, a);
  Buffer x(4096, a);
  const uint64_t addr = x.address();
  Buffer dst(4096, b);
  dst.copy_from(x, b);  // b reads x
  x.reset();
  std::vector<Buffer> live;
  for (int i = 0; i < 8; ++i) {
    live.emplace_back(4096, a);
    EXPECT_NE(live.back().address(), addr) << "allocation " << i << " reused x while b reads it";
  }
  g->open();
  b.synchronize();
}

TEST_P(StreamTest, RecordStreamKeepsMemoryFromReuse) {
  constexpr size_t kHuge = size_t(12) << 20;
  Stream a = mpsrt::stream_from_pool();
  Stream b = mpsrt::stream_from_pool();
  auto g = gate();
  block(b, g);
  Buffer x(kHuge, a);
  const uint64_t addr = x.address();
  x.record_stream(b);  // as if b's blocked work used x
  x.reset();
  Buffer y(kHuge, a);
  EXPECT_NE(y.address(), addr);
  g->open();
  b.synchronize();
  Buffer z(kHuge, a);
  EXPECT_EQ(z.address(), addr);
}

TEST_P(StreamTest, OwnStreamReusesFreedMemoryAtOnce) {
  Stream a = mpsrt::stream_from_pool();
  auto g = gate();
  block(a, g);
  Buffer x(4096, a);
  x.fill(1, 4, a);  // pending on a, its own stream: stream order makes reuse on a safe
  const uint64_t addr = x.address();
  x.reset();
  Buffer y(4096, a);
  EXPECT_EQ(y.address(), addr);
  g->open();
  a.synchronize();
}

// ---------------------------------------------------------------- events

TEST_P(EventTest, RecordQuerySynchronize) {
  Stream s = mpsrt::stream_from_pool();
  Event e;
  EXPECT_FALSE(e.enable_timing());
  EXPECT_FALSE(e.recorded());
  EXPECT_EQ(e.device(), -1);
  auto g = gate();
  block(s, g);
  e.record(s);
  EXPECT_TRUE(e.recorded());
  EXPECT_EQ(e.device(), 0);
  EXPECT_FALSE(e.query());
  std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(e.query());
  g->open();
  std::future<void> fut;
  EXPECT_TRUE(finishes_within(
      fut, [&] { e.synchronize(); }, 5000ms));
  EXPECT_TRUE(e.query());
}

TEST_P(EventTest, QueryAloneCompletesAnUncommittedRecord) {
  Stream s = mpsrt::stream_from_pool();
  Event e;
  e.record(s);  // left in s's open command buffer
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!e.query() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100us);
  }
  EXPECT_TRUE(e.query()) << "query() never flushed the recording stream";
}

TEST_P(EventTest, ARecordOnAnIdleStreamIsReachedAtOnceAndStillOrdersLaterWork) {
  Stream s = mpsrt::stream_from_pool();
  s.synchronize();
  Event e;
  e.record(s);  // nothing before it: reached as it is recorded, no submission needed
  EXPECT_TRUE(e.query());
  EXPECT_TRUE(s.query());
  // Work encoded after the record is not covered by it, and a wait on it orders nothing
  // that is not done already: another stream waiting on e runs at once.
  Stream t = mpsrt::stream_from_pool();
  auto g = gate();
  block(s, g);
  t.wait_event(e);
  std::atomic<bool> t_ran{false};
  t.add_callback([&] { t_ran = true; });
  std::future<void> fut;
  EXPECT_TRUE(finishes_within(
      fut, [&] { t.synchronize(); }, 5000ms));
  EXPECT_TRUE(t_ran.load());
  EXPECT_TRUE(e.query());
  // Recorded behind the blocked work: not reached until it completes (the encoded path).
  e.record(s);
  EXPECT_FALSE(e.query());
  g->open();
  EXPECT_TRUE(finishes_within(
      fut, [&] { e.synchronize(); }, 5000ms));
  EXPECT_TRUE(e.query());
  // A timing event always takes the device's timestamp (the encoded path), idle or not.
  Event t0(true), t1(true);
  s.synchronize();
  t0.record(s);
  t1.record(s);
  EXPECT_GE(t0.elapsed_time(t1), 0.0);
}

TEST_P(EventTest, SynchronizeCompletesAnUncommittedRecord) {
  Stream s = mpsrt::stream_from_pool();
  Buffer a(1 << 20, s);
  a.fill(3, 4, s);
  Event e;
  e.record(s);
  std::future<void> fut;
  EXPECT_TRUE(finishes_within(
      fut, [&] { e.synchronize(); }, 5000ms));
  if (a.host_ptr() != nullptr) {
    EXPECT_TRUE(all_words(a, 3));
  }
}

TEST_P(EventTest, NeverRecorded) {
  Event e, t(true);
  EXPECT_TRUE(e.query());
  EXPECT_FALSE(e.recorded());
  std::future<void> fut;
  EXPECT_TRUE(finishes_within(
      fut, [&] { e.synchronize(); }, 5000ms));
  EXPECT_THROW((void)t.elapsed_time(t), std::invalid_argument);
}

TEST_P(EventTest, ReRecordingMovesTheMarker) {
  Stream s = mpsrt::stream_from_pool();
  Event e;
  e.record(s);
  e.synchronize();
  EXPECT_TRUE(e.query());
  auto g = gate();
  block(s, g);
  e.record(s);
  EXPECT_FALSE(e.query()) << "query() reported the earlier, completed record";
  g->open();
  e.synchronize();
  EXPECT_TRUE(e.query());
}

TEST_P(EventTest, RecordOnTheCurrentStream) {
  Stream s = mpsrt::stream_from_pool();
  mpsrt::set_current_stream(s);
  auto g = gate();
  block(s, g);
  Event e;
  e.record();
  EXPECT_FALSE(e.query());
  g->open();
  e.synchronize();
  mpsrt::set_current_stream(mpsrt::default_stream());
}

TEST_P(EventTest, ManyEventsFromThePool) {
  Stream s = mpsrt::stream_from_pool();
  for (int round = 0; round < 3; ++round) {
    std::vector<Event> evs(300);
    for (Event& e : evs) e.record(s);
    evs.back().synchronize();
    for (const Event& e : evs) EXPECT_TRUE(e.query());
  }
  Event fresh;  // a pooled event with a history still reads as never recorded
  EXPECT_TRUE(fresh.query());
  EXPECT_FALSE(fresh.recorded());
}

TEST_P(EventTest, ElapsedTimeNeedsTimingOnBothEvents) {
  Stream s = mpsrt::stream_from_pool();
  Event plain, timed(true);
  EXPECT_TRUE(timed.enable_timing());
  plain.record(s);
  timed.record(s);
  s.synchronize();
  EXPECT_THROW((void)plain.elapsed_time(timed), std::invalid_argument);
  EXPECT_THROW((void)timed.elapsed_time(plain), std::invalid_argument);
  EXPECT_THROW((void)plain.elapsed_time(plain), std::invalid_argument);
}

TEST_P(EventTest, ElapsedTimeNeedsRecordedEvents) {
  Stream s = mpsrt::stream_from_pool();
  Event a(true), b(true);
  a.record(s);
  s.synchronize();
  EXPECT_THROW((void)a.elapsed_time(b), std::invalid_argument);
  EXPECT_THROW((void)b.elapsed_time(a), std::invalid_argument);
}

TEST_P(EventTest, ElapsedTimeWaitsForCompletion) {
  Stream s = mpsrt::stream_from_pool();
  Event a(true), b(true);
  a.record(s);
  a.synchronize();
  auto g = gate();
  block(s, g);
  b.record(s);
  std::atomic<bool> done{false};
  double ms = -1;
  std::thread t([&] {
    ms = a.elapsed_time(b);
    done.store(true);
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(done.load()) << "elapsed_time returned before b completed";
  g->open();
  t.join();
  EXPECT_TRUE(done.load());
  EXPECT_GE(ms, 0.0);
  EXPECT_TRUE(b.query());
  EXPECT_TRUE(s.query());
}

TEST_P(EventTest, AfterEventSynchronizeTheStreamQueryAgrees) {
  Stream s = mpsrt::stream_from_pool();
  Buffer buf(4096, s);
  Event e;
  int late = 0;
  for (int i = 0; i < 300; ++i) {
    if (i % 2 == 0) {
      buf.fill(static_cast<uint64_t>(i & 0xFF), 1, s);
    } else {
      s.add_callback([] {});
    }
    e.record(s);
    e.synchronize();
    if (!e.query() || !s.query()) ++late;
  }
  EXPECT_EQ(late, 0) << "a query said 'not done' right after the event's synchronize()";
  for (int i = 0; i < 300; ++i) {
    s.add_callback([] {});
    e.record(s);
    while (!e.query()) {
    }
    if (!s.query()) ++late;
  }
  EXPECT_EQ(late, 0) << "stream.query() was false right after event.query() was true";
}

// torch's event_id: 0 until the first record, then unique and stable.
TEST_P(EventTest, IdsAreZeroUntilRecordedThenUniqueAndStable) {
  Stream s = mpsrt::stream_from_pool();
  Event a, b;
  EXPECT_EQ(a.id(), 0u);
  EXPECT_EQ(b.id(), 0u);
  a.record(s);
  b.record(s);
  const uint64_t id = a.id();
  EXPECT_NE(id, 0u);
  EXPECT_NE(b.id(), 0u);
  EXPECT_NE(b.id(), id);
  a.record(s);
  a.synchronize();
  EXPECT_EQ(a.id(), id);
}

TEST_P(EventTest, ElapsedTimeIsAdditiveAndNonNegative) {
  Stream s = mpsrt::stream_from_pool();
  Event a(true), b(true), c(true);
  a.record(s);
  s.add_callback([] { std::this_thread::sleep_for(5ms); });
  b.record(s);
  s.add_callback([] { std::this_thread::sleep_for(5ms); });
  c.record(s);
  c.synchronize();
  const double ab = a.elapsed_time(b), bc = b.elapsed_time(c), ac = a.elapsed_time(c);
  EXPECT_GE(ab, 4.0);
  EXPECT_GE(bc, 4.0);
  EXPECT_NEAR(ab + bc, ac, 1e-6 * std::max(1.0, ac));
  EXPECT_EQ(a.elapsed_time(a), 0.0);
  EXPECT_NEAR(b.elapsed_time(a), -ab, 1e-9 * std::max(1.0, ab));
}

TEST_P(EventTest, ElapsedTimeMatchesAHostSleep) {
  Stream s = mpsrt::stream_from_pool();
  Event start(true), end(true);
  start.record(s);
  s.add_callback([] { std::this_thread::sleep_for(30ms); });
  end.record(s);
  end.synchronize();
  const double ms = start.elapsed_time(end);
  EXPECT_GE(ms, 25.0);
  EXPECT_LE(ms, 200.0);
}

// API.md's acceptance sequence; it must neither deadlock nor measure nothing.
TEST_P(EventTest, SynchronizeThenElapsedTimeDoesNotDeadlock) {
  std::future<void> fut;
  double ms = -1;
  const bool done = finishes_within(
      fut,
      [&] {
        Event start(true), end(true);
        start.record();
        Buffer a(4 << 20);
        for (uint32_t i = 0; i < 4; ++i) a.fill(i, 4, mpsrt::current_stream());
        end.record();
        mpsrt::synchronize();
        end.synchronize();
        ms = start.elapsed_time(end);
      },
      10000ms);
  ASSERT_TRUE(done) << "record / synchronize / elapsed_time deadlocked";
  fut.get();
  EXPECT_GT(ms, 0.0);
}

TEST_P(EventTest, EventsMoveAndKeepTheirState) {
  Stream s = mpsrt::stream_from_pool();
  Event a(true);
  a.record(s);
  Event b = std::move(a);
  EXPECT_TRUE(b.enable_timing());
  EXPECT_TRUE(b.recorded());
  b.synchronize();
  EXPECT_TRUE(b.query());
  Event c(true);
  c.record(s);
  c.synchronize();
  EXPECT_GE(b.elapsed_time(c), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Streams, StreamTest, ::testing::ValuesIn(usable_backends()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });
INSTANTIATE_TEST_SUITE_P(Events, EventTest, ::testing::ValuesIn(usable_backends()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
