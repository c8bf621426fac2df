// AVX2 random-number table (compiled with -mavx2 -mfma and -ffp-contract=off; used only when
// the CPU reports AVX2 and FMA): philox_simd.h on 4 blocks per register and normal_impl.h on 4
// doubles / 8 floats. Bit-identical to the scalar table.
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/normal_impl.h"
#include "backends/cpu/philox_simd.h"
#include "backends/cpu/random_impl.h"

namespace mpsrt::cpu {
namespace {

// philox_simd.h's integer layer: 4 blocks per register.
struct Avx2I {
  static constexpr uint64_t kBlocks = 4;
  using I = __m256i;
  using F = __m256;
  using D = __m256d;
  static I set1_64(uint64_t v) { return _mm256_set1_epi64x(static_cast<long long>(v)); }
  static I iota64() { return _mm256_setr_epi64x(0, 1, 2, 3); }
  static I add64(I a, I b) { return _mm256_add_epi64(a, b); }
  static I mul32(I a, I b) { return _mm256_mul_epu32(a, b); }
  static I xor2(I a, I b) { return _mm256_xor_si256(a, b); }
  static I xor3(I a, I b, I c) { return _mm256_xor_si256(_mm256_xor_si256(a, b), c); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  template <int N>
  static I srl64(I a) {
    return _mm256_srli_epi64(a, N);
  }
  template <int N>
  static I srl32(I a) {
    return _mm256_srli_epi32(a, N);
  }
  // The 16 words of 4 blocks in memory order: blocks 0-1, then 2-3.
  static void words(I c0, I c1, I c2, I c3, I out[2]) {
    const I t01 = _mm256_blend_epi32(c0, _mm256_slli_epi64(c1, 32), 0xaa);
    const I t23 = _mm256_blend_epi32(c2, _mm256_slli_epi64(c3, 32), 0xaa);
    const I lo = _mm256_unpacklo_epi64(t01, t23);  // blocks 0, 2
    const I hi = _mm256_unpackhi_epi64(t01, t23);  // blocks 1, 3
    out[0] = _mm256_permute2x128_si256(lo, hi, 0x20);
    out[1] = _mm256_permute2x128_si256(lo, hi, 0x31);
  }
  template <int M>
  static void store(void* p, I v) {
    if constexpr (M == phx::kStream) {
      _mm256_stream_si256(static_cast<I*>(p), v);
    } else if constexpr (M == phx::kStore) {
      _mm256_store_si256(static_cast<I*>(p), v);
    } else {
      _mm256_storeu_si256(static_cast<I*>(p), v);
    }
  }
  static void sfence() { _mm_sfence(); }
  static F set1_f(float v) { return _mm256_set1_ps(v); }
  static F cvt_f(I a) { return _mm256_cvtepi32_ps(a); }
  static F add_f(F a, F b) { return _mm256_add_ps(a, b); }
  static F mul_f(F a, F b) { return _mm256_mul_ps(a, b); }
  static I as_i(F a) { return _mm256_castps_si256(a); }
  static D set1_d(double v) { return _mm256_set1_pd(v); }
  static D add_d(D a, D b) { return _mm256_add_pd(a, b); }
  static D sub_d(D a, D b) { return _mm256_sub_pd(a, b); }
  static D mul_d(D a, D b) { return _mm256_mul_pd(a, b); }
  static D as_d(I a) { return _mm256_castsi256_pd(a); }
  static I as_i(D a) { return _mm256_castpd_si256(a); }
};

// normal_impl.h's SIMD layer: 4 lanes.
struct Avx2V {
  static constexpr uint64_t kLanes = 4;
  using D = __m256d;
  using I = __m256i;
  static I load_pairs(const uint32_t* w) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  }
  static I i64(uint64_t v) { return _mm256_set1_epi64x(static_cast<long long>(v)); }
  static D f64(double v) { return _mm256_set1_pd(v); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  static I xor_(I a, I b) { return _mm256_xor_si256(a, b); }
  static I add_i(I a, I b) { return _mm256_add_epi64(a, b); }
  static I sub_i(I a, I b) { return _mm256_sub_epi64(a, b); }
  template <int N>
  static I shl(I a) {
    return _mm256_slli_epi64(a, N);
  }
  template <int N>
  static I shr(I a) {
    return _mm256_srli_epi64(a, N);
  }
  static D as_d(I a) { return _mm256_castsi256_pd(a); }
  static I as_i(D a) { return _mm256_castpd_si256(a); }
  static D add(D a, D b) { return _mm256_add_pd(a, b); }
  static D sub(D a, D b) { return _mm256_sub_pd(a, b); }
  static D mul(D a, D b) { return _mm256_mul_pd(a, b); }
  static D fma(D a, D b, D c) { return _mm256_fmadd_pd(a, b, c); }
  static D sqrt(D a) { return _mm256_sqrt_pd(a); }
  static D lookup16(const double* t, I i) {
    return _mm256_i64gather_pd(t, _mm256_and_si256(i, _mm256_set1_epi64x(15)), 8);
  }
  static D select_odd(I q, D a, D b) {
    const I odd =
        _mm256_sub_epi64(_mm256_setzero_si256(), _mm256_and_si256(q, _mm256_set1_epi64x(1)));
    return _mm256_blendv_pd(a, b, _mm256_castsi256_pd(odd));
  }
  static void store_f64(double* out, D z0, D z1) {
    const __m256d lo = _mm256_unpacklo_pd(z0, z1), hi = _mm256_unpackhi_pd(z0, z1);
    _mm256_storeu_pd(out, _mm256_permute2f128_pd(lo, hi, 0x20));
    _mm256_storeu_pd(out + 4, _mm256_permute2f128_pd(lo, hi, 0x31));
  }
};

// normal_impl.h's float layer: 8 lanes (the AVX2 table requires FMA).
struct Avx2VF {
  static constexpr uint64_t kLanes = 8;
  using F = __m256;
  using U = __m256i;
  static void load_pairs(const uint32_t* w, U& w0, U& w1) {
    const __m256 a = _mm256_loadu_ps(reinterpret_cast<const float*>(w));
    const __m256 b = _mm256_loadu_ps(reinterpret_cast<const float*>(w + 8));
    // per 128-bit half [a0 a2 b0 b2 | a4 a6 b4 b6], then the 64-bit pieces in order 0 2 1 3
    w0 = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(a, b, 0x88)), 0xD8);
    w1 = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8);
  }
  static U u(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
  static F f(float v) { return _mm256_set1_ps(v); }
  static U add_u(U a, U b) { return _mm256_add_epi32(a, b); }
  static U sub_u(U a, U b) { return _mm256_sub_epi32(a, b); }
  template <int N>
  static U shl(U a) {
    return _mm256_slli_epi32(a, N);
  }
  template <int N>
  static U shr(U a) {
    return _mm256_srli_epi32(a, N);
  }
  static U as_u(F a) { return _mm256_castps_si256(a); }
  static F as_f(U a) { return _mm256_castsi256_ps(a); }
  static F cvt(U a) { return _mm256_cvtepi32_ps(a); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fms(F a, F b, F c) { return _mm256_fmsub_ps(a, b, c); }
  static F fnma(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  static F sqrt(F a) { return _mm256_sqrt_ps(a); }
  template <int N>
  static U sra(U a) {
    return _mm256_srai_epi32(a, N);
  }
  template <int B>
  static F neg_if_bit(U q, F x) {
    return _mm256_xor_ps(
        x, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(q, u(1u << B)), 31 - B)));
  }
  static uint32_t neq_mask(F a, F b) {
    return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_NEQ_UQ)));
  }
  template <class Fn>
  static F fix_lanes(F v, U w, uint32_t mask, Fn fn) {
    alignas(32) float vs[8];
    alignas(32) uint32_t ws[8];
    _mm256_store_ps(vs, v);
    _mm256_store_si256(reinterpret_cast<__m256i*>(ws), w);
    for (; mask != 0; mask &= mask - 1) {
      const int i = __builtin_ctz(mask);
      vs[i] = fn(ws[i]);
    }
    return _mm256_load_ps(vs);
  }
  static F lookup16(const float* t, U i) {
    const __m256 lo = _mm256_permutevar8x32_ps(_mm256_load_ps(t), i);
    const __m256 hi = _mm256_permutevar8x32_ps(_mm256_load_ps(t + 8), i);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(i, 28)));
  }
  static F select_odd(U q, F a, F b) {
    return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(q, 31)));
  }
  static void store(float* out, F z0, F z1) {
    const __m256 lo = _mm256_unpacklo_ps(z0, z1), hi = _mm256_unpackhi_ps(z0, z1);
    _mm256_storeu_ps(out, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(out + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
  }
};

struct Avx2Gen : phx::Gen<Avx2I> {
  static constexpr bool kHalfFused = false;  // F16C is not part of the AVX2 check

  // normal_f32 / normal_f64 write whole multiples of these pairs.
  static constexpr uint64_t kNormalLanesF32 = Avx2VF::kLanes;
  static constexpr uint64_t kNormalLanesF64 = Avx2V::kLanes;
  static void normal_f32(const uint32_t* w, float* z, uint64_t pairs, float mean, float sd) {
    nrm::box_muller_f32<Avx2VF>(w, z, pairs, mean, sd);
  }
  static void normal_f64(const uint32_t* w, double* z, uint64_t pairs, double mean, double sd) {
    nrm::box_muller<Avx2V>(w, z, pairs, mean, sd);
  }
  static void half_from_f32(const float* src, uint16_t* dst, uint64_t n, bool bf16) {
    rnd::half_from_f32_scalar(src, dst, n, bf16);
  }

  static void uniform_half(uint16_t*, uint64_t, uint64_t, uint64_t, float, float, bool, bool,
                           bool) {}  // never called (kHalfFused == false)
};

}  // namespace

void random_avx2(void* dst, const backend::RandomParams& p, uint64_t first, uint64_t n) {
  rnd::random_impl<Avx2Gen>(dst, p, first, n);
}

}  // namespace mpsrt::cpu
