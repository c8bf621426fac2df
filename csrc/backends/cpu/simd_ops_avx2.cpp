// AVX2 kernels (compiled with -mavx2 -mfma; used only when the CPU reports AVX2 and FMA).
#include "backends/cpu/simd_avx2.h"
#include "backends/cpu/simd_ops_impl.h"

namespace mpsrt::cpu {

const SimdOps kAvx2Ops = make_simd_ops<simd::Avx2>(Isa::Avx2, &random_avx2);

}  // namespace mpsrt::cpu
