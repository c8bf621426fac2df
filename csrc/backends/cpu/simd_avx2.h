// simd.h's AVX2 layer: 256-bit registers (4 64-bit / 8 32-bit lanes). For translation units
// compiled with -mavx2 -mfma, used only when the CPU reports AVX2 and FMA.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/simd.h"

namespace mpsrt::cpu {
namespace {
namespace simd {

struct Avx2Regs {
  using I = __m256i;
  using U = __m256i;
  using F = __m256;
  using D = __m256d;
  using BitLane = uint64_t;
};

struct Avx2 : Lanes<Avx2Regs> {
  static constexpr bool kHasStream = true;

  template <int M>
  static void store(void* p, I v) {
    if constexpr (M == kStream) {
      _mm256_stream_si256(static_cast<I*>(p), v);
    } else if constexpr (M == kStore) {
      _mm256_store_si256(static_cast<I*>(p), v);
    } else {
      _mm256_storeu_si256(static_cast<I*>(p), v);
    }
  }
  static void fence() { _mm_sfence(); }

  static I shl64(I a, int n) { return _mm256_slli_epi64(a, n); }
  static I shr64(I a, int n) { return _mm256_srli_epi64(a, n); }
  static U shl32(U a, int n) { return _mm256_slli_epi32(a, n); }
  static U shr32(U a, int n) { return _mm256_srli_epi32(a, n); }
  static U sra32(U a, int n) { return _mm256_srai_epi32(a, n); }
  static I mul32(I a, I b) { return _mm256_mul_epu32(a, b); }
  static I xor3(I a, I b, I c) { return _mm256_xor_si256(_mm256_xor_si256(a, b), c); }
  static F cvt(U a) { return _mm256_cvtepi32_ps(a); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static D fma(D a, D b, D c) { return _mm256_fmadd_pd(a, b, c); }
  static F fms(F a, F b, F c) { return _mm256_fmsub_ps(a, b, c); }
  static F fnma(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  static F sqrt(F a) { return _mm256_sqrt_ps(a); }
  static D sqrt(D a) { return _mm256_sqrt_pd(a); }

  static F lookup16(const float* t, U i) {
    const F lo = _mm256_permutevar8x32_ps(_mm256_load_ps(t), i);
    const F hi = _mm256_permutevar8x32_ps(_mm256_load_ps(t + 8), i);
    return _mm256_blendv_ps(lo, hi, as_f(shl32(i, 28)));
  }
  static D lookup16(const double* t, I i) {
    return _mm256_i64gather_pd(t, and_(i, set1_64(15)), 8);
  }
  static F select_odd(U q, F a, F b) { return _mm256_blendv_ps(a, b, as_f(shl32(q, 31))); }
  static D select_odd(I q, D a, D b) {
    return _mm256_blendv_pd(a, b, as_d(sub64(_mm256_setzero_si256(), and_(q, set1_64(1)))));
  }
  template <int B>
  static F neg_if_bit(U q, F x) {
    return _mm256_xor_ps(x, as_f(shl32(and_(q, set1_32(1u << B)), 31 - B)));
  }
  static uint32_t neq_mask(F a, F b) {
    return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_NEQ_UQ)));
  }
  template <class Fn>
  static F fix_lanes(F v, U w, uint32_t mask, Fn fn) {
    alignas(32) float vs[8];
    alignas(32) uint32_t ws[8];
    _mm256_store_ps(vs, v);
    _mm256_store_si256(reinterpret_cast<I*>(ws), w);
    for (; mask != 0; mask &= mask - 1) {
      const int i = __builtin_ctz(mask);
      vs[i] = fn(ws[i]);
    }
    return _mm256_load_ps(vs);
  }

  static I load_pairs(const uint32_t* w) { return loadu(w); }
  static void load_pairs(const uint32_t* w, U& w0, U& w1) {
    const F a = _mm256_loadu_ps(reinterpret_cast<const float*>(w));
    const F b = _mm256_loadu_ps(reinterpret_cast<const float*>(w + 8));
    // per 128-bit half [a0 a2 b0 b2 | a4 a6 b4 b6], then the 64-bit pieces in order 0 2 1 3
    w0 = _mm256_permute4x64_epi64(as_u(_mm256_shuffle_ps(a, b, 0x88)), 0xD8);
    w1 = _mm256_permute4x64_epi64(as_u(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8);
  }
  static void store_pairs(float* out, F z0, F z1) {
    const F lo = _mm256_unpacklo_ps(z0, z1), hi = _mm256_unpackhi_ps(z0, z1);
    _mm256_storeu_ps(out, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(out + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
  }
  static void store_pairs(double* out, D z0, D z1) {
    const D lo = _mm256_unpacklo_pd(z0, z1), hi = _mm256_unpackhi_pd(z0, z1);
    _mm256_storeu_pd(out, _mm256_permute2f128_pd(lo, hi, 0x20));
    _mm256_storeu_pd(out + 4, _mm256_permute2f128_pd(lo, hi, 0x31));
  }

  // The 16 words of 4 blocks in memory order: blocks 0-1, then 2-3.
  static void interleave_lo32(I c0, I c1, I c2, I c3, I out[2]) {
    const I t01 = _mm256_blend_epi32(c0, shl64(c1, 32), 0xaa);
    const I t23 = _mm256_blend_epi32(c2, shl64(c3, 32), 0xaa);
    const I lo = _mm256_unpacklo_epi64(t01, t23);  // blocks 0, 2
    const I hi = _mm256_unpackhi_epi64(t01, t23);  // blocks 1, 3
    out[0] = _mm256_permute2x128_si256(lo, hi, 0x20);
    out[1] = _mm256_permute2x128_si256(lo, hi, 0x31);
  }
};

}  // namespace simd
}  // namespace
}  // namespace mpsrt::cpu
