// The scalar random-number table: philox.h's own functions, the reference every other table
// matches bit for bit. Compiled with -ffp-contract=off (see random_impl.h).
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/normal_impl.h"
#include "backends/cpu/random_impl.h"
#include "mpsrt/philox.h"

namespace mpsrt::cpu {
namespace {

// normal_impl.h's SIMD layer with one lane.
struct ScalarV {
  static constexpr uint64_t kLanes = 1;
  using D = double;
  using I = uint64_t;
  static I load_pairs(const uint32_t* w) {
    return static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
  }
  static I i64(uint64_t v) { return v; }
  static D f64(double v) { return v; }
  static I and_(I a, I b) { return a & b; }
  static I or_(I a, I b) { return a | b; }
  static I xor_(I a, I b) { return a ^ b; }
  static I add_i(I a, I b) { return a + b; }
  static I sub_i(I a, I b) { return a - b; }
  template <int N>
  static I shl(I a) {
    return a << N;
  }
  template <int N>
  static I shr(I a) {
    return a >> N;
  }
  static D as_d(I a) {
    D d;
    std::memcpy(&d, &a, 8);
    return d;
  }
  static I as_i(D a) {
    I i;
    std::memcpy(&i, &a, 8);
    return i;
  }
  static D add(D a, D b) { return a + b; }
  static D sub(D a, D b) { return a - b; }
  static D mul(D a, D b) { return a * b; }
  static D fma(D a, D b, D c) { return std::fma(a, b, c); }
  static D sqrt(D a) { return std::sqrt(a); }
  static D lookup16(const double* t, I i) { return t[i & 15]; }
  static D select_odd(I q, D a, D b) { return (q & 1) ? b : a; }
  static void store_f64(double* out, D z0, D z1) {
    out[0] = z0;
    out[1] = z1;
  }
};

// normal_impl.h's float layer with one lane.
struct ScalarVF {
  static constexpr uint64_t kLanes = 1;
  using F = float;
  using U = uint32_t;
  static void load_pairs(const uint32_t* w, U& w0, U& w1) {
    w0 = w[0];
    w1 = w[1];
  }
  static U u(uint32_t v) { return v; }
  static F f(float v) { return v; }
  static U add_u(U a, U b) { return a + b; }
  static U sub_u(U a, U b) { return a - b; }
  template <int N>
  static U shl(U a) {
    return a << N;
  }
  template <int N>
  static U shr(U a) {
    return a >> N;
  }
  static U as_u(F a) {
    U i;
    std::memcpy(&i, &a, 4);
    return i;
  }
  static F as_f(U a) {
    F f;
    std::memcpy(&f, &a, 4);
    return f;
  }
  static F cvt(U a) { return static_cast<float>(static_cast<int32_t>(a)); }
  static F add(F a, F b) { return a + b; }
  static F sub(F a, F b) { return a - b; }
  static F mul(F a, F b) { return a * b; }
  static F fma(F a, F b, F c) { return std::fmaf(a, b, c); }
  static F fms(F a, F b, F c) { return std::fmaf(a, b, -c); }
  static F fnma(F a, F b, F c) { return std::fmaf(-a, b, c); }
  static F sqrt(F a) { return std::sqrt(a); }
  template <int N>
  static U sra(U a) {  // arithmetic: the sign bit fills in (two's complement, as gcc and clang)
    return static_cast<U>(static_cast<int32_t>(a) >> N);
  }
  template <int B>
  static F neg_if_bit(U q, F x) {
    return as_f(as_u(x) ^ ((q >> B & 1u) << 31));
  }
  static uint32_t neq_mask(F a, F b) { return a != b ? 1u : 0u; }
  template <class Fn>
  static F fix_lanes(F, U w, uint32_t, Fn fn) {
    return fn(w);
  }
  static F lookup16(const float* t, U i) { return t[i & 15]; }
  static F select_odd(U q, F a, F b) { return (q & 1) ? b : a; }
  static void store(float* out, F z0, F z1) {
    out[0] = z0;
    out[1] = z1;
  }
};

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
  // normal_f32 / normal_f64 write whole multiples of these pairs.
  static constexpr uint64_t kNormalLanesF32 = ScalarVF::kLanes;
  static constexpr uint64_t kNormalLanesF64 = ScalarV::kLanes;
  static void normal_f32(const uint32_t* w, float* z, uint64_t pairs, float mean, float sd) {
    nrm::box_muller_f32<ScalarVF>(w, z, pairs, mean, sd);
  }
  static void normal_f64(const uint32_t* w, double* z, uint64_t pairs, double mean, double sd) {
    nrm::box_muller<ScalarV>(w, z, pairs, mean, sd);
  }
  static void half_from_f32(const float* src, uint16_t* dst, uint64_t n, bool bf16) {
    rnd::half_from_f32_scalar(src, dst, n, bf16);
  }
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

}  // namespace mpsrt::cpu
