// Tests of the signpost profiler (mpsrt/profiler.h) from C++: sessions and their records,
// ranges, overflow accounting, statistics, and recording from many threads while exporting.
// Every test runs on each backend that is built and available, in its own environment.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "core/profiler.h"
#include "core/profiler_records.h"
#include "core/runtime.h"
#include "mpsrt/mpsrt.h"

namespace {

using Env = std::map<std::string, std::string>;
using mpsrt::Buffer;
using mpsrt::Stream;
using mpsrt::detail::Runtime;
namespace profiler = mpsrt::profiler;

std::vector<std::string> usable_backends() {
  std::vector<std::string> out;
  for (mpsrt::backend::Backend* b : mpsrt::backend::all_backends()) {
    if (b->is_built() && b->is_available()) out.push_back(b->name());
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

class ProfilerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { use_env({}); }
  void TearDown() override {
    profiler::stop();
    Runtime::reset(nullptr);
    std::remove(path_.c_str());
  }
  void use_env(Env env) {
    env["MPSRT_BACKEND"] = GetParam();
    env_ = std::move(env);
    const mpsrt::detail::EnvLookup lookup = [this](const char* name) -> const char* {
      auto it = env_.find(name);
      return it == env_.end() ? nullptr : it->second.c_str();
    };
    Runtime::reset(&lookup);
  }
  std::string export_text(profiler::TraceSummary* summary = nullptr) {
    const profiler::TraceSummary s = profiler::export_trace(path_);
    if (summary != nullptr) *summary = s;
    return read_file(path_);
  }

  Env env_;
  // Per process: ctest runs tests in parallel processes that share the temporary directory.
  std::string path_ =
      ::testing::TempDir() + "mpsrt_profiler_test_" + std::to_string(getpid()) + ".json";
};

TEST_P(ProfilerTest, ASessionRecordsEncodesDeviceIntervalsAndTheirCommandBuffer) {
  Stream s = mpsrt::default_stream();
  Buffer b(4096, s);
  s.synchronize();
  profiler::start(profiler::kInterval);
  for (int i = 0; i < 3; ++i) b.fill(static_cast<uint64_t>(i), 1, s);
  s.synchronize();
  profiler::stop();
  profiler::TraceSummary sum;
  const std::string json = export_text(&sum);
  // The counters' starting sample, three encodes, three device intervals, one command buffer.
  EXPECT_EQ(sum.records, 8u) << json;
  EXPECT_EQ(sum.dropped, 0u);
  EXPECT_EQ(count(json, "\"cat\":\"encode\""), 3u);
  EXPECT_EQ(count(json, "\"cat\":\"device\""), 3u);
  EXPECT_EQ(count(json, "\"cat\":\"command_buffer\""), 1u);
  EXPECT_EQ(count(json, "\"ph\":\"s\""), 3u);
  EXPECT_EQ(count(json, "\"ph\":\"f\""), 3u);
  EXPECT_EQ(count(json, "\"commands\":3"), 1u);
}

// A trace sink (os_signpost on Apple) sees a session's encodes, completions, marks and
// ranges, with each range ended by the id its begin returned, and nothing outside a session.
class RecordingSink final : public mpsrt::backend::TraceSink {
 public:
  void encode(const char* op, int64_t, uint64_t) override { log("encode " + std::string(op)); }
  void completed(const char* op, int64_t, uint64_t) override {
    log("completed " + std::string(op));
  }
  void mark(std::string_view m) override { log("mark " + std::string(m)); }
  uint64_t range_begin(std::string_view m) override {
    log("begin " + std::string(m));
    return ++next_;
  }
  void range_end(uint64_t id) override { log("end " + std::to_string(id)); }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    events_.clear();
    next_ = 100;
  }
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  void log(std::string e) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  std::mutex mu_;
  std::vector<std::string> events_;
  uint64_t next_ = 100;
};

TEST_P(ProfilerTest, ATraceSinkSeesTheSessionOnly) {
  namespace prof = mpsrt::detail::prof;
  static RecordingSink sink;  // a sink must outlive its use (the profiler never frees one)
  sink.clear();
  mpsrt::backend::TraceSink* previous = prof::set_platform_sink(&sink);
  Stream s = mpsrt::default_stream();
  Buffer b(4096, s);
  b.fill(1, 1, s);
  profiler::mark("outside");
  s.synchronize();
  EXPECT_TRUE(sink.events().empty());
  profiler::start(profiler::kInterval);
  profiler::range_push("outer");
  profiler::range_push("inner");
  b.fill(2, 1, s);
  profiler::mark("here");
  profiler::range_pop();
  profiler::range_pop();
  s.synchronize();
  profiler::stop();
  prof::set_platform_sink(previous);
  const std::vector<std::string> ev = sink.events();
  auto has = [&ev](const std::string& e) { return std::find(ev.begin(), ev.end(), e) != ev.end(); };
  EXPECT_TRUE(has("begin outer") && has("begin inner") && has("mark here")) << ev.size();
  EXPECT_TRUE(has("encode fill") && has("completed fill"));
  // inner (id 102) ends before outer (id 101).
  auto at = [&ev](const std::string& e) { return std::find(ev.begin(), ev.end(), e) - ev.begin(); };
  EXPECT_LT(at("end 102"), at("end 101"));
  EXPECT_LT(at("begin inner"), at("end 102"));
  EXPECT_FALSE(has("mark outside"));
}

TEST_P(ProfilerTest, NothingIsRecordedOutsideASession) {
  profiler::start(profiler::kInterval | profiler::kEvent);
  profiler::stop();
  profiler::TraceSummary before;
  export_text(&before);
  Stream s = mpsrt::default_stream();
  Buffer b(4096, s);
  b.fill(1, 4, s);
  profiler::mark("off");
  EXPECT_EQ(profiler::range_push("off"), 0);
  EXPECT_EQ(profiler::range_pop(), 0);
  s.synchronize();
  b.reset();
  profiler::TraceSummary after;
  export_text(&after);
  EXPECT_EQ(after.records, before.records);
  EXPECT_FALSE(profiler::is_active());
}

TEST_P(ProfilerTest, StartEndRangesEndOnAnyThreadAndMayOverlap) {
  profiler::start(profiler::kInterval);
  const int64_t a = profiler::range_start("first");
  const int64_t b = profiler::range_start("second");
  EXPECT_GT(a, 0);
  EXPECT_GT(b, a);
  profiler::range_end(a);                                       // overlapping, not nested
  std::thread([b] { profiler::range_end(b); }).join();          // ended on another thread
  EXPECT_THROW(profiler::range_end(b), std::invalid_argument);  // once only
  profiler::stop();
  const std::string json = export_text();
  EXPECT_EQ(count(json, "\"ph\":\"b\""), 2u);
  EXPECT_EQ(count(json, "\"ph\":\"e\""), 2u);
  EXPECT_EQ(count(json, "\"id\":" + std::to_string(a) + "}"), 2u);
  EXPECT_EQ(count(json, "\"id\":" + std::to_string(b) + "}"), 2u);
}

TEST_P(ProfilerTest, HostOpsAreIntervalsOnTheirStreamsTrackAndInTheStatistics) {
  Stream s = mpsrt::default_stream();
  EXPECT_EQ(profiler::host_op_begin(), 0);  // no session: nothing to time
  EXPECT_EQ(profiler::host_op_enter(), 0);
  EXPECT_EQ(profiler::host_op_enter(), 0);  // (every stream idle: answered without a look)
  profiler::host_op_end("aten::before", s, 0);
  profiler::start(profiler::kInterval);
  EXPECT_GT(profiler::host_op_enter(), 0) << "a session began with every stream idle";
  for (int i = 0; i < 3; ++i) {
    const int64_t t0 = profiler::host_op_begin();
    ASSERT_GT(t0, 0);
    profiler::host_op_end("aten::addmm", s, t0);
  }
  profiler::host_op_end("aten::relu", s, profiler::host_op_begin());
  profiler::stop();
  const std::string json = export_text();
  EXPECT_EQ(count(json, "\"cat\":\"host_op\""), 4u);
  EXPECT_EQ(count(json, "\"name\":\"aten::addmm\""), 3u);
  EXPECT_EQ(count(json, "aten::before"), 0u);
  // on the stream's track (tid = stream id + 1) of the device's process, named as a stream
  const std::string track = "\"tid\":" + std::to_string(s.id() + 1);
  const size_t at = json.find("\"name\":\"aten::relu\"");
  ASSERT_NE(at, std::string::npos);
  const size_t end = json.find('}', json.find("\"args\"", at));
  EXPECT_NE(json.substr(at, end - at).find(track), std::string::npos) << json.substr(at, 200);
  EXPECT_NE(json.find("\"stream " + std::to_string(s.id())), std::string::npos);
  const std::string stats = profiler::statistics();
  ASSERT_NE(stats.find("host op"), std::string::npos) << stats;
  std::istringstream table(stats);
  bool found = false;
  for (std::string line; std::getline(table, line);) {
    std::istringstream words(line);
    std::string name, n;
    words >> name >> n;
    if (name == "aten::addmm") {
      EXPECT_EQ(n, "3");
      found = true;
    }
  }
  EXPECT_TRUE(found) << stats;
}

TEST_P(ProfilerTest, RangesNestPerThreadAndAnUnbalancedPopThrows) {
  EXPECT_THROW(profiler::range_pop(), mpsrt::Error);
  profiler::start(profiler::kInterval);
  EXPECT_EQ(profiler::range_push("a"), 0);
  EXPECT_EQ(profiler::range_push("b"), 1);
  std::thread([] {
    EXPECT_EQ(profiler::range_push("other"), 0);
    EXPECT_EQ(profiler::range_pop(), 0);
    EXPECT_THROW(profiler::range_pop(), mpsrt::Error);
  }).join();
  EXPECT_EQ(profiler::range_pop(), 1);
  EXPECT_EQ(profiler::range_pop(), 0);
  EXPECT_THROW(profiler::range_pop(), mpsrt::Error);
  profiler::stop();
  const std::string json = export_text();
  EXPECT_EQ(count(json, "\"cat\":\"range\""), 3u);
  EXPECT_EQ(count(json, "\"depth\":1"), 1u);
  EXPECT_EQ(count(json, "\"depth\":0"), 2u);
}

TEST_P(ProfilerTest, BadModesAndASecondStartThrow) {
  EXPECT_THROW(profiler::start(0), std::invalid_argument);
  EXPECT_THROW(profiler::start(4), std::invalid_argument);
  EXPECT_FALSE(profiler::is_active());
  profiler::start(profiler::kEvent);
  EXPECT_THROW(profiler::start(profiler::kInterval), mpsrt::Error);
  EXPECT_TRUE(profiler::is_active());
  profiler::stop();
  profiler::stop();
  EXPECT_FALSE(profiler::is_active());
}

TEST_P(ProfilerTest, AFullBufferCountsWhatItDrops) {
  use_env({{"MPSRT_PROFILE_RECORDS", "1024"}});
  profiler::start(profiler::kInterval);
  for (int i = 0; i < 3000; ++i) profiler::mark(i % 2 == 0 ? "even" : "odd");
  profiler::stop();
  profiler::TraceSummary sum;
  const std::string json = export_text(&sum);
  EXPECT_EQ(sum.records, 1024u);
  EXPECT_EQ(sum.dropped, 3000u - 1024u);
  EXPECT_NE(json.find("\"dropped_records\":1976"), std::string::npos);
  EXPECT_NE(profiler::statistics().find("1976 dropped"), std::string::npos);
}

TEST_P(ProfilerTest, WaitUntilCompletedFinishesEachCommandBeforeReturning) {
  Stream s = mpsrt::default_stream();
  Buffer b(1 << 20, s);
  profiler::start(profiler::kInterval, /*wait_until_completed=*/true);
  for (int i = 0; i < 4; ++i) {
    b.fill(static_cast<uint64_t>(i), 1, s);
    EXPECT_TRUE(s.query());
  }
  profiler::stop();
  const std::string json = export_text();
  EXPECT_EQ(count(json, "\"commands\":1,"), 4u);
}

TEST_P(ProfilerTest, StatisticsCountOpsAndCopies) {
  Stream s = mpsrt::default_stream();
  Buffer a(1 << 16, s), b(1 << 16, s);
  profiler::start(profiler::kInterval);
  for (int i = 0; i < 5; ++i) a.fill(1, 1, s);
  b.copy_from(a, s);
  profiler::stop();
  std::istringstream table(profiler::statistics());
  std::map<std::string, std::vector<std::string>> rows;
  for (std::string line; std::getline(table, line);) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (!w.empty()) rows[w[0]] = w;
  }
  ASSERT_EQ(rows.count("fill"), 1u);
  ASSERT_EQ(rows.count("copy"), 1u);
  EXPECT_EQ(rows["fill"][1], "5");
  EXPECT_EQ(rows["fill"][8], std::to_string(5 << 16));
  EXPECT_EQ(rows["copy"][1], "1");
  EXPECT_GT(std::stod(rows["copy"][9]), 0.0);  // GB/s
}

TEST_P(ProfilerTest, ThreadsRecordWhileAnotherExports) {
  profiler::start(profiler::kInterval);
  constexpr int kThreads = 4;
  constexpr int kMarks = 20000;
  std::atomic<bool> done{false};
  std::thread exporter([&] {
    const std::string p = path_ + ".live";
    while (!done.load()) (void)profiler::export_trace(p);
    std::remove(p.c_str());
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      Stream s = mpsrt::default_stream();
      Buffer b(256, s);
      for (int i = 0; i < kMarks; ++i) {
        profiler::mark("t" + std::to_string(t));
        if (i % 1000 == 0) b.fill(1, 1, s);
      }
    });
  }
  for (auto& th : threads) th.join();
  done = true;
  exporter.join();
  profiler::stop();
  const std::string json = export_text();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(count(json, "\"name\":\"t" + std::to_string(t) + "\""), size_t{kMarks});
  }
  EXPECT_EQ(count(json, "\"cat\":\"encode\""), size_t{kThreads * kMarks / 1000});
  EXPECT_EQ(count(json, "\"cat\":\"device\""), size_t{kThreads * kMarks / 1000});
}

TEST_P(ProfilerTest, ExportToAnUnwritablePathThrowsAndKeepsTheRecords) {
  profiler::start(profiler::kInterval);
  profiler::mark("kept");
  profiler::stop();
  EXPECT_THROW(profiler::export_trace("/nonexistent-dir/t.json"), mpsrt::Error);
  EXPECT_EQ(count(export_text(), "\"name\":\"kept\""), 1u);
}

// A record whose name is no operation (out of the Op range) cannot be counted as one: the
// statistics leave it out of the operation and copy rows, and the trace names it "unknown", as
// it does a mark or host op whose string the thread does not have.
TEST(ProfilerRecords, AnOutOfRangeOperationNameIsLeftOutOfTheStatistics) {
  namespace prof = mpsrt::detail::prof;
  prof::ThreadRecords t;
  t.tid = 7;
  prof::Record fill;
  fill.kind = prof::Kind::Encode;
  fill.name = static_cast<uint32_t>(prof::Op::Fill);
  fill.begin = 1000;
  fill.end = 3000;
  fill.a = 64;
  t.records.push_back(fill);
  for (const prof::Kind k :
       {prof::Kind::Encode, prof::Kind::HostCopy, prof::Kind::Device, prof::Kind::Completion}) {
    for (const uint32_t name : {static_cast<uint32_t>(prof::Op::kCount), 0xFFFFFFFFu}) {
      prof::Record bad = fill;
      bad.kind = k;
      bad.name = name;
      bad.a = 1 << 20;
      t.records.push_back(bad);
    }
  }
  // Names of strings the thread does not have.
  for (const prof::Kind k : {prof::Kind::Mark, prof::Kind::HostOp}) {
    prof::Record bad = fill;
    bad.kind = k;
    bad.name = 5;
    t.records.push_back(bad);
  }
  prof::Snapshot s;
  s.pid = 1;
  s.threads.push_back(t);
  const std::string stats = prof::format_statistics(s, 0);
  EXPECT_NE(stats.find("11 records from 1 threads"), std::string::npos) << stats;
  std::istringstream table(stats);
  std::map<std::string, std::vector<std::string>> rows;
  for (std::string line; std::getline(table, line);) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (!w.empty()) rows[w[0]] = w;
  }
  ASSERT_EQ(rows.count("fill"), 1u) << stats;
  EXPECT_EQ(rows["fill"][1], "1");
  EXPECT_EQ(rows["fill"][8], "64");             // the bad records' bytes are not in any row
  EXPECT_EQ(rows.count("copy_from_host"), 0u);  // nor rows of their own
  EXPECT_EQ(rows.count("copy"), 0u) << stats;
  ASSERT_EQ(rows.count("unknown"), 1u) << stats;  // the host op
  EXPECT_EQ(rows["unknown"][1], "1");

  const std::string path =
      ::testing::TempDir() + "mpsrt_profiler_unknown_" + std::to_string(getpid()) + ".json";
  const profiler::TraceSummary sum = prof::write_trace_json(s, path);
  const std::string json = read_file(path);
  std::remove(path.c_str());
  EXPECT_EQ(sum.records, 11u);
  EXPECT_EQ(count(json, "\"name\":\"fill\""), 1u);
  EXPECT_EQ(count(json, "\"name\":\"unknown\""), 10u) << json;
}

INSTANTIATE_TEST_SUITE_P(Profiler, ProfilerTest, ::testing::ValuesIn(usable_backends()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
