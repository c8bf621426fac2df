// AVX-512 kernels (compiled with -mavx512f/bw/vl; used only when the CPU reports them).
#include "backends/cpu/kernels_impl.h"
#include "backends/cpu/simd_avx512.h"

namespace mpsrt::cpu {

const Kernels kAvx512Kernels = make_kernels<simd::Avx512>(Isa::Avx512, &random_avx512);

}  // namespace mpsrt::cpu
