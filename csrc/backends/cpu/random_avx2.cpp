// AVX2 random-number table (compiled with -mavx2 and -ffp-contract=off; used only when the CPU
// reports AVX2). Philox4x32-10 on 4 blocks per register, one block's 32-bit word in the low
// half of each 64-bit lane (one vpmuludq gives both product halves; the lane's 64-bit counter
// carries into the second counter word). Bit-identical to the scalar table.
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/normal_impl.h"
#include "backends/cpu/random_impl.h"
#include "mpsrt/philox.h"  // constants only: no inline function of it is called here

namespace mpsrt::cpu {
namespace {

constexpr int kGroups = 6;  // independent 4-block groups per step (latency hiding)
constexpr uint64_t kStep = 4 * kGroups;

enum Mode { kStoreU, kStore, kStream };

struct Keys {
  __m256i k0[philox::kRounds];
  __m256i k1[philox::kRounds];
};

inline void make_keys(Keys& k, uint64_t seed) {
  uint32_t a = static_cast<uint32_t>(seed), b = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < philox::kRounds; ++r) {
    k.k0[r] = _mm256_set1_epi64x(a);
    k.k1[r] = _mm256_set1_epi64x(b);
    a += philox::kW0;
    b += philox::kW1;
  }
}

template <int M>
inline void put(void* p, __m256i v) {
  if constexpr (M == kStream) {
    _mm256_stream_si256(static_cast<__m256i*>(p), v);
  } else if constexpr (M == kStore) {
    _mm256_store_si256(static_cast<__m256i*>(p), v);
  } else {
    _mm256_storeu_si256(static_cast<__m256i*>(p), v);
  }
}

// Philox of G groups of 4 blocks with 64-bit counters cnt[g]; out[g][0..1] hold the 16 words
// of group g in memory order (blocks 0-1, then 2-3).
template <int G>
inline void philox_x4(const __m256i* cnt, const Keys& k, __m256i out[][2]) {
  const __m256i m0 = _mm256_set1_epi64x(philox::kM0);
  const __m256i m1 = _mm256_set1_epi64x(philox::kM1);
  __m256i c0[G], c1[G], c2[G], c3[G];
  // Round 0: the counter's words 2 and 3 are zero.
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const __m256i p0 = _mm256_mul_epu32(cnt[g], m0);
    c0[g] = _mm256_xor_si256(_mm256_srli_epi64(cnt[g], 32), k.k0[0]);
    c2[g] = _mm256_xor_si256(_mm256_srli_epi64(p0, 32), k.k1[0]);
    c3[g] = p0;
  }
  // Round 1: word 1 is zero.
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const __m256i p0 = _mm256_mul_epu32(c0[g], m0);
    const __m256i p1 = _mm256_mul_epu32(c2[g], m1);
    c0[g] = _mm256_xor_si256(_mm256_srli_epi64(p1, 32), k.k0[1]);
    c2[g] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[g]), k.k1[1]);
    c1[g] = p1;
    c3[g] = p0;
  }
#pragma GCC unroll 8
  for (int r = 2; r < philox::kRounds; ++r) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m256i p0 = _mm256_mul_epu32(c0[g], m0);
      const __m256i p1 = _mm256_mul_epu32(c2[g], m1);
      c0[g] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[g]), k.k0[r]);
      c2[g] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[g]), k.k1[r]);
      c1[g] = p1;
      c3[g] = p0;
    }
  }
  // The low halves of the lanes are the words; the high halves are left-overs.
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const __m256i t01 = _mm256_blend_epi32(c0[g], _mm256_slli_epi64(c1[g], 32), 0xaa);
    const __m256i t23 = _mm256_blend_epi32(c2[g], _mm256_slli_epi64(c3[g], 32), 0xaa);
    const __m256i lo = _mm256_unpacklo_epi64(t01, t23);  // blocks 0, 2
    const __m256i hi = _mm256_unpackhi_epi64(t01, t23);  // blocks 1, 3
    out[g][0] = _mm256_permute2x128_si256(lo, hi, 0x20);
    out[g][1] = _mm256_permute2x128_si256(lo, hi, 0x31);
  }
}

// Writes steps * 4G blocks starting at block blk: 32-byte register i of the words, transformed
// by xf, goes to out + 32 i.
template <int G, int M, class Xf>
inline void run(void* out, const Keys& k, uint64_t blk, uint64_t steps, Xf xf) {
  auto* d = static_cast<char*>(out);
  __m256i cnt = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<long long>(blk)),
                                 _mm256_setr_epi64x(0, 1, 2, 3));
  const __m256i four = _mm256_set1_epi64x(4);
  for (uint64_t s = 0; s < steps; ++s) {
    __m256i c[G];
    __m256i w[G][2];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      c[g] = cnt;
      cnt = _mm256_add_epi64(cnt, four);
    }
    philox_x4<G>(c, k, w);
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      put<M>(d + 64 * g, xf(w[g][0]));
      put<M>(d + 64 * g + 32, xf(w[g][1]));
    }
    d += 64 * G;
  }
}

template <class Xf>
inline void run_mode(void* out, uint64_t seed, uint64_t blk, uint64_t steps, bool aligned, bool nt,
                     Xf xf) {
  Keys k;
  make_keys(k, seed);
  if (nt) {
    run<kGroups, kStream>(out, k, blk, steps, xf);
    _mm_sfence();
  } else if (aligned) {
    run<kGroups, kStore>(out, k, blk, steps, xf);
  } else {
    run<kGroups, kStoreU>(out, k, blk, steps, xf);
  }
}

struct IdentityXf {
  __m256i operator()(__m256i w) const { return w; }
};

template <bool Affine>
struct F32Xf {
  __m256 lo, span;
  __m256i operator()(__m256i w) const {
    __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(w, 8)),
                             _mm256_set1_ps(5.9604644775390625e-08f));
    if constexpr (Affine) u = _mm256_add_ps(lo, _mm256_mul_ps(span, u));
    return _mm256_castps_si256(u);
  }
};

// (((hi << 32) | lo) >> 11) * 2^-53 exactly: the 53-bit integer as 2^32 * a + b through the
// exponent bias trick.
template <bool Affine>
struct F64Xf {
  __m256d lo, span;
  __m256i operator()(__m256i w) const {
    const __m256i v = _mm256_srli_epi64(w, 11);
    const __m256i a = _mm256_srli_epi64(v, 32);
    const __m256i b = _mm256_and_si256(v, _mm256_set1_epi64x(0xffffffffLL));
    const __m256d da = _mm256_sub_pd(
        _mm256_castsi256_pd(_mm256_or_si256(a, _mm256_set1_epi64x(0x4530000000000000LL))),
        _mm256_set1_pd(19342813113834066795298816.0));  // 2^84
    const __m256d db = _mm256_sub_pd(
        _mm256_castsi256_pd(_mm256_or_si256(b, _mm256_set1_epi64x(0x4330000000000000LL))),
        _mm256_set1_pd(4503599627370496.0));  // 2^52
    __m256d u = _mm256_mul_pd(_mm256_add_pd(da, db), _mm256_set1_pd(1.1102230246251565e-16));
    if constexpr (Affine) u = _mm256_add_pd(lo, _mm256_mul_pd(span, u));
    return _mm256_castpd_si256(u);
  }
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

struct Avx2Gen {
  static constexpr uint64_t kStepBlocks = kStep;
  static constexpr bool kHalfFused = false;  // F16C is not part of the AVX2 check

  static void blocks(uint32_t* out, uint64_t seed, uint64_t blk, uint64_t nb) {
    Keys k;
    make_keys(k, seed);
    const uint64_t steps = nb / kStep;
    run<kGroups, kStoreU>(out, k, blk, steps, IdentityXf{});
    uint64_t done = steps * kStep;
    const uint64_t groups = (nb - done) / 4;
    run<1, kStoreU>(out + 4 * done, k, blk + done, groups, IdentityXf{});
    done += 4 * groups;
    if (done < nb) {
      alignas(32) uint32_t tmp[16];
      run<1, kStore>(tmp, k, blk + done, 1, IdentityXf{});
      std::memcpy(out + 4 * done, tmp, 16 * (nb - done));
    }
  }

  static float u_f32(uint32_t w) { return static_cast<float>(w >> 8) * 5.9604644775390625e-08f; }
  static float u_f16(uint32_t w) { return static_cast<float>(w >> 21) * 4.8828125e-04f; }
  static float u_bf16(uint32_t w) { return static_cast<float>(w >> 24) * 3.90625e-03f; }
  static double u_f64(uint32_t lo, uint32_t hi) {
    const uint64_t u = (static_cast<uint64_t>(hi) << 32) | lo;
    return static_cast<double>(u >> 11) * 1.1102230246251565e-16;
  }
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

  static void bits(uint32_t* out, uint64_t seed, uint64_t blk, uint64_t steps, bool aligned,
                   bool nt) {
    run_mode(out, seed, blk, steps, aligned, nt, IdentityXf{});
  }
  static void uniform_f32(float* out, uint64_t seed, uint64_t blk, uint64_t steps, float lo,
                          float span, bool aligned, bool nt) {
    if (lo == 0.0f && span == 1.0f) {
      run_mode(out, seed, blk, steps, aligned, nt, F32Xf<false>{});
    } else {
      run_mode(out, seed, blk, steps, aligned, nt,
               F32Xf<true>{_mm256_set1_ps(lo), _mm256_set1_ps(span)});
    }
  }
  static void uniform_f64(double* out, uint64_t seed, uint64_t blk, uint64_t steps, double lo,
                          double span, bool aligned, bool nt) {
    if (lo == 0.0 && span == 1.0) {
      run_mode(out, seed, blk, steps, aligned, nt, F64Xf<false>{});
    } else {
      run_mode(out, seed, blk, steps, aligned, nt,
               F64Xf<true>{_mm256_set1_pd(lo), _mm256_set1_pd(span)});
    }
  }
  static void uniform_half(uint16_t*, uint64_t, uint64_t, uint64_t, float, float, bool, bool,
                           bool) {}  // never called (kHalfFused == false)
};

}  // namespace

void random_avx2(void* dst, const backend::RandomParams& p, uint64_t first, uint64_t n) {
  rnd::random_impl<Avx2Gen>(dst, p, first, n);
}

}  // namespace mpsrt::cpu
