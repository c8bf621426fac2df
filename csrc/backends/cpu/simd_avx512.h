// simd.h's AVX-512 layer: 512-bit registers (8 64-bit / 16 32-bit lanes). For translation units
// compiled with -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma, used only when the CPU reports
// them. Beyond simd.h's list: the 16-bit conversions of the float16 / bfloat16 kernels and
// pack_lo32.
// GCC 12 reports the intrinsics' own _mm512_undefined_epi32() (the pass-through operand of the
// unmasked shifts and conversions) as (maybe-)uninitialized; silenced for the header only.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <cstdint>

#include "backends/cpu/simd.h"

namespace mpsrt::cpu {
namespace {
namespace simd {

struct Avx512Regs {
  using I = __m512i;
  using U = __m512i;
  using F = __m512;
  using D = __m512d;
  using BitLane = uint32_t;
};

struct Avx512 : Lanes<Avx512Regs> {
  static constexpr bool kHasStream = true;

  template <int M>
  static void store(void* p, I v) {
    if constexpr (M == kStream) {
      _mm512_stream_si512(static_cast<I*>(p), v);
    } else if constexpr (M == kStore) {
      _mm512_store_si512(p, v);
    } else {
      _mm512_storeu_si512(p, v);
    }
  }
  static void fence() { _mm_sfence(); }

  static I shl64(I a, int n) { return _mm512_slli_epi64(a, n); }
  static I shr64(I a, int n) { return _mm512_srli_epi64(a, n); }
  static U shl32(U a, int n) { return _mm512_slli_epi32(a, n); }
  static U shr32(U a, int n) { return _mm512_srli_epi32(a, n); }
  static U sra32(U a, int n) { return _mm512_srai_epi32(a, n); }
  static I mul32(I a, I b) { return _mm512_mul_epu32(a, b); }
  static I xor3(I a, I b, I c) { return _mm512_ternarylogic_epi64(a, b, c, 0x96); }
  static F cvt(U a) { return _mm512_cvtepi32_ps(a); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static D fma(D a, D b, D c) { return _mm512_fmadd_pd(a, b, c); }
  static F fms(F a, F b, F c) { return _mm512_fmsub_ps(a, b, c); }
  static F fnma(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  static D sqrt(D a) { return _mm512_sqrt_pd(a); }

  static F lookup16(const float* t, U i) { return _mm512_permutexvar_ps(i, _mm512_load_ps(t)); }
  static D lookup16(const double* t, I i) {
    return _mm512_permutex2var_pd(_mm512_load_pd(t), i, _mm512_load_pd(t + 8));
  }
  static F select_odd(U q, F a, F b) {
    return _mm512_mask_blend_ps(_mm512_test_epi32_mask(q, set1_32(1)), a, b);
  }
  static D select_odd(I q, D a, D b) {
    return _mm512_mask_blend_pd(_mm512_test_epi64_mask(q, set1_64(1)), a, b);
  }
  template <int B>
  static F neg_if_bit(U q, F x) {
    const __mmask16 k = _mm512_test_epi32_mask(q, set1_32(1u << B));
    return as_f(_mm512_mask_xor_epi32(as_u(x), k, as_u(x), set1_32(0x80000000u)));
  }
  static uint32_t neq_mask(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
  template <class Fn>
  static F fix_lanes(F v, U w, uint32_t mask, Fn fn) {
    alignas(64) float vs[16];
    alignas(64) uint32_t ws[16];
    _mm512_store_ps(vs, v);
    _mm512_store_si512(ws, w);
    for (; mask != 0; mask &= mask - 1) {
      const int i = __builtin_ctz(mask);
      vs[i] = fn(ws[i]);
    }
    return _mm512_load_ps(vs);
  }

  static I load_pairs(const uint32_t* w) { return loadu(w); }
  static void load_pairs(const uint32_t* w, U& w0, U& w1) {
    const U a = loadu(w), b = loadu(w + 16);
    const U even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    w0 = _mm512_permutex2var_epi32(a, even, b);
    w1 = _mm512_permutex2var_epi32(a, add32(even, set1_32(1)), b);
  }
  static void store_pairs(float* out, F z0, F z1) {
    const U lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const U hi = add32(lo, set1_32(8));
    _mm512_storeu_ps(out, _mm512_permutex2var_ps(z0, lo, z1));
    _mm512_storeu_ps(out + 16, _mm512_permutex2var_ps(z0, hi, z1));
  }
  static void store_pairs(double* out, D z0, D z1) {
    const I lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
    const I hi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
    _mm512_storeu_pd(out, _mm512_permutex2var_pd(z0, lo, z1));
    _mm512_storeu_pd(out + 8, _mm512_permutex2var_pd(z0, hi, z1));
  }

  // The 32 words of 8 lanes in memory order: lanes 0-3, then 4-7.
  static void interleave_lo32(I c0, I c1, I c2, I c3, I out[2]) {
    const U pair = _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
    const I t01 = _mm512_permutex2var_epi32(c0, pair, c1);  // (c0, c1) per lane
    const I t23 = _mm512_permutex2var_epi32(c2, pair, c3);  // (c2, c3) per lane
    out[0] = _mm512_permutex2var_epi64(t01, _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), t23);
    out[1] = _mm512_permutex2var_epi64(t01, _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15), t23);
  }
  /// The low halves of a's 8 lanes, then b's, as 16 32-bit lanes.
  static U pack_lo32(I a, I b) {
    const U lows = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_epi32(a, lows, b);
  }

  // float32 -> float16 bits, rounded to nearest even (IEEE rounding, as mpsrt/half.h's).
  static __m256i to_f16(F u) {
    return _mm512_cvtps_ph(u, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // float32 -> bfloat16 bits, rounded to nearest even with mpsrt/half.h's integer rounding
  // (NaN kept quiet).
  static __m256i to_bf16(F u) {
    const U x = as_u(u);
    const U top = shr32(x, 16);
    const U rounded = shr32(add32(add32(x, set1_32(0x7fff)), and_(top, set1_32(1))), 16);
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(and_(x, set1_32(0x7fffffff)), set1_32(0x7f800000));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, or_(top, set1_32(0x40))));
  }
  /// Two halves as one register: a in the low 256 bits.
  static I concat(__m256i a, __m256i b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
  }
};

}  // namespace simd
}  // namespace
}  // namespace mpsrt::cpu
