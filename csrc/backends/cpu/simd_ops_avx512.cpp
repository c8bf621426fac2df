// AVX-512 kernels (compiled with -mavx512f/bw/vl; used only when the CPU reports them).
#include "backends/cpu/simd_avx512.h"
#include "backends/cpu/simd_ops_impl.h"

namespace mpsrt::cpu {

const SimdOps kAvx512Ops = make_simd_ops<simd::Avx512>(Isa::Avx512, &random_avx512);

}  // namespace mpsrt::cpu
