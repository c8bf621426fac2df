// The cpu backend's own settings. They are not part of the backend interface (backend.h):
// the backend makes them from the runtime's options (MPSRT_CPU_*) that the core hands it
// through Backend::configure(Settings) when the cpu backend is the one it runs on; the
// backend reads no environment itself. mpsrt's C++ tests apply them directly.
#pragma once

#include <cstdint>
#include <string>

namespace mpsrt::cpu {

struct CpuConfig {
  int devices = 1;           ///< number of virtual devices
  int64_t spin_ns = 50000;   ///< how long a waiting thread spins before it parks
  std::string isa = "auto";  ///< kernels: "auto", "avx512", "avx2" or "scalar"
  int threads = 0;           ///< threads a large kernel is split over (0: the cores, at most 8)
};

/// Applies `config` to the cpu backend (backend::cpu_backend()); called before any cpu device
/// is opened. Throws std::invalid_argument for a setting this machine cannot honour (an ISA
/// the CPU or the build lacks, fewer than 1 device), and then changes nothing.
void configure(const CpuConfig& config);

}  // namespace mpsrt::cpu
