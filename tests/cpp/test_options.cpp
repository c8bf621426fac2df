// Tests of the option table (core/options.h): every environment variable, its PYTORCH_MPS_*
// alias, its default and the errors for bad values, parsed from a fake environment.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/options.h"

namespace {

using mpsrt::detail::Options;
using Env = std::map<std::string, std::string>;

Options parse(const Env& env) {
  return mpsrt::detail::parse_options([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// The what() of the std::invalid_argument that parsing env throws ("" when it does not throw
// or throws something else; the caller's EXPECT then fails with the env in its message).
std::string parse_error(const Env& env) {
  try {
    parse(env);
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (...) {
    return "<an exception other than std::invalid_argument>";
  }
  return "";
}

std::string describe(const Env& env) {
  std::string s;
  for (const auto& kv : env) s += kv.first + "='" + kv.second + "' ";
  return s;
}

const std::vector<std::string> kNames = {
    "MPSRT_BACKEND",          "MPSRT_HIGH_WATERMARK_RATIO", "MPSRT_LOW_WATERMARK_RATIO",
    "MPSRT_DEBUG_ALLOCATOR",  "MPSRT_CPU_DEVICES",          "MPSRT_TRACE_SIGNPOSTS",
    "MPSRT_LOG_PROFILE_INFO", "MPSRT_PROFILE_RECORDS",      "MPSRT_CPU_SPIN_US",
    "MPSRT_CPU_ISA",          "MPSRT_CPU_THREADS",          "MPSRT_VULKAN_SPIN_US",
    "MPSRT_VULKAN_QUEUES",    "MPSRT_VULKAN_MEMORY",        "MPSRT_STAGING_BYTES",
    "MPSRT_VULKAN_WORKGROUP", "MPSRT_VULKAN_GROUPS_PER_SM", "MPSRT_VULKAN_UNROLL",
    "MPSRT_VULKAN_VECTOR",    "MPSRT_TORCH_KERNELS",        "MPSRT_VULKAN_COPY"};

const std::map<std::string, std::string> kAliases = {
    {"MPSRT_HIGH_WATERMARK_RATIO", "PYTORCH_MPS_HIGH_WATERMARK_RATIO"},
    {"MPSRT_LOW_WATERMARK_RATIO", "PYTORCH_MPS_LOW_WATERMARK_RATIO"},
    {"MPSRT_DEBUG_ALLOCATOR", "PYTORCH_DEBUG_MPS_ALLOCATOR"},
    {"MPSRT_TRACE_SIGNPOSTS", "PYTORCH_MPS_TRACE_SIGNPOSTS"},
    {"MPSRT_LOG_PROFILE_INFO", "PYTORCH_MPS_LOG_PROFILE_INFO"}};

TEST(Options, Defaults) {
  const Options o = parse({});
  EXPECT_EQ(o.backend, "");
  EXPECT_DOUBLE_EQ(o.high_watermark_ratio, 1.7);
  EXPECT_DOUBLE_EQ(o.low_watermark_ratio, 1.4);
  EXPECT_EQ(o.debug_allocator, 0u);
  EXPECT_EQ(o.cpu_devices, 1);
  EXPECT_EQ(o.trace_signposts, 0u);
  EXPECT_EQ(o.log_profile_info, 0u);
  EXPECT_EQ(o.cpu_spin_us, 50);
  EXPECT_EQ(o.cpu_isa, "auto");
  EXPECT_EQ(o.vulkan_workgroup, 0u);
  EXPECT_EQ(o.vulkan_groups_per_sm, 0u);
  EXPECT_EQ(o.vulkan_unroll, 2u);
  EXPECT_EQ(o.vulkan_vector, 16u);
  EXPECT_EQ(o.vulkan_copy, "kernel");
}

TEST(Options, ReadsEveryVariableOfTheTableAndNothingElse) {
  std::set<std::string> asked;
  mpsrt::detail::parse_options([&](const char* name) -> const char* {
    asked.insert(name);
    return nullptr;
  });
  std::set<std::string> expected(kNames.begin(), kNames.end());
  for (const auto& kv : kAliases) expected.insert(kv.second);
  EXPECT_EQ(asked, expected);
}

TEST(Options, EachVariableIsParsed) {
  for (const char* b : {"cpu", "vulkan", "metal"}) {
    EXPECT_EQ(parse({{"MPSRT_BACKEND", b}}).backend, b);
  }
  EXPECT_DOUBLE_EQ(parse({{"MPSRT_HIGH_WATERMARK_RATIO", "1.75"}}).high_watermark_ratio, 1.75);
  EXPECT_DOUBLE_EQ(parse({{"MPSRT_HIGH_WATERMARK_RATIO", "0"}}).high_watermark_ratio, 0.0);
  EXPECT_DOUBLE_EQ(parse({{"MPSRT_LOW_WATERMARK_RATIO", "0.5"}}).low_watermark_ratio, 0.5);
  EXPECT_DOUBLE_EQ(parse({{"MPSRT_LOW_WATERMARK_RATIO", "1e-1"}}).low_watermark_ratio, 0.1);
  EXPECT_EQ(parse({{"MPSRT_DEBUG_ALLOCATOR", "5"}}).debug_allocator, 5u);
  EXPECT_EQ(parse({{"MPSRT_DEBUG_ALLOCATOR", "0xF"}}).debug_allocator, 15u);
  EXPECT_EQ(parse({{"MPSRT_DEBUG_ALLOCATOR", "0X0a"}}).debug_allocator, 10u);
  EXPECT_EQ(parse({{"MPSRT_CPU_DEVICES", "1"}}).cpu_devices, 1);
  EXPECT_EQ(parse({{"MPSRT_CPU_DEVICES", "3"}}).cpu_devices, 3);
  EXPECT_EQ(parse({{"MPSRT_CPU_DEVICES", "64"}}).cpu_devices, 64);
  EXPECT_EQ(parse({{"MPSRT_TRACE_SIGNPOSTS", "63"}}).trace_signposts, 0x3Fu);
  EXPECT_EQ(parse({{"MPSRT_TRACE_SIGNPOSTS", "0x12"}}).trace_signposts, 0x12u);
  EXPECT_EQ(parse({{"MPSRT_LOG_PROFILE_INFO", "0x3ff"}}).log_profile_info, 0x3FFu);
  EXPECT_EQ(parse({{"MPSRT_LOG_PROFILE_INFO", "7"}}).log_profile_info, 7u);
  EXPECT_EQ(parse({}).profile_records, uint64_t{1} << 20);
  EXPECT_EQ(parse({{"MPSRT_PROFILE_RECORDS", "1024"}}).profile_records, 1024u);
  EXPECT_EQ(parse({{"MPSRT_PROFILE_RECORDS", "268435456"}}).profile_records, 268435456u);
  EXPECT_EQ(parse({{"MPSRT_CPU_SPIN_US", "0"}}).cpu_spin_us, 0);
  EXPECT_EQ(parse({{"MPSRT_CPU_SPIN_US", "1000000"}}).cpu_spin_us, 1000000);
  EXPECT_EQ(parse({}).vulkan_spin_us, 20);
  EXPECT_EQ(parse({{"MPSRT_VULKAN_SPIN_US", "0"}}).vulkan_spin_us, 0);
  EXPECT_FALSE(parse({}).vulkan_shared_queue);
  EXPECT_TRUE(parse({{"MPSRT_VULKAN_QUEUES", "shared"}}).vulkan_shared_queue);
  EXPECT_FALSE(parse({{"MPSRT_VULKAN_QUEUES", "stream"}}).vulkan_shared_queue);
  for (const char* isa : {"auto", "avx512", "avx2", "scalar"}) {
    EXPECT_EQ(parse({{"MPSRT_CPU_ISA", isa}}).cpu_isa, isa);
  }
  EXPECT_EQ(parse({{"MPSRT_VULKAN_MEMORY", "auto"}}).vulkan_memory, "auto");
  EXPECT_EQ(parse({{"MPSRT_VULKAN_MEMORY", "discrete"}}).vulkan_memory, "discrete");
  EXPECT_EQ(parse({{"MPSRT_STAGING_BYTES", "65536"}}).staging_bytes, 65536u);
  EXPECT_EQ(parse({{"MPSRT_STAGING_BYTES", "0x100000"}}).staging_bytes, 1u << 20);
  EXPECT_EQ(parse({{"MPSRT_STAGING_BYTES", "1099511627776"}}).staging_bytes, uint64_t(1) << 40);
  for (uint32_t wg : {0u, 32u, 64u, 128u, 256u, 512u, 1024u}) {
    EXPECT_EQ(parse({{"MPSRT_VULKAN_WORKGROUP", std::to_string(wg)}}).vulkan_workgroup, wg);
  }
  EXPECT_EQ(parse({{"MPSRT_VULKAN_GROUPS_PER_SM", "0"}}).vulkan_groups_per_sm, 0u);
  EXPECT_EQ(parse({{"MPSRT_VULKAN_GROUPS_PER_SM", "16"}}).vulkan_groups_per_sm, 16u);
  EXPECT_EQ(parse({{"MPSRT_VULKAN_GROUPS_PER_SM", "1024"}}).vulkan_groups_per_sm, 1024u);
  for (uint32_t u : {1u, 2u, 4u, 8u}) {
    EXPECT_EQ(parse({{"MPSRT_VULKAN_UNROLL", std::to_string(u)}}).vulkan_unroll, u);
  }
  EXPECT_EQ(parse({{"MPSRT_VULKAN_VECTOR", "4"}}).vulkan_vector, 4u);
  EXPECT_EQ(parse({{"MPSRT_VULKAN_VECTOR", "16"}}).vulkan_vector, 16u);
  EXPECT_EQ(parse({{"MPSRT_VULKAN_COPY", "dma"}}).vulkan_copy, "dma");
  EXPECT_EQ(parse({{"MPSRT_VULKAN_COPY", "kernel"}}).vulkan_copy, "kernel");
  EXPECT_EQ(parse({}).torch_kernels, "auto");
  for (const char* v : {"auto", "device", "cpu"}) {
    EXPECT_EQ(parse({{"MPSRT_TORCH_KERNELS", v}}).torch_kernels, v);
  }
}

TEST(Options, PytorchAliasesAreAccepted) {
  const Options o = parse({{"PYTORCH_MPS_HIGH_WATERMARK_RATIO", "2.0"},
                           {"PYTORCH_MPS_LOW_WATERMARK_RATIO", "0.25"},
                           {"PYTORCH_DEBUG_MPS_ALLOCATOR", "3"},
                           {"PYTORCH_MPS_TRACE_SIGNPOSTS", "0x20"},
                           {"PYTORCH_MPS_LOG_PROFILE_INFO", "9"}});
  EXPECT_DOUBLE_EQ(o.high_watermark_ratio, 2.0);
  EXPECT_DOUBLE_EQ(o.low_watermark_ratio, 0.25);
  EXPECT_EQ(o.debug_allocator, 3u);
  EXPECT_EQ(o.trace_signposts, 0x20u);
  EXPECT_EQ(o.log_profile_info, 9u);
}

TEST(Options, MpsrtNameWinsOverAlias) {
  const Options o = parse({{"MPSRT_HIGH_WATERMARK_RATIO", "1.9"},
                           {"PYTORCH_MPS_HIGH_WATERMARK_RATIO", "2.0"},
                           {"MPSRT_LOW_WATERMARK_RATIO", "0.5"},
                           {"PYTORCH_MPS_LOW_WATERMARK_RATIO", "0.25"},
                           {"MPSRT_DEBUG_ALLOCATOR", "1"},
                           {"PYTORCH_DEBUG_MPS_ALLOCATOR", "2"},
                           {"MPSRT_TRACE_SIGNPOSTS", "4"},
                           {"PYTORCH_MPS_TRACE_SIGNPOSTS", "8"},
                           {"MPSRT_LOG_PROFILE_INFO", "16"},
                           {"PYTORCH_MPS_LOG_PROFILE_INFO", "32"}});
  EXPECT_DOUBLE_EQ(o.high_watermark_ratio, 1.9);
  EXPECT_DOUBLE_EQ(o.low_watermark_ratio, 0.5);
  EXPECT_EQ(o.debug_allocator, 1u);
  EXPECT_EQ(o.trace_signposts, 4u);
  EXPECT_EQ(o.log_profile_info, 16u);
  // The alias is not even read when the MPSRT_ name is set: its bad value does not matter.
  EXPECT_EQ(parse({{"MPSRT_DEBUG_ALLOCATOR", "1"}, {"PYTORCH_DEBUG_MPS_ALLOCATOR", "junk"}})
                .debug_allocator,
            1u);
}

struct Bad {
  const char* var;
  const char* value;
};

TEST(Options, BadValuesThrowNamingTheVariable) {
  const std::vector<Bad> cases = {
      // ratios
      {"MPSRT_HIGH_WATERMARK_RATIO", "abc"},
      {"MPSRT_HIGH_WATERMARK_RATIO", "-1"},
      {"MPSRT_HIGH_WATERMARK_RATIO", "-0.5"},
      {"MPSRT_HIGH_WATERMARK_RATIO", "nan"},
      {"MPSRT_HIGH_WATERMARK_RATIO", "NaN"},
      {"MPSRT_HIGH_WATERMARK_RATIO", "inf"},
      {"MPSRT_HIGH_WATERMARK_RATIO", "-inf"},
      {"MPSRT_HIGH_WATERMARK_RATIO", "infinity"},
      {"MPSRT_HIGH_WATERMARK_RATIO", "1e999"},
      {"MPSRT_HIGH_WATERMARK_RATIO", ""},
      {"MPSRT_HIGH_WATERMARK_RATIO", "1.5x"},
      {"MPSRT_HIGH_WATERMARK_RATIO", "1.5 "},
      {"MPSRT_LOW_WATERMARK_RATIO", "0.5.1"},
      {"MPSRT_LOW_WATERMARK_RATIO", "-2"},
      {"MPSRT_LOW_WATERMARK_RATIO", ""},
      {"PYTORCH_MPS_HIGH_WATERMARK_RATIO", "nan"},
      {"PYTORCH_MPS_LOW_WATERMARK_RATIO", "lots"},
      // integers and bitmasks
      {"MPSRT_CPU_DEVICES", "0"},
      {"MPSRT_CPU_DEVICES", "65"},
      {"MPSRT_CPU_DEVICES", "-1"},
      {"MPSRT_CPU_DEVICES", "+2"},
      {"MPSRT_CPU_DEVICES", " 2"},
      {"MPSRT_CPU_DEVICES", "2 "},
      {"MPSRT_CPU_DEVICES", "2x"},
      {"MPSRT_CPU_DEVICES", "1.5"},
      {"MPSRT_CPU_DEVICES", "two"},
      {"MPSRT_CPU_DEVICES", ""},
      {"MPSRT_CPU_DEVICES", "0x"},
      {"MPSRT_CPU_DEVICES", "99999999999999999999999"},
      {"MPSRT_CPU_DEVICES", "18446744073709551617"},
      {"MPSRT_DEBUG_ALLOCATOR", "16"},
      {"MPSRT_DEBUG_ALLOCATOR", "0x10"},
      {"MPSRT_DEBUG_ALLOCATOR", "-1"},
      {"MPSRT_DEBUG_ALLOCATOR", "0xG"},
      {"MPSRT_TRACE_SIGNPOSTS", "64"},
      {"MPSRT_TRACE_SIGNPOSTS", "0x40"},
      {"MPSRT_TRACE_SIGNPOSTS", "4294967296"},
      {"MPSRT_TRACE_SIGNPOSTS", "0x100000000"},
      {"MPSRT_TRACE_SIGNPOSTS", "nan"},
      {"MPSRT_LOG_PROFILE_INFO", "-5"},
      {"MPSRT_LOG_PROFILE_INFO", "1e3"},
      {"MPSRT_LOG_PROFILE_INFO", "1024"},
      {"MPSRT_PROFILE_RECORDS", "1023"},
      {"MPSRT_PROFILE_RECORDS", "268435457"},
      {"MPSRT_PROFILE_RECORDS", "lots"},
      {"MPSRT_CPU_SPIN_US", "1000001"},
      {"MPSRT_CPU_SPIN_US", "-1"},
      {"MPSRT_CPU_SPIN_US", "inf"},
      {"MPSRT_VULKAN_SPIN_US", "1000001"},
      {"MPSRT_VULKAN_SPIN_US", "-2"},
      {"MPSRT_VULKAN_QUEUES", "Shared"},
      {"PYTORCH_DEBUG_MPS_ALLOCATOR", "32"},
      {"PYTORCH_MPS_TRACE_SIGNPOSTS", "x"},
      {"PYTORCH_MPS_LOG_PROFILE_INFO", ""},
      // names
      {"MPSRT_BACKEND", "nope"},
      {"MPSRT_BACKEND", ""},
      {"MPSRT_BACKEND", "CPU"},
      {"MPSRT_BACKEND", "cpu "},
      {"MPSRT_CPU_ISA", "bogus"},
      {"MPSRT_CPU_ISA", ""},
      {"MPSRT_CPU_ISA", "AVX2"},
      {"MPSRT_VULKAN_MEMORY", "unified"},
      {"MPSRT_VULKAN_MEMORY", "Discrete"},
      {"MPSRT_VULKAN_MEMORY", ""},
      {"MPSRT_STAGING_BYTES", "65535"},
      {"MPSRT_STAGING_BYTES", "1099511627777"},
      {"MPSRT_STAGING_BYTES", "64M"},
      {"MPSRT_STAGING_BYTES", "-1"},
      {"MPSRT_VULKAN_WORKGROUP", "16"},
      {"MPSRT_VULKAN_WORKGROUP", "100"},
      {"MPSRT_VULKAN_WORKGROUP", "2048"},
      {"MPSRT_VULKAN_WORKGROUP", "-64"},
      {"MPSRT_VULKAN_WORKGROUP", ""},
      {"MPSRT_VULKAN_GROUPS_PER_SM", "1025"},
      {"MPSRT_VULKAN_GROUPS_PER_SM", "x"},
      {"MPSRT_VULKAN_UNROLL", "0"},
      {"MPSRT_VULKAN_UNROLL", "3"},
      {"MPSRT_VULKAN_UNROLL", "16"},
      {"MPSRT_VULKAN_VECTOR", "8"},
      {"MPSRT_VULKAN_VECTOR", "016"},
      {"MPSRT_VULKAN_VECTOR", ""},
      {"MPSRT_TORCH_KERNELS", "gpu"},
      {"MPSRT_TORCH_KERNELS", "Device"},
      {"MPSRT_TORCH_KERNELS", ""},
      {"MPSRT_VULKAN_COPY", "DMA"},
      {"MPSRT_VULKAN_COPY", "shader"},
      {"MPSRT_VULKAN_COPY", ""},
  };
  for (const Bad& b : cases) {
    const Env env = {{b.var, b.value}};
    const std::string what = parse_error(env);
    EXPECT_NE(what, "") << describe(env) << "was accepted";
    EXPECT_NE(what.find(b.var), std::string::npos)
        << describe(env) << "gave a message without the variable's name: " << what;
  }
}

// strtoull and strtod skip leading white space; the parser must not accept what the
// white-space check (" 2" is rejected) means to reject.
TEST(Options, LeadingWhiteSpaceIsRejected) {
  const std::vector<Bad> cases = {
      {"MPSRT_CPU_DEVICES", "\t2"},           {"MPSRT_CPU_DEVICES", "\n2"},
      {"MPSRT_CPU_SPIN_US", "\t10"},          {"MPSRT_DEBUG_ALLOCATOR", "\t1"},
      {"MPSRT_HIGH_WATERMARK_RATIO", " 1.5"}, {"MPSRT_LOW_WATERMARK_RATIO", "\t0.5"},
  };
  for (const Bad& b : cases) {
    const Env env = {{b.var, b.value}};
    const std::string what = parse_error(env);
    EXPECT_NE(what, "") << describe(env) << "was accepted";
    EXPECT_NE(what.find(b.var), std::string::npos) << what;
  }
}

TEST(Options, LowWatermarkAboveHighIsRejected) {
  for (const Env& env : std::vector<Env>{
           {{"MPSRT_HIGH_WATERMARK_RATIO", "1.0"}, {"MPSRT_LOW_WATERMARK_RATIO", "1.5"}},
           {{"PYTORCH_MPS_HIGH_WATERMARK_RATIO", "0.5"},
            {"PYTORCH_MPS_LOW_WATERMARK_RATIO", "0.75"}},
           {{"MPSRT_HIGH_WATERMARK_RATIO", "1.0"}},  // below the default low ratio 1.4
       }) {
    const std::string what = parse_error(env);
    EXPECT_NE(what, "") << describe(env) << "was accepted";
    EXPECT_NE(what.find("LOW_WATERMARK_RATIO"), std::string::npos) << what;
    EXPECT_NE(what.find("HIGH_WATERMARK_RATIO"), std::string::npos) << what;
  }
  // Equal ratios are fine, and a high ratio of 0 (no limit) allows any low ratio up to 2.
  EXPECT_NO_THROW(
      parse({{"MPSRT_HIGH_WATERMARK_RATIO", "1.2"}, {"MPSRT_LOW_WATERMARK_RATIO", "1.2"}}));
  const Options o =
      parse({{"MPSRT_HIGH_WATERMARK_RATIO", "0"}, {"MPSRT_LOW_WATERMARK_RATIO", "2"}});
  EXPECT_DOUBLE_EQ(o.high_watermark_ratio, 0.0);
  EXPECT_DOUBLE_EQ(o.low_watermark_ratio, 2.0);
  // Ratios above 2 are rejected, as torch.mps does.
  EXPECT_THROW(parse({{"MPSRT_HIGH_WATERMARK_RATIO", "2.5"}}), std::invalid_argument);
  EXPECT_THROW(parse({{"MPSRT_HIGH_WATERMARK_RATIO", "0"}, {"MPSRT_LOW_WATERMARK_RATIO", "5"}}),
               std::invalid_argument);
  // The message names the variable actually set, and says when the low ratio is the default.
  try {
    parse({{"PYTORCH_MPS_HIGH_WATERMARK_RATIO", "1.0"}});
    ADD_FAILURE() << "a high ratio below the default low ratio was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("the default MPSRT_LOW_WATERMARK_RATIO (1.4)"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("PYTORCH_MPS_HIGH_WATERMARK_RATIO (1)"), std::string::npos)
        << e.what();
  }
}

TEST(Options, DescribeListsEveryVariableWithItsDefault) {
  const std::vector<mpsrt::OptionInfo> infos = mpsrt::detail::describe_options(Options{});
  std::vector<std::string> names;
  for (const mpsrt::OptionInfo& i : infos) names.push_back(i.name);
  EXPECT_EQ(names, kNames);
  const std::map<std::string, std::string> defaults = {{"MPSRT_BACKEND", "(best available)"},
                                                       {"MPSRT_HIGH_WATERMARK_RATIO", "1.7"},
                                                       {"MPSRT_LOW_WATERMARK_RATIO", "1.4"},
                                                       {"MPSRT_DEBUG_ALLOCATOR", "0"},
                                                       {"MPSRT_CPU_DEVICES", "1"},
                                                       {"MPSRT_TRACE_SIGNPOSTS", "0"},
                                                       {"MPSRT_LOG_PROFILE_INFO", "0"},
                                                       {"MPSRT_PROFILE_RECORDS", "1048576"},
                                                       {"MPSRT_CPU_SPIN_US", "50"},
                                                       {"MPSRT_CPU_ISA", "auto"},
                                                       {"MPSRT_CPU_THREADS", "0"},
                                                       {"MPSRT_VULKAN_SPIN_US", "20"},
                                                       {"MPSRT_VULKAN_QUEUES", "stream"},
                                                       {"MPSRT_VULKAN_MEMORY", "auto"},
                                                       {"MPSRT_STAGING_BYTES", "67108864"},
                                                       {"MPSRT_VULKAN_WORKGROUP", "0"},
                                                       {"MPSRT_VULKAN_GROUPS_PER_SM", "0"},
                                                       {"MPSRT_VULKAN_UNROLL", "2"},
                                                       {"MPSRT_VULKAN_VECTOR", "16"},
                                                       {"MPSRT_TORCH_KERNELS", "auto"},
                                                       {"MPSRT_VULKAN_COPY", "kernel"}};
  for (const mpsrt::OptionInfo& i : infos) {
    SCOPED_TRACE(i.name);
    auto alias = kAliases.find(i.name);
    EXPECT_EQ(i.alias, alias == kAliases.end() ? "" : alias->second);
    EXPECT_EQ(i.default_value, defaults.at(i.name));
    EXPECT_FALSE(i.help.empty());
    // With default options the value in force is the default (the backend shows "" = unset).
    EXPECT_EQ(i.value, i.name == "MPSRT_BACKEND" ? "" : i.default_value);
    // The documented default is what parsing an empty environment gives.
    if (i.name != "MPSRT_BACKEND") {
      for (const mpsrt::OptionInfo& j : mpsrt::detail::describe_options(parse({}))) {
        if (j.name == i.name) {
          EXPECT_EQ(j.value, i.default_value);
        }
      }
    }
  }
}

// What a backend receives (Backend::configure): every variable of the table, by name, with the
// text describe_options() shows for its value in force.
TEST(Options, BackendSettingsAreTheTableWithItsValuesInForce) {
  const Options o = parse({{"MPSRT_CPU_SPIN_US", "7"},
                           {"MPSRT_VULKAN_QUEUES", "shared"},
                           {"MPSRT_STAGING_BYTES", "0x100000"},
                           {"PYTORCH_DEBUG_MPS_ALLOCATOR", "0x3"}});
  const mpsrt::backend::Settings s = mpsrt::detail::backend_settings(o);
  for (const mpsrt::OptionInfo& i : mpsrt::detail::describe_options(o)) {
    EXPECT_EQ(s.text(i.name), i.value) << i.name;
  }
  EXPECT_EQ(s.integer("MPSRT_CPU_SPIN_US"), 7);
  EXPECT_EQ(s.integer("MPSRT_STAGING_BYTES"), 1 << 20);
  EXPECT_EQ(s.integer("MPSRT_DEBUG_ALLOCATOR"), 3);
  EXPECT_EQ(s.text("MPSRT_VULKAN_QUEUES"), "shared");
  EXPECT_EQ(s.text("MPSRT_CPU_ISA"), "auto");
  // A backend asking for a variable the table lacks, or for a word as a number, is a bug of
  // mpsrt's: std::logic_error, not the std::invalid_argument of a user's bad value.
  for (const auto& ask : std::vector<std::function<void()>>{
           [&] { s.text("MPSRT_NO_SUCH_VARIABLE"); }, [&] { s.integer("MPSRT_CPU_ISA"); }}) {
    try {
      ask();
      ADD_FAILURE() << "no exception";
    } catch (const std::invalid_argument& e) {
      ADD_FAILURE() << "std::invalid_argument: " << e.what();
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("MPSRT_"), std::string::npos) << e.what();
    }
  }
}

TEST(Options, DescribeShowsTheValuesInForce) {
  const Options o = parse({{"MPSRT_BACKEND", "cpu"},
                           {"MPSRT_HIGH_WATERMARK_RATIO", "1.75"},
                           {"PYTORCH_MPS_LOW_WATERMARK_RATIO", "0.5"},
                           {"MPSRT_DEBUG_ALLOCATOR", "0x3"},
                           {"MPSRT_CPU_DEVICES", "3"},
                           {"MPSRT_TRACE_SIGNPOSTS", "0x10"},
                           {"MPSRT_LOG_PROFILE_INFO", "2"},
                           {"MPSRT_CPU_SPIN_US", "0"},
                           {"MPSRT_CPU_ISA", "scalar"},
                           {"MPSRT_VULKAN_MEMORY", "discrete"},
                           {"MPSRT_STAGING_BYTES", "1048576"},
                           {"MPSRT_VULKAN_WORKGROUP", "128"},
                           {"MPSRT_VULKAN_GROUPS_PER_SM", "4"},
                           {"MPSRT_VULKAN_UNROLL", "8"},
                           {"MPSRT_VULKAN_VECTOR", "4"},
                           {"MPSRT_VULKAN_COPY", "dma"}});
  std::map<std::string, std::string> values;
  for (const mpsrt::OptionInfo& i : mpsrt::detail::describe_options(o)) values[i.name] = i.value;
  EXPECT_EQ(values.at("MPSRT_BACKEND"), "cpu");
  EXPECT_EQ(values.at("MPSRT_HIGH_WATERMARK_RATIO"), "1.75");
  EXPECT_EQ(values.at("MPSRT_LOW_WATERMARK_RATIO"), "0.5");
  EXPECT_EQ(values.at("MPSRT_DEBUG_ALLOCATOR"), "3");
  EXPECT_EQ(values.at("MPSRT_CPU_DEVICES"), "3");
  EXPECT_EQ(values.at("MPSRT_TRACE_SIGNPOSTS"), "16");
  EXPECT_EQ(values.at("MPSRT_LOG_PROFILE_INFO"), "2");
  EXPECT_EQ(values.at("MPSRT_CPU_SPIN_US"), "0");
  EXPECT_EQ(values.at("MPSRT_CPU_ISA"), "scalar");
  EXPECT_EQ(values.at("MPSRT_VULKAN_MEMORY"), "discrete");
  EXPECT_EQ(values.at("MPSRT_STAGING_BYTES"), "1048576");
  EXPECT_EQ(values.at("MPSRT_VULKAN_WORKGROUP"), "128");
  EXPECT_EQ(values.at("MPSRT_VULKAN_GROUPS_PER_SM"), "4");
  EXPECT_EQ(values.at("MPSRT_VULKAN_UNROLL"), "8");
  EXPECT_EQ(values.at("MPSRT_VULKAN_VECTOR"), "4");
  EXPECT_EQ(values.at("MPSRT_VULKAN_COPY"), "dma");
}

}  // namespace
