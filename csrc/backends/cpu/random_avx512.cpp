// AVX-512 random-number table (compiled with -mavx512f/bw/vl and -ffp-contract=off; used only
// when the CPU reports them). Philox4x32-10 on 8 blocks per register: each 64-bit lane holds
// one block's 32-bit word in its low half, so one vpmuludq gives both halves of the product,
// and the lane's full 64-bit counter (offset + block) carries into the second counter word.
// Bit-identical to the scalar table (random_scalar.cpp).
// GCC 12 reports the intrinsics' own _mm512_undefined_epi32() (the pass-through operand of the
// unmasked shifts and conversions) as (maybe-)uninitialized; silenced for the header only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/normal_impl.h"
#include "backends/cpu/random_impl.h"
#include "mpsrt/philox.h"  // constants only: no inline function of it is called here

namespace mpsrt::cpu {
namespace {

constexpr int kGroups = 6;  // independent 8-block groups per step (latency hiding)
constexpr uint64_t kStep = 8 * kGroups;

enum Mode { kStoreU, kStore, kStream };

struct Keys {
  __m512i k0[philox::kRounds];
  __m512i k1[philox::kRounds];
};

inline void make_keys(Keys& k, uint64_t seed) {
  uint32_t a = static_cast<uint32_t>(seed), b = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < philox::kRounds; ++r) {
    k.k0[r] = _mm512_set1_epi64(a);
    k.k1[r] = _mm512_set1_epi64(b);
    a += philox::kW0;
    b += philox::kW1;
  }
}

template <int M>
inline void put(void* p, __m512i v) {
  if constexpr (M == kStream) {
    _mm512_stream_si512(static_cast<__m512i*>(p), v);
  } else if constexpr (M == kStore) {
    _mm512_store_si512(p, v);
  } else {
    _mm512_storeu_si512(p, v);
  }
}

// Philox of G groups of 8 blocks with 64-bit counters cnt[g]: word j of block i of group g in
// the low half of 64-bit lane i of cj[g].
template <int G>
inline void philox_soa(const __m512i* cnt, const Keys& k, __m512i* c0, __m512i* c1, __m512i* c2,
                       __m512i* c3) {
  const __m512i m0 = _mm512_set1_epi64(philox::kM0);
  const __m512i m1 = _mm512_set1_epi64(philox::kM1);
  // Round 0: the counter's words 2 and 3 are zero.
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const __m512i p0 = _mm512_mul_epu32(cnt[g], m0);
    c0[g] = _mm512_xor_si512(_mm512_srli_epi64(cnt[g], 32), k.k0[0]);
    c2[g] = _mm512_xor_si512(_mm512_srli_epi64(p0, 32), k.k1[0]);
    c3[g] = p0;
  }
  // Round 1: word 1 is zero.
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const __m512i p0 = _mm512_mul_epu32(c0[g], m0);
    const __m512i p1 = _mm512_mul_epu32(c2[g], m1);
    c0[g] = _mm512_xor_si512(_mm512_srli_epi64(p1, 32), k.k0[1]);
    c2[g] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), c3[g], k.k1[1], 0x96);
    c1[g] = p1;
    c3[g] = p0;
  }
#pragma GCC unroll 8
  for (int r = 2; r < philox::kRounds; ++r) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m512i p0 = _mm512_mul_epu32(c0[g], m0);
      const __m512i p1 = _mm512_mul_epu32(c2[g], m1);
      c0[g] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c1[g], k.k0[r], 0x96);
      c2[g] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), c3[g], k.k1[r], 0x96);
      c1[g] = p1;
      c3[g] = p0;
    }
  }
}

// Philox of G groups of 8 blocks with 64-bit counters cnt[g]; out[g][0..1] hold the 32 words
// of group g in memory order (blocks 0-3, then 4-7).
template <int G>
inline void philox_x8(const __m512i* cnt, const Keys& k, __m512i out[][2]) {
  __m512i c0[G], c1[G], c2[G], c3[G];
  philox_soa<G>(cnt, k, c0, c1, c2, c3);
  // The low halves of the lanes are the words; the high halves are left-overs.
  const __m512i pair = _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
  const __m512i lo4 = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
  const __m512i hi4 = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const __m512i t01 = _mm512_permutex2var_epi32(c0[g], pair, c1[g]);  // (w0, w1) per block
    const __m512i t23 = _mm512_permutex2var_epi32(c2[g], pair, c3[g]);  // (w2, w3) per block
    out[g][0] = _mm512_permutex2var_epi64(t01, lo4, t23);
    out[g][1] = _mm512_permutex2var_epi64(t01, hi4, t23);
  }
}

// Writes steps * 8G blocks starting at block blk: 64-byte register i of the words, transformed
// by xf, goes to out + 64 i.
template <int G, int M, class Xf>
inline void run(void* out, const Keys& k, uint64_t blk, uint64_t steps, Xf xf) {
  auto* d = static_cast<char*>(out);
  __m512i cnt = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(blk)),
                                 _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
  const __m512i eight = _mm512_set1_epi64(8);
  for (uint64_t s = 0; s < steps; ++s) {
    __m512i c[G];
    __m512i w[G][2];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      c[g] = cnt;
      cnt = _mm512_add_epi64(cnt, eight);
    }
    philox_x8<G>(c, k, w);
    if constexpr (Xf::kNarrow) {  // two registers of words -> one of 16-bit elements
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) put<M>(d + 64 * g, xf(w[g][0], w[g][1]));
      d += 64 * G;
    } else {
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        put<M>(d + 128 * g, xf(w[g][0]));
        put<M>(d + 128 * g + 64, xf(w[g][1]));
      }
      d += 128 * G;
    }
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
  static constexpr bool kNarrow = false;
  __m512i operator()(__m512i w) const { return w; }
};

template <bool Affine>
struct F32Xf {
  static constexpr bool kNarrow = false;
  __m512 lo, span;
  __m512i operator()(__m512i w) const {
    __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(w, 8)),
                             _mm512_set1_ps(5.9604644775390625e-08f));
    if constexpr (Affine) u = _mm512_add_ps(lo, _mm512_mul_ps(span, u));
    return _mm512_castps_si512(u);
  }
};

// (((hi << 32) | lo) >> 11) * 2^-53 exactly: the 53-bit integer as 2^32 * a + b through the
// exponent bias trick (AVX-512F has no unsigned 64-bit conversion without DQ).
template <bool Affine>
struct F64Xf {
  static constexpr bool kNarrow = false;
  __m512d lo, span;
  __m512i operator()(__m512i w) const {
    const __m512i v = _mm512_srli_epi64(w, 11);
    const __m512i a = _mm512_srli_epi64(v, 32);
    const __m512i b = _mm512_and_si512(v, _mm512_set1_epi64(0xffffffffLL));
    const __m512d da = _mm512_sub_pd(
        _mm512_castsi512_pd(_mm512_or_si512(a, _mm512_set1_epi64(0x4530000000000000LL))),
        _mm512_set1_pd(19342813113834066795298816.0));  // 2^84
    const __m512d db = _mm512_sub_pd(
        _mm512_castsi512_pd(_mm512_or_si512(b, _mm512_set1_epi64(0x4330000000000000LL))),
        _mm512_set1_pd(4503599627370496.0));  // 2^52
    __m512d u = _mm512_mul_pd(_mm512_add_pd(da, db), _mm512_set1_pd(1.1102230246251565e-16));
    if constexpr (Affine) u = _mm512_add_pd(lo, _mm512_mul_pd(span, u));
    return _mm512_castpd_si512(u);
  }
};

// float16: (w >> 21) * 2^-11, then low + (high - low) * u in float32, rounded to nearest even
// by vcvtps2ph (IEEE rounding, as random_impl.h's f32_to_f16).
template <bool Affine>
struct F16Xf {
  static constexpr bool kNarrow = true;
  __m512 lo, span;
  __m256i half(__m512i w) const {
    __m512 u =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(w, 21)), _mm512_set1_ps(4.8828125e-04f));
    if constexpr (Affine) u = _mm512_add_ps(lo, _mm512_mul_ps(span, u));
    return _mm512_cvtps_ph(u, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  __m512i operator()(__m512i w0, __m512i w1) const {
    return _mm512_inserti64x4(_mm512_castsi256_si512(half(w0)), half(w1), 1);
  }
};

// bfloat16: (w >> 24) * 2^-8, then low + (high - low) * u in float32, rounded to nearest even
// with the integer rounding of random_impl.h's f32_to_bf16 (NaN kept quiet).
template <bool Affine>
struct BF16Xf {
  static constexpr bool kNarrow = true;
  __m512 lo, span;
  __m256i half(__m512i w) const {
    __m512 u =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(w, 24)), _mm512_set1_ps(3.90625e-03f));
    if constexpr (Affine) u = _mm512_add_ps(lo, _mm512_mul_ps(span, u));
    return round(u);
  }
  // float32 -> bfloat16 bits, as f32_to_bf16.
  static __m256i round(__m512 u) {
    const __m512i x = _mm512_castps_si512(u);
    const __m512i top = _mm512_srli_epi32(x, 16);
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)),
                                           _mm512_and_si512(top, _mm512_set1_epi32(1))),
                          16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    const __m512i r =
        _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(top, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
  }
  __m512i operator()(__m512i w0, __m512i w1) const {
    return _mm512_inserti64x4(_mm512_castsi256_si512(half(w0)), half(w1), 1);
  }
};

// normal_impl.h's SIMD layer: 8 lanes.
struct Avx512V {
  static constexpr uint64_t kLanes = 8;
  using D = __m512d;
  using I = __m512i;
  static I load_pairs(const uint32_t* w) { return _mm512_loadu_si512(w); }
  static I i64(uint64_t v) { return _mm512_set1_epi64(static_cast<long long>(v)); }
  static D f64(double v) { return _mm512_set1_pd(v); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  static I xor_(I a, I b) { return _mm512_xor_si512(a, b); }
  static I add_i(I a, I b) { return _mm512_add_epi64(a, b); }
  static I sub_i(I a, I b) { return _mm512_sub_epi64(a, b); }
  template <int N>
  static I shl(I a) {
    return _mm512_slli_epi64(a, N);
  }
  template <int N>
  static I shr(I a) {
    return _mm512_srli_epi64(a, N);
  }
  static D as_d(I a) { return _mm512_castsi512_pd(a); }
  static I as_i(D a) { return _mm512_castpd_si512(a); }
  static D add(D a, D b) { return _mm512_add_pd(a, b); }
  static D sub(D a, D b) { return _mm512_sub_pd(a, b); }
  static D mul(D a, D b) { return _mm512_mul_pd(a, b); }
  static D fma(D a, D b, D c) { return _mm512_fmadd_pd(a, b, c); }
  static D sqrt(D a) { return _mm512_sqrt_pd(a); }
  static D lookup16(const double* t, I i) {
    return _mm512_permutex2var_pd(_mm512_load_pd(t), i, _mm512_load_pd(t + 8));
  }
  static D select_odd(I q, D a, D b) {
    return _mm512_mask_blend_pd(_mm512_test_epi64_mask(q, _mm512_set1_epi64(1)), a, b);
  }
  static void store_f64(double* out, D z0, D z1) {
    const __m512i lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
    const __m512i hi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
    _mm512_storeu_pd(out, _mm512_permutex2var_pd(z0, lo, z1));
    _mm512_storeu_pd(out + 8, _mm512_permutex2var_pd(z0, hi, z1));
  }
};

// normal_impl.h's float layer: 16 lanes.
struct Avx512VF {
  static constexpr uint64_t kLanes = 16;
  using F = __m512;
  using U = __m512i;
  static void load_pairs(const uint32_t* w, U& w0, U& w1) {
    const __m512i a = _mm512_loadu_si512(w), b = _mm512_loadu_si512(w + 16);
    const __m512i even =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    w0 = _mm512_permutex2var_epi32(a, even, b);
    w1 = _mm512_permutex2var_epi32(a, _mm512_add_epi32(even, _mm512_set1_epi32(1)), b);
  }
  static U u(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }
  static F f(float v) { return _mm512_set1_ps(v); }
  static U add_u(U a, U b) { return _mm512_add_epi32(a, b); }
  static U sub_u(U a, U b) { return _mm512_sub_epi32(a, b); }
  template <int N>
  static U shl(U a) {
    return _mm512_slli_epi32(a, N);
  }
  template <int N>
  static U shr(U a) {
    return _mm512_srli_epi32(a, N);
  }
  static U as_u(F a) { return _mm512_castps_si512(a); }
  static F as_f(U a) { return _mm512_castsi512_ps(a); }
  static F cvt(U a) { return _mm512_cvtepi32_ps(a); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fms(F a, F b, F c) { return _mm512_fmsub_ps(a, b, c); }
  static F fnma(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  template <int N>
  static U sra(U a) {
    return _mm512_srai_epi32(a, N);
  }
  template <int B>
  static F neg_if_bit(U q, F x) {
    const __mmask16 k = _mm512_test_epi32_mask(q, u(1u << B));
    return _mm512_castsi512_ps(
        _mm512_mask_xor_epi32(_mm512_castps_si512(x), k, _mm512_castps_si512(x), u(0x80000000u)));
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
  static F lookup16(const float* t, U i) { return _mm512_permutexvar_ps(i, _mm512_load_ps(t)); }
  static F select_odd(U q, F a, F b) {
    return _mm512_mask_blend_ps(_mm512_test_epi32_mask(q, u(1)), a, b);
  }
  static void store(float* out, F z0, F z1) {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    _mm512_storeu_ps(out, _mm512_permutex2var_ps(z0, lo, z1));
    _mm512_storeu_ps(out + 16, _mm512_permutex2var_ps(z0, hi, z1));
  }
};

// Normal float32 fused with Philox: `steps` steps of kNormalGroups groups of 8 blocks from
// block blk, 32 values per group at out (64-byte aligned when M is kStore or kStream). In a
// group, lane i < 8 of the Box-Muller registers is block i's pair (w0, w1), lane 8 + i its pair
// (w2, w3): the block's 4 values are z0[i], z1[i], z0[8 + i], z1[8 + i].
constexpr int kNormalGroups = 8;  // even: groups go through Box-Muller two at a time
template <int M, bool kAffine>
void normal_f32_run(float* out, const Keys& k, uint64_t blk, uint64_t steps, float mean, float sd) {
  using V2 = nrm::Twice<Avx512VF>;
  const V2::F mv = V2::f(mean), sdv = V2::f(sd);
  const __m512i lows = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i st0 = _mm512_setr_epi32(0, 16, 8, 24, 1, 17, 9, 25, 2, 18, 10, 26, 3, 19, 11, 27);
  const __m512i st1 = _mm512_add_epi32(st0, _mm512_set1_epi32(4));
  __m512i cnt = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(blk)),
                                 _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
  const __m512i eight = _mm512_set1_epi64(8);
  for (uint64_t s = 0; s < steps; ++s) {
    __m512i c[kNormalGroups], c0[kNormalGroups], c1[kNormalGroups], c2[kNormalGroups],
        c3[kNormalGroups];
    for (int g = 0; g < kNormalGroups; ++g) {
      c[g] = cnt;
      cnt = _mm512_add_epi64(cnt, eight);
    }
    philox_soa<kNormalGroups>(c, k, c0, c1, c2, c3);
    for (int g = 0; g < kNormalGroups; g += 2) {  // two groups at once (nrm::Twice)
      const V2::U w0{_mm512_permutex2var_epi32(c0[g], lows, c2[g]),
                     _mm512_permutex2var_epi32(c0[g + 1], lows, c2[g + 1])};
      const V2::U w1{_mm512_permutex2var_epi32(c1[g], lows, c3[g]),
                     _mm512_permutex2var_epi32(c1[g + 1], lows, c3[g + 1])};
      V2::F z0, z1;
      nrm::bm_f32<V2, kAffine>(w0, w1, mv, sdv, z0, z1);
      put<M>(out, _mm512_castps_si512(_mm512_permutex2var_ps(z0.a, st0, z1.a)));
      put<M>(out + 16, _mm512_castps_si512(_mm512_permutex2var_ps(z0.a, st1, z1.a)));
      put<M>(out + 32, _mm512_castps_si512(_mm512_permutex2var_ps(z0.b, st0, z1.b)));
      put<M>(out + 48, _mm512_castps_si512(_mm512_permutex2var_ps(z0.b, st1, z1.b)));
      out += 64;
    }
  }
}

template <bool kAffine>
void normal_f32_mode(float* out, uint64_t seed, uint64_t blk, uint64_t steps, float mean, float sd,
                     bool aligned, bool nt) {
  Keys k;
  make_keys(k, seed);
  if (nt) {
    normal_f32_run<kStream, kAffine>(out, k, blk, steps, mean, sd);
    _mm_sfence();
  } else if (aligned) {
    normal_f32_run<kStore, kAffine>(out, k, blk, steps, mean, sd);
  } else {
    normal_f32_run<kStoreU, kAffine>(out, k, blk, steps, mean, sd);
  }
}

struct Avx512Gen {
  static constexpr uint64_t kStepBlocks = kStep;
  static constexpr bool kHalfFused = true;

  static void blocks(uint32_t* out, uint64_t seed, uint64_t blk, uint64_t nb) {
    Keys k;
    make_keys(k, seed);
    const uint64_t steps = nb / kStep;
    run<kGroups, kStoreU>(out, k, blk, steps, IdentityXf{});
    uint64_t done = steps * kStep;
    const uint64_t groups = (nb - done) / 8;
    run<1, kStoreU>(out + 4 * done, k, blk + done, groups, IdentityXf{});
    done += 8 * groups;
    if (done < nb) {
      alignas(64) uint32_t tmp[32];
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
  static constexpr uint64_t kNormalLanesF32 = Avx512VF::kLanes;
  static constexpr uint64_t kNormalLanesF64 = Avx512V::kLanes;
  static void normal_f32(const uint32_t* w, float* z, uint64_t pairs, float mean, float sd) {
    nrm::box_muller_f32<Avx512VF>(w, z, pairs, mean, sd);
  }
  // Normal float32 fused with Philox, kNormalStepBlocks blocks per step (see fused_loop).
  static constexpr uint64_t kNormalStepBlocks = 8 * kNormalGroups;
  static void normal_f32_fused(float* out, uint64_t seed, uint64_t blk, uint64_t steps, float mean,
                               float sd, bool aligned, bool nt) {
    if (mean == 0.0f && sd == 1.0f) {
      normal_f32_mode<false>(out, seed, blk, steps, mean, sd, aligned, nt);
    } else {
      normal_f32_mode<true>(out, seed, blk, steps, mean, sd, aligned, nt);
    }
  }
  static void normal_f64(const uint32_t* w, double* z, uint64_t pairs, double mean, double sd) {
    nrm::box_muller<Avx512V>(w, z, pairs, mean, sd);
  }
  static void half_from_f32(const float* src, uint16_t* dst, uint64_t n, bool bf16) {
    uint64_t i = 0;
    if (bf16) {
      for (; i + 16 <= n; i += 16) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                            BF16Xf<false>::round(_mm512_loadu_ps(src + i)));
      }
    } else {
      for (; i + 16 <= n; i += 16) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
    }
    rnd::half_from_f32_scalar(src + i, dst + i, n - i, bf16);
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
               F32Xf<true>{_mm512_set1_ps(lo), _mm512_set1_ps(span)});
    }
  }
  static void uniform_f64(double* out, uint64_t seed, uint64_t blk, uint64_t steps, double lo,
                          double span, bool aligned, bool nt) {
    if (lo == 0.0 && span == 1.0) {
      run_mode(out, seed, blk, steps, aligned, nt, F64Xf<false>{});
    } else {
      run_mode(out, seed, blk, steps, aligned, nt,
               F64Xf<true>{_mm512_set1_pd(lo), _mm512_set1_pd(span)});
    }
  }
  static void uniform_half(uint16_t* out, uint64_t seed, uint64_t blk, uint64_t steps, float lo,
                           float span, bool bf16, bool aligned, bool nt) {
    const bool identity = lo == 0.0f && span == 1.0f;
    const __m512 l = _mm512_set1_ps(lo), s = _mm512_set1_ps(span);
    if (bf16) {
      if (identity) {
        run_mode(out, seed, blk, steps, aligned, nt, BF16Xf<false>{l, s});
      } else {
        run_mode(out, seed, blk, steps, aligned, nt, BF16Xf<true>{l, s});
      }
    } else if (identity) {
      run_mode(out, seed, blk, steps, aligned, nt, F16Xf<false>{l, s});
    } else {
      run_mode(out, seed, blk, steps, aligned, nt, F16Xf<true>{l, s});
    }
  }
};

}  // namespace

void random_avx512(void* dst, const backend::RandomParams& p, uint64_t first, uint64_t n) {
  rnd::random_impl<Avx512Gen>(dst, p, first, n);
}

}  // namespace mpsrt::cpu
