#include "backends/cpu/cpu_info.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

// /proc and /sys are read with C stdio, not iostreams: the runtime uses no iostream or locale
// (docs/building.md: an extension that links libstdc++ statically beside another one).

// Reads a byte count from a cgroup file; "max", a missing file or anything else that is not a
// decimal number means no limit.
uint64_t read_limit(const char* path) {
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return UINT64_MAX;
  char buf[64] = {};
  const bool got = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  const std::string text = trim(got ? buf : "");
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    return UINT64_MAX;  // also "max"
  }
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  return errno == 0 ? static_cast<uint64_t>(v) : UINT64_MAX;
}

#if !defined(__APPLE__)
// The first "model name" (x86) or "Model" (Arm boards) line of /proc/cpuinfo.
std::string proc_cpu_model() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return {};
  std::string name;
  char* line = nullptr;
  size_t cap = 0;
  while (name.empty() && ::getline(&line, &cap, f) > 0) {
    if (std::strncmp(line, "model name", 10) == 0 || std::strncmp(line, "Model", 5) == 0) {
      const char* colon = std::strchr(line, ':');
      if (colon != nullptr) name = trim(colon + 1);
    }
  }
  std::free(line);
  std::fclose(f);
  return name;
}
#endif
}  // namespace

std::string cpu_model_name() {
#if defined(__APPLE__)
  char buf[256];
  size_t len = sizeof(buf);
  if (sysctlbyname("machdep.cpu.brand_string", buf, &len, nullptr, 0) == 0 && len > 1) {
    return trim(std::string(buf, len - 1));
  }
#else
  std::string name = proc_cpu_model();
  if (!name.empty()) return name;
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
