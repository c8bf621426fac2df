// Box-Muller for the cpu backend's normal fills, written once over a small SIMD layer V and
// instantiated by every kernel table (scalar, AVX2, AVX-512), so all tables give the same bits.
// Each translation unit is compiled with -ffp-contract=off and the algorithm uses only
// operations that round the same way on every ISA: add, sub, mul, sqrt, double <-> float
// conversions, integer bit operations and table lookups (no fused multiply-add, no libm).
//
// The definition (mpsrt/philox.h) for the word pair (w0, w1):
//   u1 = ((w0 >> 8) + 1) * 2^-24 in (0, 1], u2 = (w1 >> 8) * 2^-24 in [0, 1)
//   float32:  l = logf(u1), r = sqrtf(-2 l), t = float(2 pi) * u2 (rounded to float),
//             z0 = r * cosf(t), z1 = r * sinf(t), every step rounded to float;
//   float64:  the same in double with t = 2 pi * u2 (rounded to double).
// logf, cosf and sinf are evaluated in double to about 2^-42 relative and rounded to float, so
// they are the correctly rounded float results except within ~2^-18 ulp of a rounding tie;
// sqrtf is sqrt in double rounded to float (exact: double has more than 2 * 24 + 2 bits).
// float64's log, cos and sin are accurate to about one double ulp.
//
// log: u1 = 2^(E - 24) m with m in [0.6875, 1.375), m = (1 + r) / c_i for the table entry i of
// m's subinterval (16 subintervals; c_i has 20 bits, so m c_i - 1 is exact), and
// log u1 = (E - 24) ln 2 + log(1 / c_i) + log1p(r), |r| <= 1/16. The subintervals next to 1
// use c = 1, so log u1 near 0 (u1 near 1) is log1p(r) itself, with no cancellation.
// sin / cos: t = q pi/2 + y with q = round(t 2/pi) in 0..4, y = t - q pi/2 exactly enough
// (pi/2 in two parts for float32's 24-bit t, three for float64's), |y| <= pi/4; then
// sin y = y + y^3 S(y^2), cos y = 1 - y^2/2 + y^4 C(y^2), swapped and negated by quadrant.
// The polynomials are least-squares fits on Chebyshev nodes refined towards minimax (Lawson),
// in long double; their relative errors are noted with them.
//
// V provides (D: kLanes doubles, I: kLanes uint64 lanes):
//   load_pairs(const uint32_t* w)   lane i = w[2i] | w[2i + 1] << 32 (the pair's two words)
//   i64(x), f64(x)                  broadcast constants
//   and_, or_, xor_, add_i, sub_i, shl<N>, shr<N>(I)    integer lane operations
//   as_d(I), as_i(D)                bit casts
//   add, sub, mul, sqrt(D)          IEEE double operations, round to nearest
//   to_f32(D)                       round to float and back to double
//   F (kLanes floats), f32(x), to_f(D) (rounded), mul_f, add_f, sqrt_f(F)
//   lookup16(const double t[16], I) t[i & 15] per lane
//   select_odd(I q, D a, D b)       per lane: q odd ? b : a
//   store_f32(float* out, F z0, F z1), store_f64(double* out, D z0, D z1)
//                                   out[2i] = z0[i], out[2i + 1] = z1[i]
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpsrt::cpu {
namespace {
namespace nrm {

// 1 / c_i (20-bit values) and log(1 / c_i) of the 16 subintervals of m: [0.6875, 1) in steps of
// 1/32 (entries 0-9), [1, 1.375) in steps of 1/16 (entries 10-15); c_i = 1 / centre, except 1
// for the two subintervals around 1.
alignas(64) constexpr double kInvC[16] = {
    0x1.6c16c00000000p+0,
    0x1.5c98800000000p+0,
    0x1.4e5e000000000p+0,
    0x1.4141400000000p+0,
    0x1.3521c00000000p+0,
    0x1.29e4200000000p+0,
    0x1.1f70400000000p+0,
    0x1.15b1e00000000p+0,
    0x1.0c97200000000p+0,
    1.0,
    1.0,
    0x1.d41d400000000p-1,
    0x1.bacfa00000000p-1,
    0x1.a41a400000000p-1,
    0x1.8f9c200000000p-1,
    0x1.7d06000000000p-1,
};
alignas(64) constexpr double kLogC[16] = {
    -0x1.68ac7fe9c69f4p-2,
    -0x1.3c251f7333104p-2,
    -0x1.1178c8227dc7cp-2,
    -0x1.d103772655e3bp-3,
    -0x1.823bae5517982p-3,
    -0x1.3660270156f06p-3,
    -0x1.da72063842e22p-4,
    -0x1.4d30bdd206f8cp-4,
    -0x1.894bf149f4503p-5,
    0.0,
    0.0,
    0x1.6f0d38ae56bccp-4,
    0x1.2954eb8200733p-3,
    0x1.9525b1cf456f4p-3,
    0x1.fb9162d5e433bp-3,
    0x1.2e8e0bae12531p-2,
};
constexpr uint64_t kLogOff = 0x3fe6000000000000ULL;  // bits of 0.6875
constexpr double kLn2 = 0x1.62e42fefa39efp-1;
constexpr double kLn2Hi = 0x1.62e42fefa3800p-1;  // 42 bits: (E - 24) * kLn2Hi is exact
constexpr double kLn2Lo = 0x1.ef35793c76730p-45;

// log1p(r) = r - r^2/2 + r^3 P(r) on [-1/32, 1/16]: P of degree 5 (float32: 2^-42.8 relative)
// and 7 (float64: 2^-53.9).
constexpr double kLogP32[6] = {0.33333333331939025,  -0.2499999958498615, 0.20000011214764057,
                               -0.16668003511521595, 0.14283939461316053, -0.11547077940887192};
constexpr double kLogP64[8] = {0.3333333333333464,  -0.2500000000011858, 0.19999999978950267,
                               -0.1666666585610876, 0.14285760165535674, -0.1250166893878837,
                               0.11093624224412134, -0.08973284087495456};
// sin y = y + y^3 S(y^2), cos y = 1 - y^2/2 + y^4 C(y^2) on |y| <= pi/4. float32: degree 4
// (sin 2^-45.6, cos 2^-49.7 relative); float64: degree 5 (2^-55.5, 2^-59.4).
constexpr double kSin32[5] = {-0.16666666666663887, 0.008333333331080441, -0.00019841266917827236,
                              2.755599110992783e-06, -2.4805647794270683e-08};
constexpr double kCos32[5] = {0.04166666666666468, -0.0013888888887278025, 2.480158521143843e-05,
                              -2.7556369784692763e-07, 2.0700605514115737e-09};
constexpr double kSin64[6] = {-0.16666666666666666,   0.00833333333333095,
                              -0.000198412698367595,  2.7557316102857303e-06,
                              -2.505113187899583e-08, 1.5918130011256505e-10};
constexpr double kCos64[6] = {0.041666666666666664,   -0.0013888888888887398,
                              2.4801587298765486e-05, -2.7557317271584744e-07,
                              2.087614622937364e-09,  -1.1382629033882303e-11};

// pi/2 = kPio2A + kPio2B + kPio2C (A and B 32 bits, so q * A and q * B are exact for q <= 4);
// float32's reduction uses A and kPio2BC = B + C rounded.
constexpr double kPio2A = 0x1.921fb54400000p+0;
constexpr double kPio2B = 0x1.0b4611a600000p-34;
constexpr double kPio2C = 0x1.3198a2e037073p-69;
constexpr double kPio2BC = 0x1.0b4611a626331p-34;
constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1;
constexpr double kRoundMagic = 0x1.8p52;  // x + 1.5 * 2^52 - 1.5 * 2^52: x rounded to even
constexpr uint64_t kI2dMagic = 0x4330000000000000ULL;  // bits of 2^52
constexpr double kTwoPiF = 0x1.921fb6p+2;              // float(2 pi)
constexpr double kTwoPi = 0x1.921fb54442d18p+2;        // double(2 pi)

template <class V, size_t N>
inline typename V::D horner(typename V::D x, const double (&c)[N]) {
  typename V::D s = V::f64(c[N - 1]);
  for (size_t i = N - 1; i-- > 0;) s = V::add(V::mul(s, x), V::f64(c[i]));
  return s;
}

/// mean + std * Z for the `pairs` word pairs at w, Z the standard normals, in memory order:
/// out[2i] from the cosine, out[2i + 1] from the sine. pairs is rounded up to a multiple of
/// V::kLanes: w must hold that many pairs and out twice as many values. F32: float32's
/// definition (T float), otherwise float64's (T double).
template <class V, bool F32, class T>
void box_muller(const uint32_t* w, T* out, uint64_t pairs, T mean, T sd) {
  using D = typename V::D;
  using I = typename V::I;
  for (uint64_t p = 0; p < pairs; p += V::kLanes, w += 2 * V::kLanes, out += 2 * V::kLanes) {
    const I x = V::load_pairs(w);
    // ---- log u1 (u1 * 2^24 = d = (w0 >> 8) + 1, 1 .. 2^24)
    const I k1 = V::template shr<40>(V::template shl<32>(x));                        // d - 1
    const D d = V::sub(V::as_d(V::or_(k1, V::i64(kI2dMagic))), V::f64(0x1p52 - 1));  // exact
    const I ix = V::as_i(d);
    const I tmp = V::sub_i(ix, V::i64(kLogOff));
    const I e = V::template shr<52>(tmp);  // 0..24
    const D m = V::as_d(V::sub_i(ix, V::template shl<52>(e)));
    const I idx = V::template shr<48>(tmp);  // the lookups take the low 4 bits
    const D ed = V::sub(V::as_d(V::or_(e, V::i64(kI2dMagic))), V::f64(0x1p52 + 24));  // E - 24
    const D rr = V::sub(V::mul(m, V::lookup16(kInvC, idx)), V::f64(1.0));             // exact
    const D r2 = V::mul(rr, rr);
    // ---- t = 2 pi u2 and its quadrant q: t = q pi/2 + y, |y| <= pi/4
    const I j = V::template shr<40>(x);  // w1 >> 8
    const D jd = V::sub(V::as_d(V::or_(j, V::i64(kI2dMagic))), V::f64(0x1p52));
    D t;
    if constexpr (F32) {
      t = V::to_f32(V::mul(jd, V::f64(kTwoPiF * 0x1p-24)));  // exact product, rounded once
    } else {
      t = V::mul(V::f64(kTwoPi), V::mul(jd, V::f64(0x1p-24)));
    }
    const D qs = V::add(V::mul(t, V::f64(kTwoOverPi)), V::f64(kRoundMagic));
    const I q = V::as_i(qs);  // low bits: the quadrant
    const D qd = V::sub(qs, V::f64(kRoundMagic));
    D y = V::sub(t, V::mul(qd, V::f64(kPio2A)));
    if constexpr (F32) {
      y = V::sub(y, V::mul(qd, V::f64(kPio2BC)));
    } else {
      y = V::sub(V::sub(y, V::mul(qd, V::f64(kPio2B))), V::mul(qd, V::f64(kPio2C)));
    }
    const D zz = V::mul(y, y);
    const D hz = V::mul(zz, V::f64(0.5));
    const D one_hz = V::sub(V::f64(1.0), hz);
    D l, sn, cs;
    if constexpr (F32) {
      const D l1p =
          V::add(rr, V::mul(r2, V::add(V::f64(-0.5), V::mul(rr, horner<V>(rr, kLogP32)))));
      l = V::add(V::mul(ed, V::f64(kLn2)), V::add(V::lookup16(kLogC, idx), l1p));
      sn = V::add(y, V::mul(V::mul(y, zz), horner<V>(zz, kSin32)));
      cs = V::add(one_hz, V::mul(V::mul(zz, zz), horner<V>(zz, kCos32)));
    } else {
      const D l1p =
          V::add(rr, V::mul(r2, V::add(V::f64(-0.5), V::mul(rr, horner<V>(rr, kLogP64)))));
      const D hi = V::add(V::mul(ed, V::f64(kLn2Hi)), V::lookup16(kLogC, idx));
      l = V::add(hi, V::add(l1p, V::mul(ed, V::f64(kLn2Lo))));
      sn = V::add(y, V::mul(V::mul(y, zz), horner<V>(zz, kSin64)));
      // 1 - y^2/2 + ..., with the rounding error of 1 - y^2/2 added back
      cs = V::add(one_hz, V::add(V::sub(V::sub(V::f64(1.0), one_hz), hz),
                                 V::mul(V::mul(zz, zz), horner<V>(zz, kCos64))));
    }
    // Quadrant q: cos t = (cs, -sn, -cs, sn)[q % 4], sin t = (sn, cs, -sn, -cs)[q % 4].
    const I sign_s = V::template shl<62>(V::and_(q, V::i64(2)));
    const I sign_c = V::template shl<62>(V::and_(V::add_i(q, V::i64(1)), V::i64(2)));
    const D c = V::as_d(V::xor_(V::as_i(V::select_odd(q, cs, sn)), sign_c));
    const D s = V::as_d(V::xor_(V::as_i(V::select_odd(q, sn, cs)), sign_s));
    if constexpr (F32) {
      // In float from here: logf, cosf and sinf rounded once, then the definition's steps.
      using F = typename V::F;
      const F rad = V::sqrt_f(V::mul_f(V::to_f(l), V::f32(-2.0f)));
      const F sdv = V::f32(sd), mv = V::f32(mean);
      const F z0 = V::mul_f(rad, V::to_f(c)), z1 = V::mul_f(rad, V::to_f(s));
      V::store_f32(out, V::add_f(mv, V::mul_f(sdv, z0)), V::add_f(mv, V::mul_f(sdv, z1)));
    } else {
      const D rad = V::sqrt(V::mul(l, V::f64(-2.0)));
      const D sdv = V::f64(sd), mv = V::f64(mean);
      const D z0 = V::mul(rad, c), z1 = V::mul(rad, s);
      V::store_f64(out, V::add(mv, V::mul(sdv, z0)), V::add(mv, V::mul(sdv, z1)));
    }
  }
}

}  // namespace nrm
}  // namespace
}  // namespace mpsrt::cpu
