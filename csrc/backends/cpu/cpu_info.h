// Facts about the host CPU and memory, for the cpu backend's device properties and kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mpsrt::cpu {

/// The CPU model name ("AMD EPYC ...", "Apple M2", ...), or "cpu" when it cannot be read.
std::string cpu_model_name();
/// Physical memory, or the cgroup memory limit when that is lower.
uint64_t usable_memory_bytes();
/// Level-2 cache size per core in bytes (1 MiB when it cannot be read).
size_t l2_cache_bytes();
/// Last-level (level-3) cache size in bytes, shared by the cores (0 when it cannot be read).
size_t l3_cache_bytes();

}  // namespace mpsrt::cpu
