// Portable kernels: 8-byte words, no streaming stores. The fallback on every CPU.
#include "backends/cpu/kernels_impl.h"
#include "backends/cpu/simd_scalar.h"

namespace mpsrt::cpu {

const Kernels kScalarKernels = make_kernels<simd::Scalar>(Isa::Scalar, &random_scalar);

}  // namespace mpsrt::cpu
