// The scalar random-number table: philox.h's own functions, the reference every other table
// matches bit for bit. Compiled with -ffp-contract=off (see random_impl.h).
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/random_impl.h"
#include "mpsrt/philox.h"

namespace mpsrt::cpu {
namespace {

struct ScalarGen {
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
  // Never called (kStepBlocks == 0).
  static void bits(uint32_t*, uint64_t, uint64_t, uint64_t, bool, bool) {}
  static void uniform_f32(float*, uint64_t, uint64_t, uint64_t, float, float, bool, bool) {}
  static void uniform_f64(double*, uint64_t, uint64_t, uint64_t, double, double, bool, bool) {}
  static void uniform_half(uint16_t*, uint64_t, uint64_t, uint64_t, float, float, bool, bool,
                           bool) {}
};

}  // namespace

void random_scalar(void* dst, const backend::RandomParams& p, uint64_t first, uint64_t n) {
  rnd::random_impl<ScalarGen>(dst, p, first, n);
}

bool random_supported(backend::RandomOp op, backend::RandomDType dtype) noexcept {
  using backend::RandomDType;
  using backend::RandomOp;
  switch (op) {
    case RandomOp::Bits:
      return dtype == RandomDType::U32;
    case RandomOp::Uniform:
    case RandomOp::Normal:
      return dtype == RandomDType::F16 || dtype == RandomDType::BF16 || dtype == RandomDType::F32 ||
             dtype == RandomDType::F64;
    case RandomOp::IntRange:
      return dtype == RandomDType::U8 || dtype == RandomDType::I32 || dtype == RandomDType::I64;
    case RandomOp::Bernoulli:
      return dtype != RandomDType::U32;
  }
  return false;
}

}  // namespace mpsrt::cpu
