// The runtime's options: one table of environment variables, read once, validated.
// Debug and profiling variables never change results.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "mpsrt/options.h"

namespace mpsrt::detail {

struct Options {
  std::string backend;                // "" = the best available one
  double high_watermark_ratio = 1.7;  // hard limit = ratio x recommended_max_memory; 0 = none
  double low_watermark_ratio = 1.4;   // garbage collection starts here
  uint32_t debug_allocator = 0;       // log categories (bitmask)
  int cpu_devices = 1;
  uint32_t trace_signposts = 0;
  uint32_t log_profile_info = 0;
  uint64_t profile_records = 1 << 20;  // profiler records kept per thread
  int64_t cpu_spin_us = 50;
  std::string cpu_isa = "auto";
  int cpu_threads = 0;  // 0: the cores, at most 8
  int64_t vulkan_spin_us = 20;
  bool vulkan_shared_queue = false;
  std::string vulkan_memory = "auto";    // "auto" or "discrete" (the vulkan memory model)
  uint64_t staging_bytes = 64ull << 20;  // bound of each device's host staging pool
  uint32_t vulkan_workgroup = 0;         // 0: by the device
  uint32_t vulkan_groups_per_sm = 0;     // 0: by the device
  uint32_t vulkan_unroll = 2;
  uint32_t vulkan_vector = 16;
  std::string vulkan_copy = "kernel";  // "kernel" or "dma"
  std::string torch_kernels = "auto";  // MPSRT_TORCH_KERNELS: "auto", "device" or "cpu"
};

/// Reads a variable's value; nullptr when unset.
using EnvLookup = std::function<const char*(const char* name)>;

/// Parses every option from `env`. A bad value throws std::invalid_argument whose message
/// names the variable, the value and what is expected.
Options parse_options(const EnvLookup& env);

/// The table in human form, for mpsrt::options() and docs/environment.md.
std::vector<OptionInfo> describe_options(const Options& o);

/// The table as the backend receives it (Backend::configure): each variable with the text of
/// its value in force, as describe_options() shows it.
backend::Settings backend_settings(const Options& o);

/// Lookup in the process environment.
const char* process_env(const char* name);

}  // namespace mpsrt::detail
