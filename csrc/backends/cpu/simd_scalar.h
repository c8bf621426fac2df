// simd.h's layer with one lane of each type: the portable table (8-byte words for fill and
// copy, no streaming stores) and the scalar random table's Box-Muller. Its operations are the
// definitions the SIMD layers match lane by lane.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/simd.h"

namespace mpsrt::cpu {
namespace {
namespace simd {

struct ScalarRegs {
  using I = uint64_t;
  using U = uint32_t;
  using F = float;
  using D = double;
  using BitLane = uint64_t;  // unused: one lane
};

struct Scalar : Lanes<ScalarRegs> {
  static constexpr bool kHasStream = false;

  template <int M>
  static void store(void* p, I v) {  // every mode: a plain store
    std::memcpy(p, &v, sizeof v);
  }
  static void fence() {}

  static I shl64(I a, int n) { return a << n; }
  static I shr64(I a, int n) { return a >> n; }
  static U shl32(U a, int n) { return a << n; }
  static U shr32(U a, int n) { return a >> n; }
  // sra32: the sign bit fills in (two's complement, as GCC and Clang)
  static U sra32(U a, int n) { return static_cast<U>(static_cast<int32_t>(a) >> n); }
  static F cvt(U a) { return static_cast<float>(static_cast<int32_t>(a)); }
  static F fma(F a, F b, F c) { return std::fmaf(a, b, c); }
  static D fma(D a, D b, D c) { return std::fma(a, b, c); }
  static F fms(F a, F b, F c) { return std::fmaf(a, b, -c); }
  static F fnma(F a, F b, F c) { return std::fmaf(-a, b, c); }
  static F sqrt(F a) { return std::sqrt(a); }
  static D sqrt(D a) { return std::sqrt(a); }

  static F lookup16(const float* t, U i) { return t[i & 15]; }
  static D lookup16(const double* t, I i) { return t[i & 15]; }
  static F select_odd(U q, F a, F b) { return (q & 1) ? b : a; }
  static D select_odd(I q, D a, D b) { return (q & 1) ? b : a; }
  template <int B>
  static F neg_if_bit(U q, F x) {
    return as_f(as_u(x) ^ ((q >> B & 1u) << 31));
  }
  static uint32_t neq_mask(F a, F b) { return a != b ? 1u : 0u; }
  template <class Fn>
  static F fix_lanes(F, U w, uint32_t, Fn fn) {
    return fn(w);
  }

  static I load_pairs(const uint32_t* w) {
    return static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
  }
  static void load_pairs(const uint32_t* w, U& w0, U& w1) {
    w0 = w[0];
    w1 = w[1];
  }
  static void store_pairs(float* out, F z0, F z1) {
    out[0] = z0;
    out[1] = z1;
  }
  static void store_pairs(double* out, D z0, D z1) {
    out[0] = z0;
    out[1] = z1;
  }
};

}  // namespace simd
}  // namespace
}  // namespace mpsrt::cpu
