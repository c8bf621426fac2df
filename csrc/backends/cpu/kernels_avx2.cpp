// AVX2 kernels (compiled with -mavx2 -mfma; used only when the CPU reports AVX2 and FMA).
#include "backends/cpu/kernels_impl.h"
#include "backends/cpu/simd_avx2.h"

namespace mpsrt::cpu {

const Kernels kAvx2Kernels = make_kernels<simd::Avx2>(Isa::Avx2, &random_avx2);

}  // namespace mpsrt::cpu
