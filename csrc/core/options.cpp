#include "core/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "mpsrt/error.h"

namespace mpsrt::detail {
namespace {

[[noreturn]] MPSRT_COLD void bad_value(const char* var, const std::string& text,
                                       const std::string& expected) {
  throw_invalid("[options] " + std::string(var) + "='" + text + "' is not valid: expected " +
                expected);
}

double parse_ratio(const char* var, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !std::isfinite(v) ||
      v < 0.0) {
    bad_value(var, text, "a finite number >= 0");
  }
  return v;
}

uint64_t parse_uint(const char* var, const std::string& text, uint64_t lo, uint64_t hi,
                    const std::string& expected) {
  // Decimal, or hexadecimal with 0x (bitmasks).
  const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, hex ? 16 : 10);
  if (text.empty() || text[0] == '-' || text[0] == '+' || text[0] == ' ' ||
      end != text.c_str() + text.size() || errno != 0 || v < lo || v > hi) {
    bad_value(var, text, expected);
  }
  return v;
}

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

struct Entry {
  const char* name;
  const char* alias;
  const char* default_value;
  const char* help;
  void (*parse)(const char* var, const std::string& text, Options& o);
  std::string (*show)(const Options& o);
};

const Entry kTable[] = {
    {"MPSRT_BACKEND", "", "(best available)",
     "Backend to use: cpu, vulkan or metal. Unset: the best available one (metal, vulkan, cpu).",
     [](const char* var, const std::string& t, Options& o) {
       if (t != "cpu" && t != "vulkan" && t != "metal") {
         bad_value(var, t, "one of cpu, vulkan, metal");
       }
       o.backend = t;
     },
     [](const Options& o) { return o.backend; }},
    {"MPSRT_HIGH_WATERMARK_RATIO", "PYTORCH_MPS_HIGH_WATERMARK_RATIO", "1.7",
     "Hard memory limit as a multiple of recommended_max_memory; 0 disables the limit.",
     [](const char* var, const std::string& t, Options& o) {
       o.high_watermark_ratio = parse_ratio(var, t);
     },
     [](const Options& o) { return fmt(o.high_watermark_ratio); }},
    {"MPSRT_LOW_WATERMARK_RATIO", "PYTORCH_MPS_LOW_WATERMARK_RATIO", "1.4",
     "Soft limit (multiple of recommended_max_memory) above which cached blocks are collected; "
     "must not exceed the high watermark ratio.",
     [](const char* var, const std::string& t, Options& o) {
       o.low_watermark_ratio = parse_ratio(var, t);
     },
     [](const Options& o) { return fmt(o.low_watermark_ratio); }},
    {"MPSRT_DEBUG_ALLOCATOR", "PYTORCH_DEBUG_MPS_ALLOCATOR", "0",
     "Allocator log categories (bitmask): 1 profiling, 2 recycles, 4 allocations, 8 large only.",
     [](const char* var, const std::string& t, Options& o) {
       o.debug_allocator =
           static_cast<uint32_t>(parse_uint(var, t, 0, 0xF, "a bitmask between 0 and 0xF"));
     },
     [](const Options& o) { return std::to_string(o.debug_allocator); }},
    {"MPSRT_CPU_DEVICES", "", "1", "Number of virtual devices of the cpu backend (1 to 64).",
     [](const char* var, const std::string& t, Options& o) {
       o.cpu_devices = static_cast<int>(parse_uint(var, t, 1, 64, "an integer from 1 to 64"));
     },
     [](const Options& o) { return std::to_string(o.cpu_devices); }},
    {"MPSRT_TRACE_SIGNPOSTS", "PYTORCH_MPS_TRACE_SIGNPOSTS", "0",
     "Profiler signpost selection (bitmask, torch.mps's meaning); 0 leaves the profiler off.",
     [](const char* var, const std::string& t, Options& o) {
       o.trace_signposts = static_cast<uint32_t>(
           parse_uint(var, t, 0, 0xFFFFFFFFu, "a 32-bit bitmask (decimal or 0x hex)"));
     },
     [](const Options& o) { return std::to_string(o.trace_signposts); }},
    {"MPSRT_LOG_PROFILE_INFO", "PYTORCH_MPS_LOG_PROFILE_INFO", "0",
     "Profiler statistics to print at stop() (bitmask, torch.mps's meaning).",
     [](const char* var, const std::string& t, Options& o) {
       o.log_profile_info = static_cast<uint32_t>(
           parse_uint(var, t, 0, 0xFFFFFFFFu, "a 32-bit bitmask (decimal or 0x hex)"));
     },
     [](const Options& o) { return std::to_string(o.log_profile_info); }},
    {"MPSRT_CPU_SPIN_US", "", "50",
     "cpu backend: microseconds a waiting thread spins before it parks (0 parks at once).",
     [](const char* var, const std::string& t, Options& o) {
       o.cpu_spin_us =
           static_cast<int64_t>(parse_uint(var, t, 0, 1000000, "an integer from 0 to 1000000"));
     },
     [](const Options& o) { return std::to_string(o.cpu_spin_us); }},
    {"MPSRT_CPU_ISA", "", "auto",
     "cpu backend kernels: auto, avx512, avx2 or scalar (for testing and measuring).",
     [](const char* var, const std::string& t, Options& o) {
       if (t != "auto" && t != "avx512" && t != "avx2" && t != "scalar") {
         bad_value(var, t, "one of auto, avx512, avx2, scalar");
       }
       o.cpu_isa = t;
     },
     [](const Options& o) { return o.cpu_isa; }},
};

}  // namespace

const char* process_env(const char* name) {
  return std::getenv(name);
}

Options parse_options(const EnvLookup& env) {
  Options o;
  for (const Entry& e : kTable) {
    // The MPSRT_ name wins over the PYTORCH_MPS_ alias when both are set.
    const char* var = e.name;
    const char* text = env(e.name);
    if (text == nullptr && e.alias[0] != '\0') {
      var = e.alias;
      text = env(e.alias);
    }
    if (text != nullptr) e.parse(var, text, o);
  }
  if (o.high_watermark_ratio > 0.0 && o.low_watermark_ratio > o.high_watermark_ratio) {
    throw_invalid("[options] MPSRT_LOW_WATERMARK_RATIO (" + fmt(o.low_watermark_ratio) +
                  ") must not exceed MPSRT_HIGH_WATERMARK_RATIO (" + fmt(o.high_watermark_ratio) +
                  "); lower the first or raise the second");
  }
  return o;
}

std::vector<OptionInfo> describe_options(const Options& o) {
  std::vector<OptionInfo> out;
  for (const Entry& e : kTable) {
    out.push_back(OptionInfo{e.name, e.alias, e.show(o), e.default_value, e.help});
  }
  return out;
}

}  // namespace mpsrt::detail
