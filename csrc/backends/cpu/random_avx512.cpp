// AVX-512 random-number table (compiled with -mavx512f/bw/vl -mfma and -ffp-contract=off; used
// only when the CPU reports them): philox_simd.h and normal_impl.h over simd::Avx512 (8 blocks
// per register; 8 doubles / 16 floats), with the float16 / bfloat16 uniform and the float32
// normal fused with Philox. Bit-identical to the scalar table (random_scalar.cpp).
#include "backends/cpu/normal_impl.h"
#include "backends/cpu/philox_simd.h"
#include "backends/cpu/random_impl.h"
#include "backends/cpu/simd_avx512.h"
#include "backends/cpu/simd_ops.h"

namespace mpsrt::cpu {
namespace {

using S = simd::Avx512;

/// float32 -> float16 / bfloat16 (Bf16) bits, as random_impl.h's f32_to_f16 / f32_to_bf16.
template <bool Bf16>
MPSRT_SIMD_INLINE __m256i to_half(S::F u) {
  if constexpr (Bf16) {
    return S::to_bf16(u);
  } else {
    return S::to_f16(u);
  }
}

/// float16 / bfloat16 (Bf16): phx::unit_f32 of the word (philox.h's uniform_f16_value /
/// uniform_bf16_value, then low + (high - low) u in float32), rounded by to_half.
template <bool Bf16>
struct HalfXf {
  template <class, bool Affine>
  struct Xf {
    static constexpr bool kNarrow = true;
    S::F lo, span;
    __m256i half(S::I w) const {
      constexpr int kShift = Bf16 ? 24 : 21;
      constexpr float kScale = Bf16 ? 3.90625e-03f : 4.8828125e-04f;
      return to_half<Bf16>(phx::unit_f32<S, kShift, Affine>(w, kScale, lo, span));
    }
    S::I operator()(S::I w0, S::I w1) const { return S::concat(half(w0), half(w1)); }
  };
};

/// float32 -> float16 / bfloat16 bits, 16 values a step: the count converted.
template <bool Bf16>
uint64_t half_from_f32_body(const float* src, uint16_t* dst, uint64_t n) {
  uint64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        to_half<Bf16>(_mm512_loadu_ps(src + i)));
  }
  return i;
}

// Normal float32 fused with Philox: phx::run's put for groups of 8 blocks, 32 values per group.
// In a group, lane i < 8 of the Box-Muller registers is block i's pair (w0, w1), lane 8 + i its
// pair (w2, w3): the block's 4 values are z0[i], z1[i], z0[8 + i], z1[8 + i].
constexpr int kNormalGroups = 8;  // even: groups go through Box-Muller two at a time
template <bool kAffine>
struct NormalF32 {
  using V2 = simd::Twice<S>;
  V2::F mv, sdv;
  template <int M, int G>
  MPSRT_SIMD_INLINE char* step(char* d, const S::I* c0, const S::I* c1, const S::I* c2,
                               const S::I* c3) const {
    static_assert(G % 2 == 0, "groups go in pairs");
    const S::U st0 = _mm512_setr_epi32(0, 16, 8, 24, 1, 17, 9, 25, 2, 18, 10, 26, 3, 19, 11, 27);
    const S::U st1 = S::add32(st0, S::set1_32(4));
    for (int g = 0; g < G; g += 2) {  // two groups at once (simd::Twice)
      const V2::U w0{S::pack_lo32(c0[g], c2[g]), S::pack_lo32(c0[g + 1], c2[g + 1])};
      const V2::U w1{S::pack_lo32(c1[g], c3[g]), S::pack_lo32(c1[g + 1], c3[g + 1])};
      V2::F z0, z1;
      nrm::bm_f32<V2, kAffine>(w0, w1, mv, sdv, z0, z1);
      S::store<M>(d, S::as_u(_mm512_permutex2var_ps(z0.a, st0, z1.a)));
      S::store<M>(d + 64, S::as_u(_mm512_permutex2var_ps(z0.a, st1, z1.a)));
      S::store<M>(d + 128, S::as_u(_mm512_permutex2var_ps(z0.b, st0, z1.b)));
      S::store<M>(d + 192, S::as_u(_mm512_permutex2var_ps(z0.b, st1, z1.b)));
      d += 256;
    }
    return d;
  }
};

struct Avx512Gen : phx::Gen<S>, nrm::Normal<S> {
  static constexpr bool kHalfFused = true;

  // Normal float32 fused with Philox, kNormalStepBlocks blocks per step (see fused_loop).
  static constexpr uint64_t kNormalStepBlocks = S::kLanes64 * kNormalGroups;
  static void normal_f32_fused(float* out, uint64_t seed, uint64_t blk, uint64_t steps, float mean,
                               float sd, bool aligned, bool nt) {
    const auto mv = NormalF32<true>::V2::set1_f(mean), sdv = NormalF32<true>::V2::set1_f(sd);
    if (mean == 0.0f && sd == 1.0f) {
      phx::run_mode<S, kNormalGroups>(out, seed, blk, steps, aligned, nt,
                                      NormalF32<false>{mv, sdv});
    } else {
      phx::run_mode<S, kNormalGroups>(out, seed, blk, steps, aligned, nt, NormalF32<true>{mv, sdv});
    }
  }

  static void half_from_f32(const float* src, uint16_t* dst, uint64_t n, bool bf16) {
    const uint64_t i =
        bf16 ? half_from_f32_body<true>(src, dst, n) : half_from_f32_body<false>(src, dst, n);
    rnd::half_from_f32_scalar(src + i, dst + i, n - i, bf16);
  }

  static void uniform_half(uint16_t* out, uint64_t seed, uint64_t blk, uint64_t steps, float lo,
                           float span, bool bf16, bool aligned, bool nt) {
    if (bf16) {
      uniform<HalfXf<true>::Xf>(out, seed, blk, steps, lo, span, aligned, nt, S::set1_f);
    } else {
      uniform<HalfXf<false>::Xf>(out, seed, blk, steps, lo, span, aligned, nt, S::set1_f);
    }
  }
};

}  // namespace

void random_avx512(void* dst, const backend::RandomParams& p, uint64_t first, uint64_t n) {
  rnd::random_impl<Avx512Gen>(dst, p, first, n);
}

}  // namespace mpsrt::cpu
