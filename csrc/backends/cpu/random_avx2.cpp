// AVX2 random-number table (compiled with -mavx2 -mfma and -ffp-contract=off; used only when
// the CPU reports AVX2 and FMA): philox_simd.h and normal_impl.h over simd::Avx2 (4 blocks per
// register; 4 doubles / 8 floats). Bit-identical to the scalar table.
#include "backends/cpu/normal_impl.h"
#include "backends/cpu/philox_simd.h"
#include "backends/cpu/random_impl.h"
#include "backends/cpu/simd_avx2.h"
#include "backends/cpu/simd_ops.h"

namespace mpsrt::cpu {
namespace {

struct Avx2Gen : phx::Gen<simd::Avx2>, nrm::Normal<simd::Avx2> {
  static constexpr bool kHalfFused = false;  // F16C is not part of the AVX2 check
};

}  // namespace

void random_avx2(void* dst, const backend::RandomParams& p, uint64_t first, uint64_t n) {
  rnd::random_impl<Avx2Gen>(dst, p, first, n);
}

}  // namespace mpsrt::cpu
