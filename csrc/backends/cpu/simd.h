// The SIMD layer of the cpu backend's kernels: one traits struct per instruction set, the one
// vocabulary of every kernel written over it (kernels_impl.h's fill and copy, philox_simd.h's
// Philox, normal_impl.h's Box-Muller): simd::Scalar (simd_scalar.h: one lane of each type),
// simd::Avx2 (simd_avx2.h: 256-bit registers) and simd::Avx512 (simd_avx512.h: 512-bit). Each
// derives from simd::Lanes below, which writes once the operations that read the same on every
// width (GCC and Clang vector extensions; plain C++ on one lane: the very code the intrinsics
// stand for), and adds those that need its own instructions. Everything has internal linkage:
// each translation unit instantiates it with its own -m flags, so an instance compiled for one
// instruction set never stands in for another's.
//
// Registers: I holds kLanes64 64-bit integer lanes, U kLanes32 32-bit integer lanes (on SIMD
// the same register as I), F kLanes32 floats, D kLanes64 doubles. S provides:
//  from Lanes:
//   set1_64, set1_32, set1_f, set1_d                 broadcasts
//   iota64()                                         lanes 0, 1, ..., kLanes64 - 1
//   loadu(const void*) -> I                          unaligned load
//   add64, sub64 (I); add32, sub32 (U)               lane arithmetic, wrapping
//   and_, or_, xor_ (I or U)                         bitwise
//   add, sub, mul (F or D)                           IEEE, rounded to nearest
//   as_u(F), as_f(U), as_i(D), as_d(I)               bit casts
//  its own:
//   kHasStream                                       streaming stores exist
//   shl64, shr64(I, n); shl32, shr32, sra32(U, n)   shifts by a constant n (logical; sra32
//                                                    arithmetic), the ISA's own instructions:
//                                                    as vector-extension shifts the compiler
//                                                    folds shift pairs into masks, which
//                                                    measured 4 % slower in the float32
//                                                    Box-Muller loop
//   store<M>(void*, I)                               M: kStoreU, kStore (aligned), kStream
//   fence()                                          after streaming stores
//   cvt(U)                                           signed int32 -> float
//   fma (a b + c; F or D), fms (a b - c; F), fnma (-a b + c; F), sqrt (F or D)
//   lookup16(const float t[16], U), lookup16(const double t[16], I)   t[i & 15] per lane
//   select_odd(U q, F a, F b), select_odd(I q, D a, D b)   per lane: q odd ? b : a
//   neg_if_bit<B>(U q, F x)                          per lane: bit B of q set ? -x : x
//   neq_mask(F a, F b)                               bit i set where a[i] != b[i]
//   fix_lanes(F v, U w, mask, fn)                    v with lane i replaced by fn(w[i]) for
//                                                    the mask's lanes
//   load_pairs(const uint32_t* w) -> I               lane i = w[2i] | w[2i + 1] << 32
//   load_pairs(const uint32_t* w, U& w0, U& w1)      w0[i] = w[2i], w1[i] = w[2i + 1]
//   store_pairs(float* out, F z0, F z1), store_pairs(double* out, D z0, D z1)
//                                                    out[2i] = z0[i], out[2i + 1] = z1[i]
//  and on SIMD (Philox):
//   mul32(I, I)                                      low 32 x low 32 -> 64 bits, unsigned
//   xor3(I, I, I)
//   interleave_lo32(c0, c1, c2, c3, I out[2])        the low halves of the lanes of c0..c3 as
//                                                    4 kLanes64 words in the order c0[0],
//                                                    c1[0], c2[0], c3[0], c0[1], ...
// Twice<S> (below) is S's float32 side on two registers at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

// The kernels' inner steps are inlined into their loops, whatever their size (a call would
// pass the registers through memory); a loop nest that spills registers (Philox on AVX2's 16)
// is a function of its own, so that its register allocation does not depend on what its
// caller inlines around it (measured: up to 18 % either way).
#if defined(__GNUC__)
#define MPSRT_SIMD_INLINE inline __attribute__((always_inline))
#define MPSRT_SIMD_NOINLINE __attribute__((noinline))
#else
#define MPSRT_SIMD_INLINE inline
#define MPSRT_SIMD_NOINLINE
#endif

namespace mpsrt::cpu {
namespace {
namespace simd {

/// How store<M> writes a register: unaligned, aligned, or streaming (non-temporal, aligned).
enum Store { kStoreU, kStore, kStream };

/// T lanes of a B-byte register, or T itself for B == 0 (one lane).
template <class T, size_t B>
struct LaneReg {
  typedef T type __attribute__((vector_size(B)));
};
template <class T>
struct LaneReg<T, 0> {
  using type = T;
};

/// The operations that read the same on every width, over an instruction set's registers
/// (R::I, R::U, R::F, R::D: a struct of them, as the intrinsics' types lose their attributes as
/// template arguments; R::BitLane: the lanes of its bitwise instructions). Each is the
/// expression the ISA's intrinsic stands for (GCC's and Clang's headers define them so).
template <class R>
struct Lanes {
  using I = typename R::I;
  using U = typename R::U;
  using F = typename R::F;
  using D = typename R::D;
  static constexpr uint64_t kLanes64 = sizeof(D) / 8;
  static constexpr uint64_t kLanes32 = sizeof(F) / 4;

  template <class To, class From>
  static To as(From x) {
    static_assert(sizeof(To) == sizeof(From), "a bit cast keeps the size");
    if constexpr (kBytes == 0) {
      To y;
      std::memcpy(&y, &x, sizeof y);
      return y;
    } else {
      return (To)x;  // between vector types of one size: the bits (as the intrinsics' casts)
    }
  }
  static I set1_64(uint64_t v) { return as<I>(splat<V64>(v)); }
  static U set1_32(uint32_t v) { return as<U>(splat<V32>(v)); }
  static F set1_f(float v) { return splat<F>(v); }
  static D set1_d(double v) { return splat<D>(v); }
  static I iota64() { return as<I>(iota<V64>(std::make_index_sequence<kLanes64>())); }
  static I loadu(const void* p) {
    I r;
    std::memcpy(&r, p, sizeof r);
    return r;
  }

  static U as_u(F a) { return as<U>(a); }
  static F as_f(U a) { return as<F>(a); }
  static I as_i(D a) { return as<I>(a); }
  static D as_d(I a) { return as<D>(a); }

  static I add64(I a, I b) { return as<I>(as<V64>(a) + as<V64>(b)); }
  static I sub64(I a, I b) { return as<I>(as<V64>(a) - as<V64>(b)); }
  static U add32(U a, U b) { return as<U>(as<V32>(a) + as<V32>(b)); }
  static U sub32(U a, U b) { return as<U>(as<V32>(a) - as<V32>(b)); }
  // Bitwise on lanes of R::BitLane, as the ISA's own intrinsics (vpand on 64-bit lanes,
  // vpandd on 32-bit ones: AVX-512 then takes a 32-bit constant as an embedded broadcast).
  template <class X>
  static X and_(X a, X b) {
    if constexpr (kBytes == 0) {
      return a & b;
    } else {
      return as<X>(as<VB>(a) & as<VB>(b));
    }
  }
  template <class X>
  static X or_(X a, X b) {
    if constexpr (kBytes == 0) {
      return a | b;
    } else {
      return as<X>(as<VB>(a) | as<VB>(b));
    }
  }
  template <class X>
  static X xor_(X a, X b) {
    if constexpr (kBytes == 0) {
      return a ^ b;
    } else {
      return as<X>(as<VB>(a) ^ as<VB>(b));
    }
  }

  static F add(F a, F b) { return a + b; }
  static F sub(F a, F b) { return a - b; }
  static F mul(F a, F b) { return a * b; }
  static D add(D a, D b) { return a + b; }
  static D sub(D a, D b) { return a - b; }
  static D mul(D a, D b) { return a * b; }

 private:
  // V{v, v, ...} and V{0, 1, ...}: a register's lanes (one lane: v, 0).
  template <class V, class T>
  static V splat(T v) {
    return splat<V>(v, std::make_index_sequence<sizeof(V) / sizeof(T)>());
  }
  template <class V, class T, size_t... L>
  static V splat(T v, std::index_sequence<L...>) {
    return V{((void)L, v)...};
  }
  template <class V, size_t... L>
  static V iota(std::index_sequence<L...>) {
    return V{L...};
  }

  static constexpr size_t kBytes = std::is_arithmetic_v<I> ? 0 : sizeof(I);
  using V64 = typename LaneReg<uint64_t, kBytes>::type;
  using V32 = typename LaneReg<uint32_t, kBytes>::type;
  using VB = typename LaneReg<typename R::BitLane, kBytes>::type;
};

/// Two registers of S's float32 side (U, F) as one, op by op: kernels written over it
/// interleave two independent chains in program order, which the out-of-order core overlaps
/// better than one long chain after another (the AVX-512 fused normal: +6 % measured).
template <class S>
struct Twice {
  static constexpr uint64_t kLanes32 = 2 * S::kLanes32;
  struct F {
    typename S::F a, b;
  };
  struct U {
    typename S::U a, b;
  };
  static U set1_32(uint32_t v) { return {S::set1_32(v), S::set1_32(v)}; }
  static F set1_f(float v) { return {S::set1_f(v), S::set1_f(v)}; }
  static U add32(U x, U y) { return {S::add32(x.a, y.a), S::add32(x.b, y.b)}; }
  static U sub32(U x, U y) { return {S::sub32(x.a, y.a), S::sub32(x.b, y.b)}; }
  static U shl32(U x, int n) { return {S::shl32(x.a, n), S::shl32(x.b, n)}; }
  static U shr32(U x, int n) { return {S::shr32(x.a, n), S::shr32(x.b, n)}; }
  static U sra32(U x, int n) { return {S::sra32(x.a, n), S::sra32(x.b, n)}; }
  static U as_u(F x) { return {S::as_u(x.a), S::as_u(x.b)}; }
  static F as_f(U x) { return {S::as_f(x.a), S::as_f(x.b)}; }
  static F cvt(U x) { return {S::cvt(x.a), S::cvt(x.b)}; }
  static F add(F x, F y) { return {S::add(x.a, y.a), S::add(x.b, y.b)}; }
  static F sub(F x, F y) { return {S::sub(x.a, y.a), S::sub(x.b, y.b)}; }
  static F mul(F x, F y) { return {S::mul(x.a, y.a), S::mul(x.b, y.b)}; }
  static F fma(F x, F y, F z) { return {S::fma(x.a, y.a, z.a), S::fma(x.b, y.b, z.b)}; }
  static F fms(F x, F y, F z) { return {S::fms(x.a, y.a, z.a), S::fms(x.b, y.b, z.b)}; }
  static F fnma(F x, F y, F z) { return {S::fnma(x.a, y.a, z.a), S::fnma(x.b, y.b, z.b)}; }
  static F sqrt(F x) { return {S::sqrt(x.a), S::sqrt(x.b)}; }
  static F lookup16(const float* t, U i) { return {S::lookup16(t, i.a), S::lookup16(t, i.b)}; }
  static F select_odd(U q, F x, F y) {
    return {S::select_odd(q.a, x.a, y.a), S::select_odd(q.b, x.b, y.b)};
  }
  template <int B>
  static F neg_if_bit(U q, F x) {
    return {S::template neg_if_bit<B>(q.a, x.a), S::template neg_if_bit<B>(q.b, x.b)};
  }
  static_assert(2 * S::kLanes32 <= 32, "the lane mask is 32 bits");
  static uint32_t neq_mask(F x, F y) {
    return S::neq_mask(x.a, y.a) | S::neq_mask(x.b, y.b) << S::kLanes32;
  }
  template <class Fn>
  static F fix_lanes(F v, U w, uint32_t mask, Fn fn) {
    const uint32_t lo = mask & ((1u << S::kLanes32) - 1), hi = mask >> S::kLanes32;
    if (lo != 0) v.a = S::fix_lanes(v.a, w.a, lo, fn);
    if (hi != 0) v.b = S::fix_lanes(v.b, w.b, hi, fn);
    return v;
  }
};

}  // namespace simd
}  // namespace
}  // namespace mpsrt::cpu
