// Portable kernels: 8-byte words, no streaming stores. The fallback on every CPU.
#include "backends/cpu/simd_ops_impl.h"
#include "backends/cpu/simd_scalar.h"

namespace mpsrt::cpu {

const SimdOps kScalarOps = make_simd_ops<simd::Scalar>(Isa::Scalar, &random_scalar);

}  // namespace mpsrt::cpu
