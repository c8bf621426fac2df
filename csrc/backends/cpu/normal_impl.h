// Box-Muller for the cpu backend's normal fills, written once over small SIMD layers and
// instantiated by every kernel table (scalar, AVX2, AVX-512), so all tables give the same bits.
// Each translation unit is compiled with -ffp-contract=off; the algorithms use only operations
// that round the same way on every ISA: add, sub, mul, fused multiply-add (written out: the
// scalar table calls fma / fmaf), sqrt, int <-> float conversions, integer bit operations and
// table lookups (no libm).
//
// The definition (mpsrt/philox.h) for the word pair (w0, w1):
//   u1 = ((w0 >> 8) + 1) * 2^-24 in (0, 1], u2 = (w1 >> 8) * 2^-24 in [0, 1)
//   float32:  l = logf(u1), r = sqrtf(-2 l), t = float(2 pi) * u2 (rounded to float),
//             z0 = r * cosf(t), z1 = r * sinf(t), every step rounded to float;
//   float64:  the same in double with t = 2 pi * u2 (rounded to double).
// float32 (box_muller_f32, below) evaluates logf, cosf and sinf in float as an exact head plus
// a tail carried with its rounding errors: the correctly rounded results but within about a
// thousandth of an ulp of a rounding tie (cosf / sinf) -- logf near a tie is recomputed in
// double. Measured over 10^8 values: 0.21 % differ from the correctly rounded steps, by at
// most 2 ulp. float64 (box_muller) is accurate to a few double ulps.
//
// log: u1 = 2^(E - 24) m with m in [0.6875, 1.375), m = (1 + r) / c_i for the table entry i of
// m's subinterval (16 subintervals; c_i has 20 bits), and
// log u1 = (E - 24) ln 2 + log(1 / c_i) + log1p(r), |r| <= 1/16. The subintervals next to 1
// use c = 1, so log u1 near 0 (u1 near 1) is log1p(r) itself, with no cancellation.
// sin / cos: t = q pi/2 + y with q in 0..4, y = t - q pi/2 exactly enough (pi/2 in three
// parts), |y| <= pi/4; then sin y = y + y^3 S(y^2), cos y = 1 - y^2/2 + y^4 C(y^2), swapped and
// negated by quadrant. The polynomials are least-squares fits of relative error on Chebyshev
// nodes; their errors are noted with them.
//
// Both are written over an instruction set's simd.h layer S: box_muller on its doubles (D,
// S::kLanes64 lanes), box_muller_f32 on its floats (F, S::kLanes32 lanes).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backends/cpu/simd.h"

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
constexpr double kLn2Hi = 0x1.62e42fefa3800p-1;      // 42 bits: (E - 24) * kLn2Hi is exact
constexpr double kLn2Lo = 0x1.ef35793c76730p-45;

// log1p(r) = r - r^2/2 + r^3 P(r) on [-1/32, 1/16]: P of degree 7 (2^-53.9 relative).
constexpr double kLogP64[8] = {0.3333333333333464,  -0.2500000000011858, 0.19999999978950267,
                               -0.1666666585610876, 0.14285760165535674, -0.1250166893878837,
                               0.11093624224412134, -0.08973284087495456};
// sin y = y + y^3 S(y^2), cos y = 1 - y^2/2 + y^4 C(y^2) on |y| <= pi/4: degree 5 (2^-55.5,
// 2^-59.4 relative).
constexpr double kSin64[6] = {-0.16666666666666666,   0.00833333333333095,
                              -0.000198412698367595,  2.7557316102857303e-06,
                              -2.505113187899583e-08, 1.5918130011256505e-10};
constexpr double kCos64[6] = {0.041666666666666664,   -0.0013888888888887398,
                              2.4801587298765486e-05, -2.7557317271584744e-07,
                              2.087614622937364e-09,  -1.1382629033882303e-11};

// pi/2 = kPio2A + kPio2B + kPio2C (A and B 32 bits, so q * A and q * B are exact for q <= 4).
constexpr double kPio2A = 0x1.921fb54400000p+0;
constexpr double kPio2B = 0x1.0b4611a600000p-34;
constexpr double kPio2C = 0x1.3198a2e037073p-69;
constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1;
constexpr double kRoundMagic = 0x1.8p52;  // x + 1.5 * 2^52 - 1.5 * 2^52: x rounded to even
constexpr uint64_t kI2dMagic = 0x4330000000000000ULL;  // bits of 2^52
constexpr double kTwoPi = 0x1.921fb54442d18p+2;        // double(2 pi)

/// c[0] + x (c[1] + x (...)) by fused multiply-adds, on S's doubles or floats (as c's).
template <class S, class R, class T, size_t N>
MPSRT_SIMD_INLINE R horner(R x, const T (&c)[N]) {
  const auto k = [](T v) {
    if constexpr (sizeof(T) == 4) {
      return S::set1_f(v);
    } else {
      return S::set1_d(v);
    }
  };
  R s = k(c[N - 1]);
  for (size_t i = N - 1; i-- > 0;) s = S::fma(s, x, k(c[i]));
  return s;
}

/// float64: mean + std * Z for the `pairs` word pairs at w, Z the standard normals, in memory
/// order: out[2i] from the cosine, out[2i + 1] from the sine. pairs is rounded up to a
/// multiple of S::kLanes64: w must hold that many pairs and out twice as many values.
template <class S>
void box_muller(const uint32_t* w, double* out, uint64_t pairs, double mean, double sd) {
  using D = typename S::D;
  using I = typename S::I;
  for (uint64_t p = 0; p < pairs; p += S::kLanes64, w += 2 * S::kLanes64, out += 2 * S::kLanes64) {
    const I x = S::load_pairs(w);
    // ---- log u1 (u1 * 2^24 = d = (w0 >> 8) + 1, 1 .. 2^24)
    const I k1 = S::shr64(S::shl64(x, 32), 40);                                             // d - 1
    const D d = S::sub(S::as_d(S::or_(k1, S::set1_64(kI2dMagic))), S::set1_d(0x1p52 - 1));  // exact
    const I ix = S::as_i(d);
    const I tmp = S::sub64(ix, S::set1_64(kLogOff));
    const I e = S::shr64(tmp, 52);  // 0..24
    const D m = S::as_d(S::sub64(ix, S::shl64(e, 52)));
    const I idx = S::shr64(tmp, 48);  // the lookups take the low 4 bits
    const D ed =
        S::sub(S::as_d(S::or_(e, S::set1_64(kI2dMagic))), S::set1_d(0x1p52 + 24));  // E - 24
    const D rr = S::sub(S::mul(m, S::lookup16(kInvC, idx)), S::set1_d(1.0));        // exact
    const D r2 = S::mul(rr, rr);
    // ---- t = 2 pi u2 and its quadrant q: t = q pi/2 + y, |y| <= pi/4
    const I j = S::shr64(x, 40);  // w1 >> 8
    const D jd = S::sub(S::as_d(S::or_(j, S::set1_64(kI2dMagic))), S::set1_d(0x1p52));
    const D t = S::mul(S::set1_d(kTwoPi), S::mul(jd, S::set1_d(0x1p-24)));
    const D qs = S::add(S::mul(t, S::set1_d(kTwoOverPi)), S::set1_d(kRoundMagic));
    const I q = S::as_i(qs);  // low bits: the quadrant
    const D qd = S::sub(qs, S::set1_d(kRoundMagic));
    D y = S::sub(t, S::mul(qd, S::set1_d(kPio2A)));
    y = S::sub(S::sub(y, S::mul(qd, S::set1_d(kPio2B))), S::mul(qd, S::set1_d(kPio2C)));
    const D zz = S::mul(y, y);
    const D hz = S::mul(zz, S::set1_d(0.5));
    const D one_hz = S::sub(S::set1_d(1.0), hz);
    const D l1p = S::add(rr, S::mul(r2, S::fma(rr, horner<S>(rr, kLogP64), S::set1_d(-0.5))));
    const D hi = S::fma(ed, S::set1_d(kLn2Hi), S::lookup16(kLogC, idx));
    const D l = S::add(hi, S::fma(ed, S::set1_d(kLn2Lo), l1p));
    const D sn = S::fma(S::mul(y, zz), horner<S>(zz, kSin64), y);
    // 1 - y^2/2 + ..., with the rounding error of 1 - y^2/2 added back
    const D cs = S::add(one_hz, S::fma(S::mul(zz, zz), horner<S>(zz, kCos64),
                                       S::sub(S::sub(S::set1_d(1.0), one_hz), hz)));
    // Quadrant q: cos t = (cs, -sn, -cs, sn)[q % 4], sin t = (sn, cs, -sn, -cs)[q % 4].
    const I sign_s = S::shl64(S::and_(q, S::set1_64(2)), 62);
    const I sign_c = S::shl64(S::and_(S::add64(q, S::set1_64(1)), S::set1_64(2)), 62);
    const D c = S::as_d(S::xor_(S::as_i(S::select_odd(q, cs, sn)), sign_c));
    const D s = S::as_d(S::xor_(S::as_i(S::select_odd(q, sn, cs)), sign_s));
    const D rad = S::sqrt(S::mul(l, S::set1_d(-2.0)));
    const D sdv = S::set1_d(sd), mv = S::set1_d(mean);
    const D z0 = S::mul(rad, c), z1 = S::mul(rad, s);
    S::store_pairs(out, S::add(mv, S::mul(sdv, z0)), S::add(mv, S::mul(sdv, z1)));
  }
}

/// logf(u1) for u1 = ((w0 >> 8) + 1) 2^-24: box_muller's float64 logarithm (one lane), rounded
/// to float. The float32 path's fallback for the rare lanes near a rounding tie.
inline float logf_u1(uint32_t w0) {
  const uint64_t k1 = w0 >> 8;  // d - 1
  double d;
  uint64_t ix = k1 | kI2dMagic;
  std::memcpy(&d, &ix, 8);
  d -= 0x1p52 - 1;  // exact
  std::memcpy(&ix, &d, 8);
  const uint64_t tmp = ix - kLogOff;
  const uint64_t e = tmp >> 52;
  const uint64_t mbits = ix - (e << 52);
  double m;
  std::memcpy(&m, &mbits, 8);
  const unsigned idx = static_cast<unsigned>(tmp >> 48) & 15;
  const double ed = static_cast<double>(static_cast<int64_t>(e) - 24);
  const double rr = m * kInvC[idx] - 1.0;  // exact
  const double r2 = rr * rr;
  double p = kLogP64[7];
  for (int i = 6; i >= 0; --i) p = std::fma(p, rr, kLogP64[i]);
  const double l1p = rr + r2 * std::fma(rr, p, -0.5);
  const double hi = std::fma(ed, kLn2Hi, kLogC[idx]);
  return static_cast<float>(hi + std::fma(ed, kLn2Lo, l1p));
}

// ---- float32: the same definition, evaluated in float with fused multiply-adds on
// S::kLanes32 floats (twice the lanes of the double path). logf, cosf and sinf come out as
// their correctly rounded values but for inputs within about a thousandth of an ulp of a
// rounding tie: each is a float head that is exact (a table value, 1, or the reduced
// argument) plus a small tail carried with its rounding errors, added once at the end.
//
// log: u1 = 2^e m (e = -24 .. 0; m in [0.6875, 1.375) and its 16 subintervals as the double
// path's; the code holds m 2^24 and the table 2^-24 / c_i, whose product is the same float);
// log u1 = [e ln2_hi + log(1/c_i)_hi] + r + tail, with ln2_hi and the table's heads
// multiples of 2^-18 (so the bracket is exact in float), r = m / c_i - 1 as p - 1 + p_lo
// (p = m * (1 / c_i) rounded, p_lo its exact error) and tail = p_lo (1 - r) + lows
// - r^2/2 + r^3 P(r).
// sin / cos: t = float(2 pi) u2 rounded to float (the definition's t), q = round(u2 4),
// y = t - q pi/2 as yh + yl (pi/2 in three parts: q P1 exact, q P2's rounding error and
// q P3 in yl);
// cos y = [1 - y^2/2]_h + ((1 - y^2/2)_err + y^4 C(y^2) - z_lo/2 - sin(y) yl),
// sin y = [yh - yh^3/6]_h + (its error + y^5 S(y^2) + cos(y) yl), z = yh^2 = z + z_lo.
// 2^-24 / c_i: the float path's m is 2^24 times the double path's (see bm_f32).
alignas(64) constexpr float kInvCf[16] = {
    0x1.6c16cp-24f, 0x1.5c988p-24f, 0x1.4e5e0p-24f, 0x1.41414p-24f, 0x1.3521cp-24f, 0x1.29e42p-24f,
    0x1.1f704p-24f, 0x1.15b1ep-24f, 0x1.0c972p-24f, 0x1p-24f,       0x1p-24f,       0x1.d41d4p-25f,
    0x1.bacfap-25f, 0x1.a41a4p-25f, 0x1.8f9c2p-25f, 0x1.7d060p-25f,
};
// log(1 / c_i) = -log(kInvCf[i]) = head (a multiple of 2^-18) + tail.
alignas(64) constexpr float kLogCHi[16] = {
    -0x1.68acp-2f, -0x1.3c25p-2f, -0x1.1179p-2f, -0x1.d104p-3f, -0x1.823cp-3f, -0x1.3660p-3f,
    -0x1.da74p-4f, -0x1.4d30p-4f, -0x1.8948p-5f, 0.0f,          0.0f,          0x1.6f0cp-4f,
    0x1.2954p-3f,  0x1.9526p-3f,  0x1.fb92p-3f,  0x1.2e8ep-2f,
};
alignas(64) constexpr float kLogCLo[16] = {
    -0x1.ffa71ap-20f,
    -0x1.f73332p-22f,
    0x1.beec12p-21f,
    0x1.11b354p-20f,
    0x1.46aba2p-21f,
    -0x1.380ab8p-22f,
    0x1.f9c7bep-20f,
    -0x1.7ba40ep-21f,
    -0x1.f8a4fap-20f,
    0.0f,
    0.0f,
    0x1.38ae56p-20f,
    0x1.d704p-20f,
    -0x1.38c2eap-21f,
    -0x1.3a5438p-20f,
    0x1.75c24ap-23f,
};
constexpr float kLn2HiF = 0x1.62e4p-1f;     // ln 2 to a multiple of 2^-18
constexpr float kLn2LoF = 0x1.7f7d1cp-20f;  // ln 2 - kLn2HiF
// log1p(r) = r - r^2/2 + r^3 P(r): P of degree 3, a least-squares fit of relative error on
// Chebyshev nodes of [-0.0333, 0.0626], 2^-21.7 relative with these float coefficients.
constexpr float kLogPf[4] = {0x1.555554p-2f, -0x1.0001f6p-2f, 0x1.99e4p-3f, -0x1.452bf6p-3f};
// pi/2 = kP1 + kP2 + kP3 (kP1, kP2 21 bits: q kP1 and q kP2 are exact for q <= 4).
constexpr float kP1 = 0x1.921fbp+0f;
constexpr float kP2 = 0x1.5110bp-22f;
constexpr float kP3 = 0x1.184698p-44f;
constexpr float kTwoPiOver2p24 = 0x1.921fb6p-22f;  // float(2 pi) 2^-24, exact
constexpr float kSixthHi = -0x1.555556p-3f;        // -1/6 = kSixthHi + kSixthLo
constexpr float kSixthLo = 0x1.555556p-28f;
// sin y = y + y^3 (-1/6 + y^2 S(y^2)), cos y = 1 - y^2/2 + y^4 C(y^2) on |y| <= pi/4, fitted as
// kLogPf: S of degree 2 (2^-24.0 relative; its term is at most 2^-8.3 of sin y), C of degree 3
// (2^-25.0; its term is at most 2^-5.6 of cos y).
constexpr float kSinS[3] = {0x1.11111p-7f, -0x1.a01722p-13f, 0x1.6ec3acp-19f};
constexpr float kCosC[4] = {0x1.555556p-5f, -0x1.6c16cp-10f, 0x1.a015cp-16f, -0x1.2522c6p-22f};

/// logf(u1) for u1 = ((w0 >> 8) + 1) 2^-24 per lane (see above): correctly rounded but for a
/// rounding tie of the double logarithm.
template <class S>
MPSRT_SIMD_INLINE typename S::F log_u1_f32(typename S::U w0) {
  using F = typename S::F;
  using U = typename S::U;
  const U k = S::add32(S::shr32(w0, 8), S::set1_32(1));  // u1 2^24: 1 .. 2^24
  const U ix = S::as_u(S::cvt(k));                       // exact
  const U tmp = S::sub32(ix, S::set1_32(0x4b300000));    // bits of 0.6875f 2^24
  const U e = S::sra32(tmp, 23);                         // -24 .. 0: u1 = 2^e m
  // m 2^24 (its exponent field moved by 24) against the table's 2^-24 / c_i: the same product
  const F m = S::as_f(S::sub32(ix, S::shl32(e, 23)));
  const U idx = S::shr32(tmp, 19);  // the lookups take the low 4 bits
  const F ed = S::cvt(e);
  const F invc = S::lookup16(kInvCf, idx);
  const F pr = S::mul(m, invc);
  const F pr_lo = S::fms(m, invc, pr);      // exact
  const F r = S::sub(pr, S::set1_f(1.0f));  // exact (pr in [0.96, 1.04])
  const F head = S::fma(ed, S::set1_f(kLn2HiF), S::lookup16(kLogCHi, idx));  // exact
  const F b = S::add(head, r);
  const F b_err = S::add(S::sub(head, b), r);  // exact: head is 0 or larger than r
  const F r2 = S::mul(r, r);
  const F h2 = S::mul(r2, S::set1_f(-0.5f));  // exact
  const F b2 = S::add(b, h2);
  const F b2_err = S::add(S::sub(b, b2), h2);  // exact: |b| > |h2|
  F tl = S::fma(S::mul(r2, r), horner<S>(r, kLogPf),
                S::fma(S::fms(r, r, r2), S::set1_f(-0.5f), b2_err));
  tl = S::add(tl, S::fma(ed, S::set1_f(kLn2LoF), S::lookup16(kLogCLo, idx)));
  tl = S::add(tl, S::fnma(pr_lo, r, pr_lo));
  const F lt = S::add(tl, b_err);
  F l = S::add(b2, lt);  // logf(u1)
  // l's rounding error, exactly (|b2| > |lt|). Within 2^-11 of half the gap to l's neighbour
  // on its side, the tail's own error (a few 2^-16 ulp) could decide the rounding: such lanes
  // (about 0.1 %) take the float64 logarithm, rounded. They are the lanes where l + l_err
  // (1 + 2^-11) rounds to another float. So l is logf(u1) correctly rounded but for a rounding
  // tie of the double logarithm (2^-29 ulp), and a value whose cosine or sine is an ulp off is
  // still within 2 ulp of the correctly rounded steps.
  const F l_err = S::sub(lt, S::sub(l, b2));
  if (const uint32_t near = S::neq_mask(S::fma(l_err, S::set1_f(1.0f + 0x1p-11f), l), l)) {
    l = S::fix_lanes(l, w0, near, [](uint32_t w) { return logf_u1(w); });
  }
  return l;
}

/// cos t and sin t for t = float(2 pi) u2, u2 = (w1 >> 8) 2^-24 per lane (see above).
template <class S>
MPSRT_SIMD_INLINE void sincos_u2_f32(typename S::U w1, typename S::F& c, typename S::F& s) {
  using F = typename S::F;
  using U = typename S::U;
  const U j = S::shr32(w1, 8);  // u2 2^24
  const F t = S::mul(S::cvt(j), S::set1_f(kTwoPiOver2p24));
  // t 2/pi is j / 2^22 to 3e-8 relative: q rounds that in integers (a quadrant boundary off by
  // that much leaves |y| within pi/4 + 1e-7, where the polynomials still hold).
  const U q = S::shr32(S::add32(j, S::set1_32(1u << 21)), 22);
  const F qf = S::cvt(q);
  const F y1 = S::fnma(qf, S::set1_f(kP1), t);  // exact
  const F yh = S::fnma(qf, S::set1_f(kP2), y1);
  // y1 - yh is exact (yh's ulp is at most y1's and the difference is about q kP2), so the
  // fused step gives yh's rounding error exactly.
  const F yl = S::fnma(qf, S::set1_f(kP3), S::fnma(qf, S::set1_f(kP2), S::sub(y1, yh)));
  const F z = S::mul(yh, yh);
  const F z_lo = S::fms(yh, yh, z);
  // y^3 = z yh + (z_lo yh), times -1/6 with its rounding error kept
  const F y3 = S::mul(z, yh);
  const F y3_lo = S::fms(z, yh, y3);
  const F s6 = S::mul(y3, S::set1_f(kSixthHi));
  const F s6_lo = S::fms(y3, S::set1_f(kSixthHi), s6);
  const F hz = S::mul(z, S::set1_f(0.5f));  // exact
  // cos y = (1 - hz) + its error + y^4 C - z_lo/2 - sin(y) yl
  const F w1c = S::sub(S::set1_f(1.0f), hz);
  const F w1c_err = S::sub(S::sub(S::set1_f(1.0f), w1c), hz);  // exact
  F ct = S::fma(S::mul(z, z), horner<S>(z, kCosC), w1c_err);
  ct = S::fma(S::set1_f(-0.5f), z_lo, S::fnma(S::add(yh, s6), yl, ct));
  const F cs = S::add(w1c, ct);
  // sin y = (yh + s6) + its error + s6's errors + y^5 S + cos(y) yl
  F st = S::fma(S::mul(y3, z), horner<S>(z, kSinS), S::fnma(hz, yl, yl));
  st = S::add(st, S::fma(y3, S::set1_f(kSixthLo), s6_lo));
  st = S::fma(S::fma(z_lo, yh, y3_lo), S::set1_f(kSixthHi), st);
  const F bs = S::add(yh, s6);
  const F bs_err = S::add(S::sub(yh, bs), s6);  // exact: |yh| > |s6|
  const F sn = S::add(bs, S::add(st, bs_err));
  // Quadrant q: cos t = (cs, -sn, -cs, sn)[q % 4], sin t = (sn, cs, -sn, -cs)[q % 4].
  c = S::template neg_if_bit<1>(S::add32(q, S::set1_32(1)), S::select_odd(q, cs, sn));
  s = S::template neg_if_bit<1>(q, S::select_odd(q, sn, cs));
}

/// The float32 normals of the word pairs (w0[i], w1[i]): z0 from the cosine, z1 from the
/// sine, as mean + sd * Z (kAffine) or 0 + Z.
template <class S, bool kAffine>
MPSRT_SIMD_INLINE void bm_f32(typename S::U w0, typename S::U w1, typename S::F mv,
                              typename S::F sdv, typename S::F& out0, typename S::F& out1) {
  const typename S::F rad = S::sqrt(S::mul(log_u1_f32<S>(w0), S::set1_f(-2.0f)));
  typename S::F c, s;
  sincos_u2_f32<S>(w1, c, s);
  if constexpr (kAffine) {
    out0 = S::add(mv, S::mul(sdv, S::mul(rad, c)));
    out1 = S::add(mv, S::mul(sdv, S::mul(rad, s)));
  } else {  // 0 + 1 z: the same bits as the affine form (rad c + 0 in one rounding: -0 is +0)
    out0 = S::fma(rad, c, S::set1_f(0.0f));
    out1 = S::fma(rad, s, S::set1_f(0.0f));
  }
}

template <class S, bool kAffine>
void box_muller_f32_loop(const uint32_t* w, float* out, uint64_t pairs, float mean, float sd) {
  const typename S::F mv = S::set1_f(mean), sdv = S::set1_f(sd);
  for (uint64_t p = 0; p < pairs; p += S::kLanes32, w += 2 * S::kLanes32, out += 2 * S::kLanes32) {
    typename S::U w0, w1;
    S::load_pairs(w, w0, w1);
    typename S::F z0, z1;
    bm_f32<S, kAffine>(w0, w1, mv, sdv, z0, z1);
    S::store_pairs(out, z0, z1);
  }
}

/// float32 Box-Muller (see above) for `pairs` word pairs, rounded up to S::kLanes32: as
/// box_muller's contract, out[2i] from the cosine, out[2i + 1] from the sine.
template <class S>
void box_muller_f32(const uint32_t* w, float* out, uint64_t pairs, float mean, float sd) {
  if (mean == 0.0f && sd == 1.0f) {
    box_muller_f32_loop<S, false>(w, out, pairs, mean, sd);
  } else {
    box_muller_f32_loop<S, true>(w, out, pairs, mean, sd);
  }
}

/// The normal members of a kernel table (random_impl.h's G) on S: normal_f32 / normal_f64
/// write whole multiples of kNormalLanesF32 / kNormalLanesF64 pairs.
template <class S>
struct Normal {
  static constexpr uint64_t kNormalLanesF32 = S::kLanes32;
  static constexpr uint64_t kNormalLanesF64 = S::kLanes64;
  static void normal_f32(const uint32_t* w, float* z, uint64_t pairs, float mean, float sd) {
    box_muller_f32<S>(w, z, pairs, mean, sd);
  }
  static void normal_f64(const uint32_t* w, double* z, uint64_t pairs, double mean, double sd) {
    box_muller<S>(w, z, pairs, mean, sd);
  }
};

}  // namespace nrm
}  // namespace
}  // namespace mpsrt::cpu
