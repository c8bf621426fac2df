#include "core/options.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "backends/backend.h"
#include "core/format.h"
#include "mpsrt/error.h"

namespace mpsrt::detail {
namespace {

[[noreturn]] MPSRT_COLD void bad_value(const char* var, const std::string& text,
                                       const std::string& expected) {
  throw_invalid("[options] " + std::string(var) + "='" + text + "' is not valid: expected " +
                expected);
}

// strtod/strtoull skip leading white space and accept a sign; a setting must not.
bool starts_like_number(const std::string& text) {
  return !text.empty() && (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.');
}

double parse_ratio(const char* var, const std::string& text, double hi = 2.0) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (!starts_like_number(text) || end != text.c_str() + text.size() || errno != 0 ||
      !std::isfinite(v) || v < 0.0 || v > hi) {
    bad_value(var, text, "a number from 0 to 2");
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
  if (!starts_like_number(text) || text[0] == '.' || end != text.c_str() + text.size() ||
      errno != 0 || v < lo || v > hi) {
    bad_value(var, text, expected);
  }
  return v;
}

// "%g" without a locale (core/format.h): "1.7", "0.5", "1".
std::string fmt(double v) {
  return c_float(v);
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
     "Backend to use: cpu, vulkan or metal. Unset picks, in order: metal; vulkan on a hardware "
     "GPU (discrete, integrated or virtual); cpu; and only then a Vulkan device that is software "
     "running on the CPU (Mesa's lavapipe, SwiftShader), many times slower than the cpu backend "
     "on the same cores. mpsrt.backend_info()['reason'] says what was chosen and what was passed "
     "over. Naming a backend always uses it; an unbuilt or unknown one is an error that lists "
     "the built ones.",
     [](const char* var, const std::string& t, Options& o) {
       if (t != "cpu" && t != "vulkan" && t != "metal") {
         std::string built;
         for (const backend::Backend* b : backend::all_backends()) {
           if (b->is_built()) built += std::string(built.empty() ? "" : ", ") + b->name();
         }
         bad_value(var, t, "one of cpu, vulkan, metal (built into this package: " + built + ")");
       }
       o.backend = t;
     },
     [](const Options& o) { return o.backend; }},
    {"MPSRT_HIGH_WATERMARK_RATIO", "PYTORCH_MPS_HIGH_WATERMARK_RATIO", "1.7",
     "Hard memory limit as a multiple of recommended_max_memory (0 to 2); 0 disables the limit.",
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
     "Allocator log to stderr (bitmask, 0 to 0xF): 1 heaps obtained and released and "
     "out-of-memory events, 2 frees, 4 allocations, 8 skip the small pool (large and huge "
     "pools only).",
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
     "Non-zero starts a profiling session when the runtime starts (bitmask, torch.mps's "
     "ProfileOptions, 0 to 0x3F): 1 events, 2 intervals, 4 wait until completed, 8 include "
     "schedule time, 16 intervals, 32 events (none of 1, 2, 16, 32: intervals); 0: off.",
     [](const char* var, const std::string& t, Options& o) {
       o.trace_signposts = static_cast<uint32_t>(
           parse_uint(var, t, 0, 0x3F, "a bitmask between 0 and 0x3F (decimal or 0x hex)"));
     },
     [](const Options& o) { return std::to_string(o.trace_signposts); }},
    {"MPSRT_LOG_PROFILE_INFO", "PYTORCH_MPS_LOG_PROFILE_INFO", "0",
     "Profiler logging to stderr while a session runs (bitmask, torch.mps's LogOptions, 0 to "
     "0x3FF): 1 each operation, 2 each copy, 4 each host op, 8 all statistics, 16 operation "
     "statistics, 32 copy statistics, 64 host-op statistics (statistics when the session stops, "
     "or at exit for one MPSRT_TRACE_SIGNPOSTS started), 128 GPU time, 256 kernel time, 512 "
     "buffer id in the per-op lines.",
     [](const char* var, const std::string& t, Options& o) {
       o.log_profile_info = static_cast<uint32_t>(
           parse_uint(var, t, 0, 0x3FF, "a bitmask between 0 and 0x3FF (decimal or 0x hex)"));
     },
     [](const Options& o) { return std::to_string(o.log_profile_info); }},
    {"MPSRT_PROFILE_RECORDS", "", "1048576",
     "Profiler records kept per thread (1024 to 268435456); later ones are counted as dropped.",
     [](const char* var, const std::string& t, Options& o) {
       o.profile_records = parse_uint(var, t, 1024, 268435456, "an integer from 1024 to 268435456");
     },
     [](const Options& o) { return std::to_string(o.profile_records); }},
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
    {"MPSRT_CPU_THREADS", "", "0",
     "cpu backend: threads a large kernel (random fills) is split over; 0 uses the cores (at "
     "most 8).",
     [](const char* var, const std::string& t, Options& o) {
       o.cpu_threads = static_cast<int>(parse_uint(var, t, 0, 256, "an integer from 0 to 256"));
     },
     [](const Options& o) { return std::to_string(o.cpu_threads); }},
    {"MPSRT_VULKAN_SPIN_US", "", "20",
     "vulkan backend: microseconds a host wait for the device (a synchronize, an event, "
     "back-pressure) polls the semaphore before it blocks in the driver (0 blocks at once).",
     [](const char* var, const std::string& t, Options& o) {
       o.vulkan_spin_us =
           static_cast<int64_t>(parse_uint(var, t, 0, 1000000, "an integer from 0 to 1000000"));
     },
     [](const Options& o) { return std::to_string(o.vulkan_spin_us); }},
    {"MPSRT_VULKAN_QUEUES", "", "stream",
     "vulkan backend: stream (a VkQueue per stream while the device has enough, up to 8; a "
     "stream's segments ordered by a barrier) or shared (one VkQueue; each stream orders its own "
     "segments with a wait on its own semaphore, so that different streams' work may overlap in "
     "the queue). Which overlaps streams better depends on the GPU; both are correct.",
     [](const char* var, const std::string& t, Options& o) {
       if (t != "stream" && t != "shared") bad_value(var, t, "stream or shared");
       o.vulkan_shared_queue = t == "shared";
     },
     [](const Options& o) { return std::string(o.vulkan_shared_queue ? "shared" : "stream"); }},
    {"MPSRT_VULKAN_MEMORY", "", "auto",
     "vulkan backend memory model: auto (discrete on discrete, virtual and other GPUs, unified "
     "on CPU-type and integrated ones) or discrete (every device; how CI tests it on lavapipe).",
     [](const char* var, const std::string& t, Options& o) {
       if (t != "auto" && t != "discrete") bad_value(var, t, "auto or discrete");
       o.vulkan_memory = t;
     },
     [](const Options& o) { return o.vulkan_memory; }},
    {"MPSRT_STAGING_BYTES", "", "67108864",
     "Host staging memory per device for host <-> device copies on discrete memory, in bytes "
     "(65536 to 1099511627776), used in chunks of at most 8 MiB; larger copies pass in pieces.",
     [](const char* var, const std::string& t, Options& o) {
       o.staging_bytes = parse_uint(var, t, 65536, uint64_t(1) << 40,
                                    "an integer from 65536 to 1099511627776 (bytes)");
     },
     [](const Options& o) { return std::to_string(o.staging_bytes); }},
    {"MPSRT_VULKAN_WORKGROUP", "", "0",
     "vulkan kernels: invocations per workgroup, a power of two from 32 to 1024; 0 chooses by "
     "the device (256 within its limits).",
     [](const char* var, const std::string& t, Options& o) {
       const uint64_t v = parse_uint(var, t, 0, 1024, "0 or a power of two from 32 to 1024");
       if (v != 0 && (v < 32 || (v & (v - 1)) != 0)) {
         bad_value(var, t, "0 or a power of two from 32 to 1024");
       }
       o.vulkan_workgroup = static_cast<uint32_t>(v);
     },
     [](const Options& o) { return std::to_string(o.vulkan_workgroup); }},
    {"MPSRT_VULKAN_GROUPS_PER_SM", "", "0",
     "vulkan kernels: workgroups per SM / CU a dispatch launches at most (1 to 1024; the "
     "dispatch's cap where the device tells no SM count); 0 fills the device once (its threads "
     "per SM / the workgroup size; 2^20 invocations where the SM count is unknown).",
     [](const char* var, const std::string& t, Options& o) {
       o.vulkan_groups_per_sm =
           static_cast<uint32_t>(parse_uint(var, t, 0, 1024, "an integer from 0 to 1024"));
     },
     [](const Options& o) { return std::to_string(o.vulkan_groups_per_sm); }},
    {"MPSRT_VULKAN_UNROLL", "", "2",
     "vulkan kernels: vectors (fill, copy) or Philox blocks (random) per invocation and loop "
     "step: 1, 2, 4 or 8.",
     [](const char* var, const std::string& t, Options& o) {
       const uint64_t v = parse_uint(var, t, 1, 8, "1, 2, 4 or 8");
       if ((v & (v - 1)) != 0) bad_value(var, t, "1, 2, 4 or 8");
       o.vulkan_unroll = static_cast<uint32_t>(v);
     },
     [](const Options& o) { return std::to_string(o.vulkan_unroll); }},
    {"MPSRT_VULKAN_VECTOR", "", "16",
     "vulkan kernels: the widest load / store in bytes, 16 (uvec4 where aligned) or 4 (32-bit "
     "words).",
     [](const char* var, const std::string& t, Options& o) {
       if (t != "16" && t != "4") bad_value(var, t, "16 or 4");
       o.vulkan_vector = t == "16" ? 16 : 4;
     },
     [](const Options& o) { return std::to_string(o.vulkan_vector); }},
    {"MPSRT_TORCH_KERNELS", "", "auto",
     "Where the PyTorch device's operators run: auto (mpsrt's kernels on a GPU, CPU kernels on "
     "the cpu backend and CPU-type devices such as lavapipe, where they are faster), device "
     "(mpsrt's kernels wherever the device has them; how the tests check them on lavapipe) or "
     "cpu (CPU kernels on every device: on discrete memory through host copies).",
     [](const char* var, const std::string& t, Options& o) {
       if (t != "auto" && t != "device" && t != "cpu") bad_value(var, t, "auto, device or cpu");
       o.torch_kernels = t;
     },
     [](const Options& o) { return o.torch_kernels; }},
    {"MPSRT_VULKAN_COPY", "", "kernel",
     "vulkan device-to-device copies: kernel (a compute shader where source and destination "
     "agree mod 4, else vkCmdCopyBuffer) or dma (always vkCmdCopyBuffer).",
     [](const char* var, const std::string& t, Options& o) {
       if (t != "kernel" && t != "dma") bad_value(var, t, "kernel or dma");
       o.vulkan_copy = t;
     },
     [](const Options& o) { return o.vulkan_copy; }},
};

}  // namespace

const char* process_env(const char* name) {
  return std::getenv(name);
}

Options parse_options(const EnvLookup& env) {
  Options o;
  std::string high_var = "MPSRT_HIGH_WATERMARK_RATIO";
  std::string low_var = "the default MPSRT_LOW_WATERMARK_RATIO";
  for (const Entry& e : kTable) {
    // The MPSRT_ name wins over the PYTORCH_MPS_ alias when both are set.
    const char* var = e.name;
    const char* text = env(e.name);
    if (text == nullptr && e.alias[0] != '\0') {
      var = e.alias;
      text = env(e.alias);
    }
    if (text == nullptr) continue;
    e.parse(var, text, o);
    if (std::string(e.name) == "MPSRT_HIGH_WATERMARK_RATIO") high_var = var;
    if (std::string(e.name) == "MPSRT_LOW_WATERMARK_RATIO") low_var = var;
  }
  // As torch.mps: the low watermark may not exceed the high one (2 when there is no limit).
  const double high_limit = o.high_watermark_ratio == 0.0 ? 2.0 : o.high_watermark_ratio;
  if (o.low_watermark_ratio > high_limit) {
    throw_invalid("[options] " + low_var + " (" + fmt(o.low_watermark_ratio) +
                  ") must not exceed " + high_var + " (" + fmt(o.high_watermark_ratio) +
                  "); set the low watermark ratio to at most the high one");
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

backend::Settings backend_settings(const Options& o) {
  backend::Settings s;
  for (const Entry& e : kTable) s.set(e.name, e.show(o));
  return s;
}

}  // namespace mpsrt::detail
