// AVX-512 random-number table (compiled with -mavx512f/bw/vl -mfma and -ffp-contract=off; used
// only when the CPU reports them): philox_simd.h on 8 blocks per register, its own float16 /
// bfloat16 transforms, and normal_impl.h on 8 doubles / 16 floats, the float32 normal fused
// with Philox. Bit-identical to the scalar table (random_scalar.cpp).
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
#include "backends/cpu/philox_simd.h"
#include "backends/cpu/random_impl.h"

namespace mpsrt::cpu {
namespace {

// philox_simd.h's integer layer: 8 blocks per register.
struct Avx512I {
  static constexpr uint64_t kBlocks = 8;
  using I = __m512i;
  using F = __m512;
  using D = __m512d;
  static I set1_64(uint64_t v) { return _mm512_set1_epi64(static_cast<long long>(v)); }
  static I iota64() { return _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7); }
  static I add64(I a, I b) { return _mm512_add_epi64(a, b); }
  static I mul32(I a, I b) { return _mm512_mul_epu32(a, b); }
  static I xor2(I a, I b) { return _mm512_xor_si512(a, b); }
  static I xor3(I a, I b, I c) { return _mm512_ternarylogic_epi64(a, b, c, 0x96); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  template <int N>
  static I srl64(I a) {
    return _mm512_srli_epi64(a, N);
  }
  template <int N>
  static I srl32(I a) {
    return _mm512_srli_epi32(a, N);
  }
  // The 32 words of 8 blocks in memory order: blocks 0-3, then 4-7.
  static void words(I c0, I c1, I c2, I c3, I out[2]) {
    const I pair = _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
    const I t01 = _mm512_permutex2var_epi32(c0, pair, c1);  // (w0, w1) per block
    const I t23 = _mm512_permutex2var_epi32(c2, pair, c3);  // (w2, w3) per block
    out[0] = _mm512_permutex2var_epi64(t01, _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), t23);
    out[1] = _mm512_permutex2var_epi64(t01, _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15), t23);
  }
  template <int M>
  static void store(void* p, I v) {
    if constexpr (M == phx::kStream) {
      _mm512_stream_si512(static_cast<I*>(p), v);
    } else if constexpr (M == phx::kStore) {
      _mm512_store_si512(p, v);
    } else {
      _mm512_storeu_si512(p, v);
    }
  }
  static void sfence() { _mm_sfence(); }
  static F set1_f(float v) { return _mm512_set1_ps(v); }
  static F cvt_f(I a) { return _mm512_cvtepi32_ps(a); }
  static F add_f(F a, F b) { return _mm512_add_ps(a, b); }
  static F mul_f(F a, F b) { return _mm512_mul_ps(a, b); }
  static I as_i(F a) { return _mm512_castps_si512(a); }
  static D set1_d(double v) { return _mm512_set1_pd(v); }
  static D add_d(D a, D b) { return _mm512_add_pd(a, b); }
  static D sub_d(D a, D b) { return _mm512_sub_pd(a, b); }
  static D mul_d(D a, D b) { return _mm512_mul_pd(a, b); }
  static D as_d(I a) { return _mm512_castsi512_pd(a); }
  static I as_i(D a) { return _mm512_castpd_si512(a); }
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
void normal_f32_run(float* out, const phx::Keys<Avx512I>& k, uint64_t blk, uint64_t steps,
                    float mean, float sd) {
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
    phx::philox_soa<Avx512I, kNormalGroups>(c, k, c0, c1, c2, c3);
    for (int g = 0; g < kNormalGroups; g += 2) {  // two groups at once (nrm::Twice)
      const V2::U w0{_mm512_permutex2var_epi32(c0[g], lows, c2[g]),
                     _mm512_permutex2var_epi32(c0[g + 1], lows, c2[g + 1])};
      const V2::U w1{_mm512_permutex2var_epi32(c1[g], lows, c3[g]),
                     _mm512_permutex2var_epi32(c1[g + 1], lows, c3[g + 1])};
      V2::F z0, z1;
      nrm::bm_f32<V2, kAffine>(w0, w1, mv, sdv, z0, z1);
      Avx512I::store<M>(out, _mm512_castps_si512(_mm512_permutex2var_ps(z0.a, st0, z1.a)));
      Avx512I::store<M>(out + 16, _mm512_castps_si512(_mm512_permutex2var_ps(z0.a, st1, z1.a)));
      Avx512I::store<M>(out + 32, _mm512_castps_si512(_mm512_permutex2var_ps(z0.b, st0, z1.b)));
      Avx512I::store<M>(out + 48, _mm512_castps_si512(_mm512_permutex2var_ps(z0.b, st1, z1.b)));
      out += 64;
    }
  }
}

template <bool kAffine>
void normal_f32_mode(float* out, uint64_t seed, uint64_t blk, uint64_t steps, float mean, float sd,
                     bool aligned, bool nt) {
  phx::Keys<Avx512I> k;
  phx::make_keys(k, seed);
  if (nt) {
    normal_f32_run<phx::kStream, kAffine>(out, k, blk, steps, mean, sd);
    _mm_sfence();
  } else if (aligned) {
    normal_f32_run<phx::kStore, kAffine>(out, k, blk, steps, mean, sd);
  } else {
    normal_f32_run<phx::kStoreU, kAffine>(out, k, blk, steps, mean, sd);
  }
}

struct Avx512Gen : phx::Gen<Avx512I> {
  static constexpr bool kHalfFused = true;

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

  static void uniform_half(uint16_t* out, uint64_t seed, uint64_t blk, uint64_t steps, float lo,
                           float span, bool bf16, bool aligned, bool nt) {
    const bool identity = lo == 0.0f && span == 1.0f;
    const __m512 l = _mm512_set1_ps(lo), s = _mm512_set1_ps(span);
    if (bf16) {
      if (identity) {
        phx::run_mode<Avx512I>(out, seed, blk, steps, aligned, nt, BF16Xf<false>{l, s});
      } else {
        phx::run_mode<Avx512I>(out, seed, blk, steps, aligned, nt, BF16Xf<true>{l, s});
      }
    } else if (identity) {
      phx::run_mode<Avx512I>(out, seed, blk, steps, aligned, nt, F16Xf<false>{l, s});
    } else {
      phx::run_mode<Avx512I>(out, seed, blk, steps, aligned, nt, F16Xf<true>{l, s});
    }
  }
};

}  // namespace

void random_avx512(void* dst, const backend::RandomParams& p, uint64_t first, uint64_t n) {
  rnd::random_impl<Avx512Gen>(dst, p, first, n);
}

}  // namespace mpsrt::cpu
