// Philox4x32-10 on SIMD registers, written once over an instruction set's simd.h layer S and
// instantiated by the AVX2 and AVX-512 tables (each translation unit with its own -m flags;
// everything here has internal linkage, so the instances never meet). Each 64-bit lane holds one
// block's 32-bit word in its low half, so one unsigned 32x32 -> 64-bit multiply (S::mul32) gives
// both halves of a product, and the lane's full 64-bit counter (offset + block) carries into the
// second counter word. Bit-identical to the scalar table (random_scalar.cpp, mpsrt/philox.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/cpu/simd.h"
#include "mpsrt/philox.h"  // constants only: no inline function of it is called here

namespace mpsrt::cpu {
namespace {
namespace phx {

using simd::kStore;
using simd::kStoreU;
using simd::kStream;

/// Independent groups of S::kLanes64 blocks per step of the loops below (latency hiding).
constexpr int kGroups = 6;

template <class S>
struct Keys {
  typename S::I k0[philox::kRounds];
  typename S::I k1[philox::kRounds];
};

template <class S>
inline void make_keys(Keys<S>& k, uint64_t seed) {
  uint32_t a = static_cast<uint32_t>(seed), b = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < philox::kRounds; ++r) {
    k.k0[r] = S::set1_64(a);
    k.k1[r] = S::set1_64(b);
    a += philox::kW0;
    b += philox::kW1;
  }
}

/// Philox of G groups of S::kLanes64 blocks with 64-bit counters cnt[g]: word j of block i of
/// group g in the low half of 64-bit lane i of cj[g] (the high halves are left-overs).
template <class S, int G>
inline void philox_soa(const typename S::I* cnt, const Keys<S>& k, typename S::I* c0,
                       typename S::I* c1, typename S::I* c2, typename S::I* c3) {
  using I = typename S::I;
  const I m0 = S::set1_64(philox::kM0);
  const I m1 = S::set1_64(philox::kM1);
  // Round 0: the counter's words 2 and 3 are zero.
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const I p0 = S::mul32(cnt[g], m0);
    c0[g] = S::xor_(S::shr64(cnt[g], 32), k.k0[0]);
    c2[g] = S::xor_(S::shr64(p0, 32), k.k1[0]);
    c3[g] = p0;
  }
  // Round 1: word 1 is zero.
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    const I p0 = S::mul32(c0[g], m0);
    const I p1 = S::mul32(c2[g], m1);
    c0[g] = S::xor_(S::shr64(p1, 32), k.k0[1]);
    c2[g] = S::xor3(S::shr64(p0, 32), c3[g], k.k1[1]);
    c1[g] = p1;
    c3[g] = p0;
  }
#pragma GCC unroll 8
  for (int r = 2; r < philox::kRounds; ++r) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const I p0 = S::mul32(c0[g], m0);
      const I p1 = S::mul32(c2[g], m1);
      c0[g] = S::xor3(S::shr64(p1, 32), c1[g], k.k0[r]);
      c2[g] = S::xor3(S::shr64(p0, 32), c3[g], k.k1[r]);
      c1[g] = p1;
      c3[g] = p0;
    }
  }
}

/// Philox over `steps` steps of G groups of S::kLanes64 blocks from block blk, in store mode M:
/// put.template step<M, G>(d, c0, c1, c2, c3) writes one step's output at d (philox_soa's
/// layout) and returns where the next step's goes.
template <class S, int G, int M, class Put>
inline void run(void* out, const Keys<S>& k, uint64_t blk, uint64_t steps, Put put) {
  using I = typename S::I;
  auto* d = static_cast<char*>(out);
  I cnt = S::add64(S::set1_64(blk), S::iota64());
  const I step = S::set1_64(S::kLanes64);
  for (uint64_t s = 0; s < steps; ++s) {
    I c[G], c0[G], c1[G], c2[G], c3[G];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      c[g] = cnt;
      cnt = S::add64(cnt, step);
    }
    philox_soa<S, G>(c, k, c0, c1, c2, c3);
    d = put.template step<M, G>(d, c0, c1, c2, c3);
  }
}

/// run's put for the words of the blocks in memory order: register i of them, transformed by
/// xf, goes to d + sizeof(I) i; a narrowing xf (kNarrow) turns two registers of words into one.
template <class S, class Xf>
struct Words {
  using I = typename S::I;
  Xf xf;
  template <int M, int G>
  MPSRT_SIMD_INLINE char* step(char* d, const I* c0, const I* c1, const I* c2, const I* c3) const {
    constexpr size_t kReg = sizeof(I);
    I w[G][2];
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) S::interleave_lo32(c0[g], c1[g], c2[g], c3[g], w[g]);
    if constexpr (Xf::kNarrow) {
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) S::template store<M>(d + kReg * g, xf(w[g][0], w[g][1]));
      return d + kReg * G;
    } else {
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        S::template store<M>(d + 2 * kReg * g, xf(w[g][0]));
        S::template store<M>(d + 2 * kReg * g + kReg, xf(w[g][1]));
      }
      return d + 2 * kReg * G;
    }
  }
};

/// run with G groups per step (kGroups unless told) in the store mode that `aligned` and `nt`
/// pick. A function of its own (simd.h, MPSRT_SIMD_NOINLINE).
template <class S, int G = kGroups, class Put>
MPSRT_SIMD_NOINLINE void run_mode(void* out, uint64_t seed, uint64_t blk, uint64_t steps,
                                  bool aligned, bool nt, Put put) {
  Keys<S> k;
  make_keys(k, seed);
  if (nt) {
    run<S, G, kStream>(out, k, blk, steps, put);
    S::fence();
  } else if (aligned) {
    run<S, G, kStore>(out, k, blk, steps, put);
  } else {
    run<S, G, kStoreU>(out, k, blk, steps, put);
  }
}

/// run_mode of the words through xf.
template <class S, class Xf>
inline void run_words(void* out, uint64_t seed, uint64_t blk, uint64_t steps, bool aligned, bool nt,
                      Xf xf) {
  run_mode<S>(out, seed, blk, steps, aligned, nt, Words<S, Xf>{xf});
}

template <class S>
struct IdentityXf {
  static constexpr bool kNarrow = false;
  typename S::I operator()(typename S::I w) const { return w; }
};

/// float32 u = (w >> Shift) scale, per 32-bit word w (philox::uniform_f32: 8, 2^-24; the
/// float16 / bfloat16 values: 21, 2^-11 / 24, 2^-8), then low + span u (Affine).
template <class S, int Shift, bool Affine>
MPSRT_SIMD_INLINE typename S::F unit_f32(typename S::U w, float scale, typename S::F lo,
                                         typename S::F span) {
  auto u = S::mul(S::cvt(S::shr32(w, Shift)), S::set1_f(scale));
  if constexpr (Affine) u = S::add(lo, S::mul(span, u));
  return u;
}

/// float32: unit_f32 of every word.
template <class S, bool Affine>
struct F32Xf {
  static constexpr bool kNarrow = false;
  typename S::F lo, span;
  typename S::I operator()(typename S::I w) const {
    return S::as_u(unit_f32<S, 8, Affine>(w, 5.9604644775390625e-08f, lo, span));
  }
};

/// float64: (((hi << 32) | lo) >> 11) 2^-53 exactly, the 53-bit integer as 2^32 a + b through
/// the exponent bias trick (no unsigned 64-bit conversion needed), then low + span u.
template <class S, bool Affine>
struct F64Xf {
  static constexpr bool kNarrow = false;
  typename S::D lo, span;
  typename S::I operator()(typename S::I w) const {
    const auto v = S::shr64(w, 11);
    const auto a = S::shr64(v, 32);
    const auto b = S::and_(v, S::set1_64(0xffffffffULL));
    const auto da = S::sub(S::as_d(S::or_(a, S::set1_64(0x4530000000000000ULL))),
                           S::set1_d(19342813113834066795298816.0));  // 2^84
    const auto db = S::sub(S::as_d(S::or_(b, S::set1_64(0x4330000000000000ULL))),
                           S::set1_d(4503599627370496.0));  // 2^52
    auto u = S::mul(S::add(da, db), S::set1_d(1.1102230246251565e-16));
    if constexpr (Affine) u = S::add(lo, S::mul(span, u));
    return S::as_i(u);
  }
};

/// The parts of a SIMD kernel table (random_impl.h's G) that only need Philox: raw blocks,
/// bits, uniform float32 / float64, and the scalar conversions of the generic loops. A table
/// derives from it and adds its normal and half-precision members.
template <class S>
struct Gen {
  static constexpr uint64_t kStepBlocks = S::kLanes64 * kGroups;

  static void blocks(uint32_t* out, uint64_t seed, uint64_t blk, uint64_t nb) {
    using Raw = Words<S, IdentityXf<S>>;
    Keys<S> k;
    make_keys(k, seed);
    const uint64_t steps = nb / kStepBlocks;
    run<S, kGroups, kStoreU>(out, k, blk, steps, Raw{});
    uint64_t done = steps * kStepBlocks;
    const uint64_t groups = (nb - done) / S::kLanes64;
    run<S, 1, kStoreU>(out + 4 * done, k, blk + done, groups, Raw{});
    done += S::kLanes64 * groups;
    if (done < nb) {
      alignas(64) uint32_t tmp[4 * S::kLanes64];
      run<S, 1, kStore>(tmp, k, blk + done, 1, Raw{});
      std::memcpy(out + 4 * done, tmp, 16 * (nb - done));
    }
  }

  // philox.h's conversions, written here: its inline functions have external linkage, and an
  // instance compiled with this table's -m flags could be the one the linker keeps.
  static float u_f32(uint32_t w) { return static_cast<float>(w >> 8) * 5.9604644775390625e-08f; }
  static float u_f16(uint32_t w) { return static_cast<float>(w >> 21) * 4.8828125e-04f; }
  static float u_bf16(uint32_t w) { return static_cast<float>(w >> 24) * 3.90625e-03f; }
  static double u_f64(uint32_t lo, uint32_t hi) {
    const uint64_t u = (static_cast<uint64_t>(hi) << 32) | lo;
    return static_cast<double>(u >> 11) * 1.1102230246251565e-16;
  }

  static void bits(uint32_t* out, uint64_t seed, uint64_t blk, uint64_t steps, bool aligned,
                   bool nt) {
    run_words<S>(out, seed, blk, steps, aligned, nt, IdentityXf<S>{});
  }
  static void uniform_f32(float* out, uint64_t seed, uint64_t blk, uint64_t steps, float lo,
                          float span, bool aligned, bool nt) {
    uniform<F32Xf>(out, seed, blk, steps, lo, span, aligned, nt, S::set1_f);
  }
  static void uniform_f64(double* out, uint64_t seed, uint64_t blk, uint64_t steps, double lo,
                          double span, bool aligned, bool nt) {
    uniform<F64Xf>(out, seed, blk, steps, lo, span, aligned, nt, S::set1_d);
  }

 protected:
  // low + span u through Xf, or u alone for [0, 1) (no affine step: the same bits).
  template <template <class, bool> class Xf, class T, class Set1>
  static void uniform(void* out, uint64_t seed, uint64_t blk, uint64_t steps, T lo, T span,
                      bool aligned, bool nt, Set1 set1) {
    if (lo == T(0) && span == T(1)) {
      run_words<S>(out, seed, blk, steps, aligned, nt, Xf<S, false>{});
    } else {
      run_words<S>(out, seed, blk, steps, aligned, nt, Xf<S, true>{set1(lo), set1(span)});
    }
  }
};

}  // namespace phx
}  // namespace
}  // namespace mpsrt::cpu
