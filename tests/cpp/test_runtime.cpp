// Tests of the public device and stream API (mpsrt/mpsrt.h). Each test installs its own
// environment with Runtime::reset(&env), so nothing depends on the caller's MPSRT_* variables,
// and restores the process environment with Runtime::reset(nullptr) at the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "core/access.h"
#include "core/profiler.h"
#include "core/runtime.h"
#include "core/stream.h"
#include "mpsrt/mpsrt.h"
#include "mpsrt/testing.h"

namespace {

using namespace std::chrono_literals;
using Env = std::map<std::string, std::string>;
using mpsrt::detail::Runtime;

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override { use_env({}); }
  void TearDown() override { Runtime::reset(nullptr); }

  // Re-initialises the runtime (lazily, on next use) from env instead of the process's.
  static void use_env(const Env& env) {
    const mpsrt::detail::EnvLookup lookup = [&env](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    };
    Runtime::reset(&lookup);
  }

  // The internal stream behind mpsrt::default_stream(device).
  static mpsrt::detail::StreamImpl& stream_impl(int device) {
    return *mpsrt::detail::Access::impl(mpsrt::default_stream(device));
  }
};

TEST_F(RuntimeTest, VersionIsTheProjectVersion) {
  EXPECT_STREQ(mpsrt::version(), MPSRT_EXPECTED_VERSION);
}

TEST_F(RuntimeTest, CpuDevicesSetsTheDeviceCount) {
  use_env({{"MPSRT_BACKEND", "cpu"}, {"MPSRT_CPU_DEVICES", "3"}});
  EXPECT_EQ(mpsrt::device_count(), 3);
  EXPECT_TRUE(mpsrt::is_available());
  use_env({{"MPSRT_BACKEND", "cpu"}});
  EXPECT_EQ(mpsrt::device_count(), 1);
}

TEST_F(RuntimeTest, SetDeviceReturnsThePreviousAndValidates) {
  use_env({{"MPSRT_BACKEND", "cpu"}, {"MPSRT_CPU_DEVICES", "3"}});
  EXPECT_EQ(mpsrt::current_device(), 0);
  EXPECT_EQ(mpsrt::set_device(1), 0);
  EXPECT_EQ(mpsrt::current_device(), 1);
  EXPECT_EQ(mpsrt::set_device(2), 1);
  EXPECT_EQ(mpsrt::current_device(), 2);
  for (int bad : {-1, 3, 100, -100}) {
    try {
      mpsrt::set_device(bad);
      ADD_FAILURE() << "set_device(" << bad << ") was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
    EXPECT_EQ(mpsrt::current_device(), 2) << "a rejected set_device changed the device";
  }
  EXPECT_EQ(mpsrt::set_device(2), 2);
  EXPECT_EQ(mpsrt::set_device(0), 2);
}

TEST_F(RuntimeTest, CurrentDeviceIsPerThread) {
  use_env({{"MPSRT_BACKEND", "cpu"}, {"MPSRT_CPU_DEVICES", "3"}});
  mpsrt::set_device(2);
  int seen = -1;
  int seen_after_set = -1;
  std::thread t([&] {
    seen = mpsrt::current_device();
    mpsrt::set_device(1);
    seen_after_set = mpsrt::current_device();
  });
  t.join();
  EXPECT_EQ(seen, 0) << "a new thread did not start on device 0";
  EXPECT_EQ(seen_after_set, 1);
  EXPECT_EQ(mpsrt::current_device(), 2) << "another thread's set_device changed this thread's";
}

TEST_F(RuntimeTest, ResetReturnsTheCallingThreadToDevice0) {
  use_env({{"MPSRT_BACKEND", "cpu"}, {"MPSRT_CPU_DEVICES", "3"}});
  mpsrt::set_device(2);
  use_env({{"MPSRT_BACKEND", "cpu"}, {"MPSRT_CPU_DEVICES", "3"}});
  EXPECT_EQ(mpsrt::current_device(), 0);
}

TEST_F(RuntimeTest, DevicePropertiesAreFilledIn) {
  use_env({{"MPSRT_BACKEND", "cpu"}, {"MPSRT_CPU_DEVICES", "3"}});
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("device " + std::to_string(i));
    const mpsrt::DeviceProperties p = mpsrt::get_device_properties(i);
    EXPECT_EQ(p.index, i);
    EXPECT_EQ(p.backend, "cpu");
    EXPECT_FALSE(p.name.empty());
    EXPECT_GT(p.total_memory, 0u);
    EXPECT_GT(p.recommended_max_memory, 0u);
    EXPECT_LE(p.recommended_max_memory, p.total_memory);
    EXPECT_GT(p.max_buffer_size, 0u);
    EXPECT_TRUE(p.unified_memory);
    EXPECT_GT(p.timestamp_period_ns, 0.0);
    EXPECT_EQ(p.details.rfind("kernels=", 0), 0u) << p.details;
  }
  mpsrt::set_device(1);
  EXPECT_EQ(mpsrt::get_device_properties().index, 1);
  EXPECT_EQ(mpsrt::get_device_properties(-1).index, 1);
  EXPECT_THROW(mpsrt::get_device_properties(3), std::invalid_argument);
  EXPECT_THROW(mpsrt::get_device_properties(-2), std::invalid_argument);
}

TEST_F(RuntimeTest, CpuIsaReachesTheDevice) {
  use_env({{"MPSRT_BACKEND", "cpu"}, {"MPSRT_CPU_ISA", "scalar"}});
  EXPECT_EQ(mpsrt::get_device_properties(0).details, "kernels=scalar");
}

// The core hands the vulkan backend its MPSRT_VULKAN_* settings without knowing what they are
// (Backend::configure); the device's details show what it made of them.
TEST_F(RuntimeTest, VulkanSettingsReachTheDevice) {
  if (!mpsrt::backend::vulkan_backend().is_available()) GTEST_SKIP() << "no vulkan device";
  use_env({{"MPSRT_BACKEND", "vulkan"},
           {"MPSRT_VULKAN_QUEUES", "shared"},
           {"MPSRT_VULKAN_MEMORY", "discrete"},
           {"MPSRT_VULKAN_WORKGROUP", "64"},
           {"MPSRT_VULKAN_UNROLL", "4"},
           {"MPSRT_VULKAN_VECTOR", "4"},
           {"MPSRT_VULKAN_COPY", "dma"}});
  const std::string details = mpsrt::get_device_properties(0).details;
  for (const char* want :
       {"(one shared)", "memory=discrete", "workgroup=64", "unroll=4", "vector=4", "copy=dma"}) {
    EXPECT_NE(details.find(want), std::string::npos) << want << " is not in: " << details;
  }
  EXPECT_FALSE(mpsrt::get_device_properties(0).unified_memory);
  // And a runtime without them has the defaults again.
  use_env({{"MPSRT_BACKEND", "vulkan"}});
  const std::string defaults = mpsrt::get_device_properties(0).details;
  for (const char* want : {"unroll=2", "vector=16", "copy=kernel"}) {
    EXPECT_NE(defaults.find(want), std::string::npos) << want << " is not in: " << defaults;
  }
  EXPECT_EQ(defaults.find("(one shared)"), std::string::npos) << defaults;
}

TEST_F(RuntimeTest, BackendNameAndLists) {
  use_env({{"MPSRT_BACKEND", "cpu"}});
  EXPECT_EQ(mpsrt::backend_name(), "cpu");
  const std::vector<std::string> built = mpsrt::built_backends();
  const std::vector<std::string> available = mpsrt::available_backends();
  EXPECT_TRUE(contains(built, "cpu"));
  EXPECT_TRUE(contains(available, "cpu"));
  for (const std::string& b : available) EXPECT_TRUE(contains(built, b)) << b;
  for (const std::string& b : built) {
    EXPECT_TRUE(b == "cpu" || b == "vulkan" || b == "metal") << b;
  }
  // Without MPSRT_BACKEND the best available backend is chosen, and the reason says so.
  use_env({});
  ASSERT_FALSE(available.empty());
  EXPECT_EQ(mpsrt::backend_name(), available.front());
  EXPECT_EQ(mpsrt::backend_reason().rfind(available.front() + ": the best available backend", 0),
            0u)
      << mpsrt::backend_reason();
  // A software Vulkan device (lavapipe) is never the default while cpu works, but forcing it
  // still works and the reason says what it is.
  for (mpsrt::backend::Backend* b : mpsrt::backend::all_backends()) {
    if (!b->is_built() || !b->is_available() || b->software_only().empty()) continue;
    SCOPED_TRACE(b->name());
    use_env({});
    EXPECT_EQ(mpsrt::backend_name(), "cpu");
    const std::string reason = mpsrt::backend_reason();
    EXPECT_NE(reason.find(std::string("set MPSRT_BACKEND=") + b->name() + " to use it"),
              std::string::npos)
        << reason;
    EXPECT_NE(reason.find("is a software device"), std::string::npos) << reason;
    use_env({{"MPSRT_BACKEND", b->name()}});
    EXPECT_EQ(mpsrt::backend_name(), b->name());
    EXPECT_NE(mpsrt::backend_reason().find("chosen by MPSRT_BACKEND"), std::string::npos);
    EXPECT_GT(mpsrt::device_count(), 0);
  }
}

// Stand-in backends for the selection rule: name, built, available, software.
class FakeBackend final : public mpsrt::backend::Backend {
 public:
  FakeBackend(const char* name, bool built, bool available, const char* software)
      : name_(name), built_(built), available_(available), software_(software) {}
  const char* name() const noexcept override { return name_; }
  bool is_built() const noexcept override { return built_; }
  bool is_available() noexcept override { return built_ && available_; }
  std::string unavailable_reason() override { return available_ ? "" : "[fake] no device"; }
  std::string software_only() override { return is_available() ? software_ : ""; }
  int device_count() override { return 1; }
  std::unique_ptr<mpsrt::backend::Device> open_device(int) override { return nullptr; }

 private:
  const char* name_;
  bool built_, available_;
  const char* software_;
};

TEST(BackendChoice, HardwareFirstThenCpuThenSoftware) {
  using mpsrt::detail::choose_backend;
  FakeBackend metal("metal", false, false, "");
  FakeBackend vk_sw("vulkan", true, true, "llvmpipe is a software device");
  FakeBackend vk_hw("vulkan", true, true, "");
  FakeBackend cpu("cpu", true, true, "");
  FakeBackend no_cpu("cpu", true, false, "");

  // A real GPU wins over cpu.
  auto c = choose_backend("", {&metal, &vk_hw, &cpu});
  EXPECT_EQ(c.backend, &vk_hw);
  EXPECT_EQ(c.reason, "vulkan: the best available backend");

  // A software device ranks after cpu, and the reason says how to have it anyway.
  c = choose_backend("", {&metal, &vk_sw, &cpu});
  EXPECT_EQ(c.backend, &cpu);
  EXPECT_EQ(c.reason,
            "cpu: the best available backend; vulkan: llvmpipe is a software device; using cpu "
            "(set MPSRT_BACKEND=vulkan to use it)");
  const auto order = mpsrt::detail::preferred_backends({&metal, &vk_sw, &cpu});
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], &cpu);
  EXPECT_EQ(order[1], &vk_sw);

  // ... but it is still used when nothing else works.
  c = choose_backend("", {&metal, &vk_sw, &no_cpu});
  EXPECT_EQ(c.backend, &vk_sw);
  EXPECT_NE(c.reason.find("no hardware backend is available"), std::string::npos) << c.reason;

  // Named explicitly, a software device is used, and the reason says what it is.
  c = choose_backend("vulkan", {&metal, &vk_sw, &cpu});
  EXPECT_EQ(c.backend, &vk_sw);
  EXPECT_EQ(c.reason, "vulkan: chosen by MPSRT_BACKEND; llvmpipe is a software device");

  // Errors as before: unknown, unbuilt, unavailable, nothing at all.
  EXPECT_THROW(choose_backend("opengl", {&metal, &vk_sw, &cpu}), std::invalid_argument);
  EXPECT_THROW(choose_backend("metal", {&metal, &vk_sw, &cpu}), std::invalid_argument);
  EXPECT_THROW(choose_backend("cpu", {&metal, &no_cpu}), mpsrt::Error);
  EXPECT_THROW(choose_backend("", {&metal, &no_cpu}), mpsrt::Error);
}

TEST_F(RuntimeTest, UnbuiltBackendIsAnInvalidArgumentNamingTheBuiltOnes) {
  const std::vector<std::string> built = mpsrt::built_backends();
  int checked = 0;
  for (const char* name : {"vulkan", "metal"}) {
    if (contains(built, name)) continue;
    SCOPED_TRACE(name);
    use_env({{"MPSRT_BACKEND", name}});
    try {
      mpsrt::device_count();
      ADD_FAILURE() << "MPSRT_BACKEND=" << name << " started in a build without it";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("MPSRT_BACKEND"), std::string::npos) << what;
      EXPECT_NE(what.find("built backends"), std::string::npos) << what;
      for (const std::string& b : built) EXPECT_NE(what.find(b), std::string::npos) << what;
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "every backend is built";
}

TEST_F(RuntimeTest, BadOptionFailsEveryCallAndResetRecovers) {
  use_env({{"MPSRT_CPU_DEVICES", "0"}});
  for (int i = 0; i < 2; ++i) {  // the failed initialisation is retried, not cached as good
    try {
      mpsrt::device_count();
      ADD_FAILURE() << "MPSRT_CPU_DEVICES=0 was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("MPSRT_CPU_DEVICES"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(mpsrt::options(), std::invalid_argument);
  use_env({{"MPSRT_BACKEND", "cpu"}, {"MPSRT_CPU_DEVICES", "2"}});
  EXPECT_EQ(mpsrt::device_count(), 2);
}

TEST_F(RuntimeTest, OptionsShowTheValuesInForce) {
  use_env({{"MPSRT_BACKEND", "cpu"},
           {"MPSRT_CPU_DEVICES", "3"},
           {"PYTORCH_MPS_HIGH_WATERMARK_RATIO", "1.75"},
           {"UNRELATED_VARIABLE", "x"}});
  std::map<std::string, std::string> values;
  for (const mpsrt::OptionInfo& o : mpsrt::options()) values[o.name] = o.value;
  EXPECT_EQ(values.at("MPSRT_BACKEND"), "cpu");
  EXPECT_EQ(values.at("MPSRT_CPU_DEVICES"), "3");
  EXPECT_EQ(values.at("MPSRT_HIGH_WATERMARK_RATIO"), "1.75");
  EXPECT_EQ(values.at("MPSRT_LOW_WATERMARK_RATIO"), "1.4");
}

TEST_F(RuntimeTest, DefaultStreamCommitAndWaitAndQuery) {
  use_env({{"MPSRT_BACKEND", "cpu"}, {"MPSRT_CPU_DEVICES", "2"}});
  mpsrt::Stream s0 = mpsrt::default_stream(0);
  mpsrt::Stream s1 = mpsrt::default_stream(1);
  EXPECT_EQ(s0.device(), 0);
  EXPECT_EQ(s1.device(), 1);
  EXPECT_EQ(s0.id(), 0);
  EXPECT_EQ(s1.id(), 0);
  EXPECT_NE(s0, s1);
  EXPECT_EQ(mpsrt::default_stream(), s0);
  EXPECT_EQ(mpsrt::default_stream(-1), s0);
  mpsrt::set_device(1);
  EXPECT_EQ(mpsrt::default_stream(), s1);
  EXPECT_THROW(mpsrt::default_stream(2), std::invalid_argument);

  EXPECT_TRUE(s0.query());
  EXPECT_NO_THROW(s0.commit(mpsrt::SyncType::CommitAndWait));
  EXPECT_TRUE(s0.query());
  for (mpsrt::SyncType t :
       {mpsrt::SyncType::None, mpsrt::SyncType::Commit, mpsrt::SyncType::CommitAndContinue,
        mpsrt::SyncType::CommitAdaptive, mpsrt::SyncType::CommitAndWait}) {
    EXPECT_NO_THROW(s1.commit(t));
  }
  s1.synchronize();
  EXPECT_TRUE(s1.query());
  EXPECT_NO_THROW(mpsrt::synchronize());
  EXPECT_NO_THROW(mpsrt::synchronize(0));
  EXPECT_THROW(mpsrt::synchronize(2), std::invalid_argument);
}

TEST_F(RuntimeTest, QueryIsFalseWhileWorkIsPending) {
  use_env({{"MPSRT_BACKEND", "cpu"}});
  mpsrt::Stream s = mpsrt::default_stream(0);
  auto gate = Runtime::get().device(0).backend_device().create_event();
  std::atomic<bool> ran{false};
  stream_impl(0).encode({mpsrt::detail::prof::Op::Callback},
                        [&](mpsrt::backend::CommandBuffer& cb) {
                          cb.wait(*gate, 1);
                          cb.host_callback([&] { ran = true; });
                        });
  EXPECT_FALSE(s.query()) << "encoded, uncommitted work counts as pending";
  s.commit(mpsrt::SyncType::Commit);
  std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(s.query()) << "committed work that cannot run yet counts as pending";
  EXPECT_FALSE(ran.load());
  gate->signal(1);
  s.synchronize();
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(s.query());
}

TEST_F(RuntimeTest, SynchronizeCommitsEncodedWork) {
  use_env({{"MPSRT_BACKEND", "cpu"}});
  std::atomic<int> ran{0};
  for (int i = 0; i < 5; ++i) {
    stream_impl(0).encode(
        {mpsrt::detail::prof::Op::Callback},
        [&](mpsrt::backend::CommandBuffer& cb) { cb.host_callback([&] { ran.fetch_add(1); }); });
  }
  mpsrt::synchronize(0);
  EXPECT_EQ(ran.load(), 5);
  EXPECT_TRUE(mpsrt::default_stream(0).query());
}

TEST_F(RuntimeTest, StreamReportsACommandFailureOnceAndStaysUsable) {
  use_env({{"MPSRT_BACKEND", "cpu"}});
  mpsrt::Stream s = mpsrt::default_stream(0);
  stream_impl(0).encode(
      {mpsrt::detail::prof::Op::Callback},
      [](mpsrt::backend::CommandBuffer& cb) {
        cb.host_callback([] { throw std::runtime_error("callback exploded"); });
      },
      mpsrt::SyncType::Commit);
  try {
    s.synchronize();
    ADD_FAILURE() << "the failed command was not reported";
  } catch (const mpsrt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("callback exploded"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(s.query());
  EXPECT_NO_THROW(s.synchronize()) << "the same failure was reported twice";
  std::atomic<bool> ran{false};
  stream_impl(0).encode(
      {mpsrt::detail::prof::Op::Callback},
      [&](mpsrt::backend::CommandBuffer& cb) { cb.host_callback([&] { ran = true; }); },
      mpsrt::SyncType::CommitAndWait);
  EXPECT_TRUE(ran.load());
}

TEST_F(RuntimeTest, ResetWaitsForPendingWork) {
  use_env({{"MPSRT_BACKEND", "cpu"}});
  std::atomic<bool> ran{false};
  stream_impl(0).encode({mpsrt::detail::prof::Op::Callback},
                        [&](mpsrt::backend::CommandBuffer& cb) {
                          cb.host_callback([&] {
                            std::this_thread::sleep_for(20ms);
                            ran = true;
                          });
                        });  // encoded, not even committed
  Runtime::reset(nullptr);
  EXPECT_TRUE(ran.load()) << "the runtime was torn down before its work ran";
}

TEST_F(RuntimeTest, DriverAllocatedMemory) {
  use_env({{"MPSRT_BACKEND", "cpu"}, {"MPSRT_CPU_DEVICES", "2"}});
  const uint64_t held = mpsrt::driver_allocated_memory();
  EXPECT_LE(held, mpsrt::get_device_properties().total_memory);
  EXPECT_EQ(mpsrt::driver_allocated_memory(-1), held);
  EXPECT_LE(mpsrt::driver_allocated_memory(1), mpsrt::get_device_properties(1).total_memory);
  EXPECT_THROW(mpsrt::driver_allocated_memory(2), std::invalid_argument);
}

}  // namespace

// mpsrt/testing.h: the hooks of the Python tests and of `python -m bench`.
TEST_F(RuntimeTest, TestingResetRefusesWhileBuffersLiveAndLeavesTheRuntimeUsable) {
  const Env env{{"MPSRT_BACKEND", "cpu"}};
  mpsrt::testing::reset_runtime(&env);
  mpsrt::Buffer b(4096);
  try {
    mpsrt::testing::reset_runtime(&env);
    FAIL() << "reset_runtime went ahead with a live Buffer";
  } catch (const mpsrt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("4096 bytes of live Buffers on device 0"),
              std::string::npos)
        << e.what();
  }
  mpsrt::Buffer c(512);  // the old runtime still serves
  EXPECT_EQ(mpsrt::current_allocated_memory(), 4096u + 512u);
  b.reset();
  c.reset();
  mpsrt::testing::reset_runtime(&env);
  EXPECT_EQ(mpsrt::current_allocated_memory(), 0u);
  mpsrt::Buffer d(1024);  // and the new one starts
  EXPECT_EQ(mpsrt::current_allocated_memory(), 1024u);
}

TEST_F(RuntimeTest, TestingResetRefusesWhileEventsLive) {
  const Env env{{"MPSRT_BACKEND", "cpu"}};
  mpsrt::testing::reset_runtime(&env);
  {
    mpsrt::Event e;
    e.record(mpsrt::default_stream());
    try {
      mpsrt::testing::reset_runtime(&env);
      FAIL() << "reset_runtime went ahead with a live Event (which refers to its device)";
    } catch (const mpsrt::Error& err) {
      EXPECT_NE(std::string(err.what()).find("1 live Event(s) on device 0"), std::string::npos)
          << err.what();
    }
    e.synchronize();  // the old runtime still serves
    EXPECT_TRUE(e.query());
  }
  mpsrt::testing::reset_runtime(&env);
  mpsrt::Event f;  // and the new one starts
  f.record(mpsrt::default_stream());
  f.synchronize();
}

TEST_F(RuntimeTest, TestingRawHeapFillsAndCopiesOnTheDefaultStream) {
  use_env({{"MPSRT_BACKEND", "cpu"}});
  mpsrt::testing::RawHeap a(4099), b(4099), small(64);
  EXPECT_EQ(a.nbytes(), 4099u);
  a.fill(0x01020304u, 4);  // whole patterns: the last 3 bytes stay as they were
  std::memset(b.host(), 0, b.nbytes());
  mpsrt::synchronize();
  b.copy_from(a);
  mpsrt::synchronize();
  const uint8_t* p = b.host();
  EXPECT_EQ(p[0], 0x04);
  EXPECT_EQ(p[3], 0x01);
  EXPECT_EQ(p[4095], 0x01);
  EXPECT_THROW(a.fill(0, 3), std::invalid_argument);
  EXPECT_THROW(a.copy_from(small), std::invalid_argument);
  EXPECT_EQ(a.host()[4], 0x04);  // a refused command changes nothing
}

// The runtime installs its backend's trace sink (os_signpost on metal) while it runs; the cpu
// and vulkan backends have none, and a sink someone else installed stays across runtimes.
class NullSink final : public mpsrt::backend::TraceSink {
 public:
  void encode(const char*, int64_t, uint64_t) override {}
  void completed(const char*, int64_t, uint64_t) override {}
  void mark(std::string_view) override {}
  uint64_t range_begin(std::string_view) override { return 0; }
  void range_end(uint64_t) override {}
};

TEST_F(RuntimeTest, ARuntimeWithoutATraceSinkLeavesAnotherInPlace) {
  namespace prof = mpsrt::detail::prof;
  static NullSink sink;  // a sink must outlive its use
  for (const char* name : {"cpu", "vulkan"}) {
    mpsrt::backend::Backend* b = nullptr;
    for (mpsrt::backend::Backend* x : mpsrt::backend::all_backends()) {
      if (std::string(x->name()) == name) b = x;
    }
    ASSERT_NE(b, nullptr) << name;
    if (!b->is_built() || !b->is_available()) continue;
    EXPECT_EQ(b->trace_sink(), nullptr) << name;
    mpsrt::backend::TraceSink* previous = prof::set_platform_sink(&sink);
    use_env({{"MPSRT_BACKEND", name}});
    mpsrt::Buffer buf(512);  // starts the runtime
    buf.reset();
    Runtime::reset(nullptr);  // and ends it
    EXPECT_EQ(prof::set_platform_sink(previous), &sink) << name;
  }
}
