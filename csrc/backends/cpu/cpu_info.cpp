#include "backends/cpu/cpu_info.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#if defined(__APPLE__)
#include <sys/sysctl.h>
#include <sys/types.h>
#endif

namespace mpsrt::cpu {

namespace {
std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\n");
  const auto e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// Reads a byte count from a cgroup file; "max" or a missing file means no limit.
uint64_t read_limit(const char* path) {
  std::ifstream f(path);
  std::string text;
  if (!f || !(f >> text) || text == "max") return UINT64_MAX;
  try {
    return std::stoull(text);
  } catch (...) {
    return UINT64_MAX;
  }
}
}  // namespace

std::string cpu_model_name() {
#if defined(__APPLE__)
  char buf[256];
  size_t len = sizeof(buf);
  if (sysctlbyname("machdep.cpu.brand_string", buf, &len, nullptr, 0) == 0 && len > 1) {
    return trim(std::string(buf, len - 1));
  }
#else
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = trim(line.substr(colon + 1));
        if (!name.empty()) return name;
      }
    }
  }
#endif
  return "cpu";
}

uint64_t usable_memory_bytes() {
  uint64_t phys = 0;
#if defined(__APPLE__)
  int64_t mem = 0;
  size_t len = sizeof(mem);
  if (sysctlbyname("hw.memsize", &mem, &len, nullptr, 0) == 0) phys = static_cast<uint64_t>(mem);
#else
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) phys = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  // cgroup v2, then v1.
  phys = std::min(phys, read_limit("/sys/fs/cgroup/memory.max"));
  phys = std::min(phys, read_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes"));
#endif
  return phys;
}

size_t l2_cache_bytes() {
#if defined(_SC_LEVEL2_CACHE_SIZE)
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 > 0) return static_cast<size_t>(l2);
#endif
  return size_t(1) << 20;
}

size_t l3_cache_bytes() {
#if defined(_SC_LEVEL3_CACHE_SIZE)
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return static_cast<size_t>(l3);
#endif
  return 0;
}

}  // namespace mpsrt::cpu
