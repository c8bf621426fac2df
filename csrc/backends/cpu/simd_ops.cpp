#include "backends/cpu/simd_ops.h"

namespace mpsrt::cpu {

const char* isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx2:
      return "avx2";
    case Isa::Scalar:
      break;
  }
  return "scalar";
}

bool isa_supported(Isa isa) noexcept {
  switch (isa) {
    case Isa::Scalar:
      return true;
#if defined(MPSRT_HAVE_X86_KERNELS)
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
#else
    default:
      return false;
#endif
  }
  return false;
}

Isa best_isa() noexcept {
  if (isa_supported(Isa::Avx512)) return Isa::Avx512;
  if (isa_supported(Isa::Avx2)) return Isa::Avx2;
  return Isa::Scalar;
}

const SimdOps& simd_ops_for(Isa isa) noexcept {
#if defined(MPSRT_HAVE_X86_KERNELS)
  if (isa == Isa::Avx512) return kAvx512Ops;
  if (isa == Isa::Avx2) return kAvx2Ops;
#else
  (void)isa;
#endif
  return kScalarOps;
}

uint64_t replicate_pattern(uint64_t pattern, unsigned pattern_size) noexcept {
  switch (pattern_size) {
    case 1:
      return (pattern & 0xffu) * 0x0101010101010101ULL;
    case 2:
      return (pattern & 0xffffu) * 0x0001000100010001ULL;
    case 4:
      return (pattern & 0xffffffffu) * 0x0000000100000001ULL;
    default:
      return pattern;
  }
}

}  // namespace mpsrt::cpu
