// The scalar random-number table: philox.h's own functions, the reference every other table
// matches bit for bit, and normal_impl.h over simd::Scalar. Compiled with -ffp-contract=off
// (see random_impl.h).
#include <cstring>

#include "backends/cpu/normal_impl.h"
#include "backends/cpu/random_impl.h"
#include "backends/cpu/simd_ops.h"
#include "backends/cpu/simd_scalar.h"
#include "mpsrt/philox.h"

namespace mpsrt::cpu {
namespace {

struct ScalarGen : nrm::Normal<simd::Scalar> {
  static constexpr uint64_t kStepBlocks = 0;  // no fused loops
  static constexpr bool kHalfFused = false;
  static void blocks(uint32_t* out, uint64_t seed, uint64_t blk, uint64_t nb) {
    for (uint64_t i = 0; i < nb; ++i) {
      const philox::Words w = philox::block(seed, blk + i);
      std::memcpy(out + 4 * i, w.w, 16);
    }
  }
  static float u_f32(uint32_t w) { return philox::uniform_f32(w); }
  static float u_f16(uint32_t w) { return philox::uniform_f16_value(w); }
  static float u_bf16(uint32_t w) { return philox::uniform_bf16_value(w); }
  static double u_f64(uint32_t lo, uint32_t hi) { return philox::uniform_f64(lo, hi); }
};

}  // namespace

void random_scalar(void* dst, const backend::RandomParams& p, uint64_t first, uint64_t n) {
  rnd::random_impl<ScalarGen>(dst, p, first, n);
}

}  // namespace mpsrt::cpu
