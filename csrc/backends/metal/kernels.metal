// Kernels of the metal backend in Metal Shading Language: fill, unaligned copy and random fills
// (mpsrt/philox.h's stream definition). Compiled at run time from this text, which the build
// embeds into the library (metal_kernels.mm), with fast math off.
//
// Random fills reproduce the cpu backend's scalar table (csrc/backends/cpu/random_impl.h)
// operation by operation, as the vulkan backend's random.comp does:
//  - Philox words, integer transforms, bernoulli and float32 / float16 / bfloat16 uniforms are
//    exact: each float operation is rounded once (a product is made opaque before it is
//    added, so that no fused multiply-add can form).
//  - Metal has no double type: float64 values are computed in software binary64 (integer
//    arithmetic, round to nearest even), so float64 uniforms are exact too.
//  - Normal uses Box-Muller with log and sin / cos evaluated in float-float (about 48 bits)
//    and rounded to float, so float32 normals equal glibc's correctly rounded logf / sincosf
//    results except at near-ties; float64 normals come from the float-float values and agree
//    with the cpu backend to far better than the 2 float32 ulps API.md promises.
//
// Every kernel writes bytes through 32-bit atomics: whole words are stored, a partial word at
// the edge of a range is merged with and / or on this command's bytes only, so neighbouring
// data is never rewritten and unaligned destinations need no staging.
#include <metal_stdlib>
using namespace metal;

#if defined(__METAL_VERSION__) && __METAL_VERSION__ >= 320
#pragma METAL fp math_mode(safe)
#pragma METAL fp contract(off)
#endif

// ---------------------------------------------------------------- arguments (metal_common.h)

struct FillArgs {
  ulong first;
  ulong end;
  uint pat[2];
};

struct CopyArgs {
  ulong src;
  ulong dst;
  ulong n;
};

struct RandomArgs {
  ulong da;
  ulong db;
  ulong dst_off;
  uint seed[2];
  uint block0[2];
  uint low[2];
  uint range[2];
  uint thresh[2];
  uint nblocks;
  uint count;
  float fa;
  float fb;
  uint zero;
  uint pad;
};

// Writes bits of v selected by mask into word w (all bits: a plain atomic store).
static void put_word(device atomic_uint* words, ulong w, uint v, uint mask) {
  if (mask == 0xffffffffu) {
    atomic_store_explicit(&words[w], v, memory_order_relaxed);
  } else if (mask != 0u) {
    atomic_fetch_and_explicit(&words[w], ~mask, memory_order_relaxed);
    atomic_fetch_or_explicit(&words[w], v & mask, memory_order_relaxed);
  }
}

// Bits of word w that the byte range [first, end) covers.
static uint range_mask(ulong w, ulong first, ulong end) {
  const ulong lo = max(first, w * 4) - w * 4;
  const ulong hi = min(end, w * 4 + 4) - w * 4;
  if (hi <= lo) return 0u;
  const uint bits = uint(8 * (hi - lo));
  return (bits == 32u ? 0xffffffffu : ((1u << bits) - 1u)) << uint(8 * lo);
}

// ---------------------------------------------------------------- fill and copy

kernel void fill_bytes(device atomic_uint* words [[buffer(0)]],
                       constant FillArgs& a [[buffer(1)]],
                       uint gid [[thread_position_in_grid]],
                       uint grid [[threads_per_grid]]) {
  const ulong w0 = a.first >> 2;
  const ulong w1 = (a.end + 3) >> 2;
  for (ulong w = w0 + gid; w < w1; w += grid) {
    const uint v = (w & 1) != 0 ? a.pat[1] : a.pat[0];
    put_word(words, w, v, range_mask(w, a.first, a.end));
  }
}

// Copies bytes between ranges that do not overlap, at any alignment: each thread assembles one
// destination word from the source bytes.
kernel void copy_bytes(device const uchar* src [[buffer(0)]],
                       device atomic_uint* dst [[buffer(1)]],
                       constant CopyArgs& a [[buffer(2)]],
                       uint gid [[thread_position_in_grid]],
                       uint grid [[threads_per_grid]]) {
  const ulong first = a.dst;
  const ulong end = a.dst + a.n;
  const ulong w0 = first >> 2;
  const ulong w1 = (end + 3) >> 2;
  for (ulong w = w0 + gid; w < w1; w += grid) {
    const uint mask = range_mask(w, first, end);
    uint v = 0u;
    for (uint j = 0; j < 4; ++j) {
      if ((mask >> (8 * j)) & 0xffu) v |= uint(src[a.src + (w * 4 + j - first)]) << (8 * j);
    }
    put_word(dst, w, v, mask);
  }
}

// ---------------------------------------------------------------- Philox4x32-10

static uint4 philox(uint2 ctr, uint2 key) {
  uint4 c = uint4(ctr.x, ctr.y, 0u, 0u);
  uint2 k = key;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) k += uint2(0x9E3779B9u, 0xBB67AE85u);
    const uint hi0 = mulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
    const uint hi1 = mulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
    c = uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
  }
  return c;
}

// ---------------------------------------------------------------- float16 / bfloat16 bits

// IEEE binary16 bits of f, rounded to nearest even (random_impl.h's f32_to_f16).
static uint f32_to_f16(float f) {
  const uint x = as_type<uint>(f);
  const uint sign = (x >> 16) & 0x8000u;
  const uint ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {
    return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u);
  }
  if (ax >= 0x477ff000u) return sign | 0x7c00u;
  if (ax < 0x38800000u) {
    const uint e = ax >> 23;
    if (e < 102u) return sign;
    const uint m = (ax & 0x7fffffu) | 0x800000u;
    const uint shift = 126u - e;
    uint q = m >> shift;
    const uint rem = m & ((1u << shift) - 1u);
    const uint half_ = 1u << (shift - 1u);
    if (rem > half_ || (rem == half_ && (q & 1u) != 0u)) ++q;
    return sign | q;
  }
  const uint r = ax - (112u << 23);
  uint q = r >> 13;
  const uint rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u) != 0u)) ++q;
  return sign | q;
}

// bfloat16 bits of f, rounded to nearest even (random_impl.h's f32_to_bf16).
static uint f32_to_bf16(float f) {
  const uint x = as_type<uint>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u;
  return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}

// ---------------------------------------------------------------- software binary64

constant ulong kSign = 0x8000000000000000ul;
constant ulong kQuietNaN = 0xfff8000000000000ul;  // the default NaN of x86 and Arm hosts

static bool d_isnan(ulong a) {
  return (a & ~kSign) > 0x7ff0000000000000ul;
}

// Rounds m * 2^(e - 1086) to nearest even and packs it with sign s. m has its leading one at
// bit 63 (or is 0); bits below the 53 kept ones, including a sticky bit or'ed into bit 0,
// decide the rounding. e is the biased exponent the result has when no rounding carry occurs.
static ulong d_round_pack(ulong s, int e, ulong m) {
  if (m == 0) return s;
  if (e >= 0x7ff) return s | 0x7ff0000000000000ul;
  if (e <= 0) {  // subnormal: shift into place, keeping a sticky bit
    const int shift = 1 - e;
    m = shift >= 64 ? ulong(m != 0) : (m >> shift) | ulong((m << (64 - shift)) != 0);
    e = 1;
    const ulong mant = m >> 11, rem = m & 0x7ff;
    const ulong up = (rem > 0x400 || (rem == 0x400 && (mant & 1) != 0)) ? 1 : 0;
    return s | (mant + up);  // a carry into bit 52 makes the smallest normal
  }
  const ulong mant = m >> 11, rem = m & 0x7ff;
  const ulong up = (rem > 0x400 || (rem == 0x400 && (mant & 1) != 0)) ? 1 : 0;
  const ulong bits = (ulong(e - 1) << 52) + mant + up;  // the hidden bit lands in the exponent
  if (bits >= 0x7ff0000000000000ul) return s | 0x7ff0000000000000ul;
  return s | bits;
}

// Unpacks a finite nonzero a into a mantissa with its leading one at bit 52 and a biased
// exponent (subnormals normalised, their exponent then below 1).
static ulong d_unpack(ulong a, thread int& e) {
  const int be = int((a >> 52) & 0x7ff);
  ulong m = a & 0x000fffffffffffff;
  if (be == 0) {
    const int lz = int(clz(m)) - 11;
    e = 1 - lz;
    return m << lz;
  }
  e = be;
  return m | 0x0010000000000000;
}

// u * 2^-scale for u < 2^64, correctly rounded (exact for u < 2^53).
static ulong d_from_u64(ulong u, int scale) {
  if (u == 0) return 0;
  const int lz = int(clz(u));
  return d_round_pack(0, 1086 - lz - scale, u << lz);
}

// The binary64 value of the two's complement integer v, exact for |v| <= 2^53 (IntRange into
// float64 writes such integers only).
static ulong d_from_i64(ulong v) {
  const bool neg = (v >> 63) != 0;
  return (neg ? kSign : 0ul) | d_from_u64(neg ? 0ul - v : v, 0);
}

// The binary64 value of f (exact).
static ulong d_from_f32(float f) {
  const uint x = as_type<uint>(f);
  const ulong s = ulong(x & 0x80000000u) << 32;
  const int be = int((x >> 23) & 0xffu);
  const ulong m = x & 0x7fffffu;
  if (be == 0xff) return s | 0x7ff0000000000000ul | (m << 29);
  if (be == 0 && m == 0) return s;
  const ulong full = be != 0 ? (m | 0x800000ul) : m;
  const int lz = int(clz(full));
  return d_round_pack(s, max(be, 1) + 936 - lz, full << lz);
}

static ulong d_mul(ulong a, ulong b) {
  const ulong s = (a ^ b) & kSign;
  if (d_isnan(a)) return a | 0x0008000000000000ul;
  if (d_isnan(b)) return b | 0x0008000000000000ul;
  const bool a_inf = (a & ~kSign) == 0x7ff0000000000000ul;
  const bool b_inf = (b & ~kSign) == 0x7ff0000000000000ul;
  const bool a_zero = (a & ~kSign) == 0, b_zero = (b & ~kSign) == 0;
  if (a_inf || b_inf) return (a_zero || b_zero) ? kQuietNaN : (s | 0x7ff0000000000000ul);
  if (a_zero || b_zero) return s;
  int ea, eb;
  const ulong ma = d_unpack(a, ea) << 11, mb = d_unpack(b, eb) << 11;
  ulong hi = mulhi(ma, mb);
  ulong lo = ma * mb;
  int e = ea + eb - 1022;  // product in [2^126, 2^128)
  if ((hi >> 63) == 0) {
    hi = (hi << 1) | (lo >> 63);
    lo <<= 1;
    e -= 1;
  }
  return d_round_pack(s, e, hi | ulong(lo != 0));
}

static ulong d_add(ulong a, ulong b) {
  if (d_isnan(a)) return a | 0x0008000000000000ul;
  if (d_isnan(b)) return b | 0x0008000000000000ul;
  const ulong aa = a & ~kSign, ab = b & ~kSign;
  if (aa == 0x7ff0000000000000ul) {
    return (ab == 0x7ff0000000000000ul && ((a ^ b) & kSign) != 0) ? kQuietNaN : a;
  }
  if (ab == 0x7ff0000000000000ul) return b;
  if (aa == 0) return ab == 0 ? (a & b) : b;  // -0 + -0 = -0, otherwise +0
  if (ab == 0) return a;
  if (ab > aa) {  // |a| >= |b| from here
    const ulong t = a;
    a = b;
    b = t;
  }
  int ea, eb;
  ulong ma = d_unpack(a, ea) << 10;  // leading one at bit 62
  ulong mb = d_unpack(b, eb) << 10;
  const int d = ea - eb;
  if (d > 0) mb = d >= 64 ? ulong(mb != 0) : (mb >> d) | ulong((mb << (64 - d)) != 0);
  ulong m;
  if (((a ^ b) & kSign) == 0) {
    m = ma + mb;
  } else {
    m = ma - mb;
    if (m == 0) return 0;  // x - x = +0 when rounding to nearest
  }
  const int lz = int(clz(m));
  return d_round_pack(a & kSign, ea + 1 - lz, m << lz);
}

// ---------------------------------------------------------------- float-float

struct ff {
  float hi;
  float lo;
};

static ff ff_make(float hi, float lo) {
  ff r;
  r.hi = hi;
  r.lo = lo;
  return r;
}

static ff two_sum(float a, float b) {
  const float s = a + b;
  const float bb = s - a;
  return ff_make(s, (a - (s - bb)) + (b - bb));
}

static ff fast_two_sum(float a, float b) {
  const float s = a + b;
  return ff_make(s, b - (s - a));
}

static ff two_prod(float a, float b) {
  const float p = a * b;
  return ff_make(p, fma(a, b, -p));
}

static ff ff_add(ff x, ff y) {
  const ff s = two_sum(x.hi, y.hi);
  return fast_two_sum(s.hi, s.lo + (x.lo + y.lo));
}

static ff ff_neg(ff x) {
  return ff_make(-x.hi, -x.lo);
}

static ff ff_mul(ff x, ff y) {
  const ff p = two_prod(x.hi, y.hi);
  return fast_two_sum(p.hi, p.lo + (x.hi * y.lo + x.lo * y.hi));
}

static ff ff_div(ff x, ff y) {
  const float q1 = x.hi / y.hi;
  ff r = ff_add(x, ff_neg(ff_mul(y, ff_make(q1, 0.0f))));
  const float q2 = r.hi / y.hi;
  r = ff_add(r, ff_neg(ff_mul(y, ff_make(q2, 0.0f))));
  const float q3 = r.hi / y.hi;
  return ff_add(fast_two_sum(q1, q2), ff_make(q3, 0.0f));
}

// log x for a normal float x > 0, to about 2^-48 relative: x = f 2^e with f in
// [sqrt(1/2), sqrt(2)), log f = 2 atanh(s), s = (f - 1) / (f + 1), |s| < 0.172.
static ff ff_log(float x) {
  int e;
  float f = frexp(x, e);
  if (f < 0.70710678f) {
    f *= 2.0f;
    e -= 1;
  }
  const ff s = ff_div(ff_make(f - 1.0f, 0.0f), two_sum(f, 1.0f));
  const ff s2 = ff_mul(s, s);
  // 1/23, 1/21, ..., 1/3 as float-float.
  const float chi[11] = {0.043478261679410934f, 0.0476190485060215f,   0.05263157933950424f,
                         0.05882352963089943f,  0.06666667014360428f,  0.07692307978868484f,
                         0.09090909361839294f,  0.1111111119389534f,   0.1428571492433548f,
                         0.20000000298023224f,  0.3333333432674408f};
  const float clo[11] = {-8.098457460192776e-10f, -8.869738832295582e-10f,
                         -3.9213582381236733e-10f, -2.1913472425527658e-10f,
                         -3.47693762670076e-09f,  -2.8656079731348427e-09f,
                         -2.709302115988521e-09f, -8.278422947149977e-10f,
                         -6.38621200366174e-09f,  -2.9802322831784522e-09f,
                         -9.934107758624577e-09f};
  ff p = ff_make(chi[0], clo[0]);
  for (int i = 1; i < 11; ++i) p = ff_add(ff_mul(p, s2), ff_make(chi[i], clo[i]));
  const ff two_s = ff_make(2.0f * s.hi, 2.0f * s.lo);
  const ff tail = ff_mul(ff_mul(two_s, s2), p);
  const ff lf = ff_add(two_s, tail);
  const ff ln2 = ff_make(0.6931471824645996f, -1.9046542121259336e-09f);
  return ff_add(ff_mul(ff_make(float(e), 0.0f), ln2), lf);
}

// sin and cos of t in [0, 8), to about 2^-48: t = k pi/2 + r with |r| <= pi/4 (pi/2 in three
// parts, the first with 16 bits so that k times it is exact), then Taylor series in r.
static void ff_sincos(ff t, thread ff& s, thread ff& c) {
  const float k = rint(t.hi * 0.63661975f);
  const float p1 = 1.570770263671875f, p2 = 2.6063122277264483e-05f,
              p3 = 7.443547731314504e-13f;
  ff r = ff_add(ff_make(t.hi - k * p1, 0.0f), ff_make(t.lo, 0.0f));
  r = ff_add(r, ff_neg(two_prod(k, p2)));
  r = ff_add(r, ff_neg(two_prod(k, p3)));
  const ff r2 = ff_mul(r, r);
  // Odd terms -1/3!, 1/5!, ..., -1/19! (Horner from the highest), even terms 1/4!, ..., 1/20!.
  const float shi[9] = {-8.220635078476521e-18f, 2.8114573589663704e-15f,
                        -7.647163609812713e-13f, 1.6059044372074283e-10f,
                        -2.5052107943679403e-08f, 2.7557318844628753e-06f,
                        -0.00019841270113829523f, 0.008333333767950535f,
                        -0.1666666716337204f};
  const float slo[9] = {-1.681478096855898e-25f, -1.0462084739763658e-22f,
                        -1.2200710471178288e-20f, -5.352526511562726e-18f,
                        -4.4176230446483665e-16f, 3.793571224297229e-14f,
                        2.725596874933456e-12f,   -4.34617203337595e-10f,
                        4.967053879312289e-09f};
  const float chi[9] = {4.110317590937049e-19f,  -1.5619206814541513e-16f,
                        4.7794772561329454e-14f, -1.147074536050896e-11f,
                        2.0876755879584152e-09f, -2.755731998149713e-07f,
                        2.4801587642286904e-05f, -0.0013888889225199819f,
                        0.0416666679084301f};
  const float clo[9] = {3.237511732860265e-27f,  -1.5404471465941993e-24f,
                        7.62544404448643e-22f,   -2.372207689231238e-19f,
                        1.1082839809204342e-16f, 7.575112209051195e-15f,
                        -3.40699609366682e-13f,  3.3631094437103215e-11f,
                        -1.2417634698280722e-09f};
  ff ps = ff_make(shi[0], slo[0]);
  ff pc = ff_make(chi[0], clo[0]);
  for (int i = 1; i < 9; ++i) {
    ps = ff_add(ff_mul(ps, r2), ff_make(shi[i], slo[i]));
    pc = ff_add(ff_mul(pc, r2), ff_make(chi[i], clo[i]));
  }
  const ff sn = ff_add(r, ff_mul(ff_mul(r, r2), ps));
  const ff half_r2 = ff_make(0.5f * r2.hi, 0.5f * r2.lo);
  const ff cs = ff_add(ff_add(ff_make(1.0f, 0.0f), ff_neg(half_r2)), ff_mul(ff_mul(r2, r2), pc));
  const uint q = uint(int(k)) & 3u;
  if (q == 0u) {
    s = sn;
    c = cs;
  } else if (q == 1u) {
    s = cs;
    c = ff_neg(sn);
  } else if (q == 2u) {
    s = ff_neg(sn);
    c = ff_neg(cs);
  } else {
    s = ff_neg(cs);
    c = sn;
  }
}

// sqrt of a float-float m > 0, to about 2^-48 (one correction step from the float root).
static ff ff_sqrt(ff m) {
  const float r0 = sqrt(m.hi);
  if (r0 == 0.0f) return ff_make(r0, 0.0f);
  const ff res = ff_add(m, ff_neg(two_prod(r0, r0)));
  return fast_two_sum(r0, res.hi / (2.0f * r0));
}

// x rounded as a float, made opaque: `zero` is 0 at run time, but the compiler cannot know it,
// so a product passed through here is never fused with a later addition.
static float opaque(float x, uint zero) {
  return as_type<float>(as_type<uint>(x) | zero);
}

// Box-Muller in float32 as box_muller_f32: u1 in (0, 1], u2 in [0, 1).
static void box_muller_f32(uint w0, uint w1, uint zero, thread float& z0, thread float& z1) {
  const float u1 = float((w0 >> 8) + 1u) * 5.9604644775390625e-08f;
  const float u2 = float(w1 >> 8) * 5.9604644775390625e-08f;
  const float l = ff_log(u1).hi;  // logf(u1), rounded once
  const float m = -2.0f * l;
  const float r = ff_sqrt(ff_make(m, 0.0f)).hi;
  const float theta = opaque(as_type<float>(0x40C90FDBu) * u2, zero);  // float(2 pi) * u2
  ff s, c;
  ff_sincos(ff_make(theta, 0.0f), s, c);
  z0 = r * c.hi;
  z1 = r * s.hi;
}

// Box-Muller for float64 (binary64 bits out), from float-float values.
static void box_muller_f64(uint w0, uint w1, thread ulong& z0, thread ulong& z1) {
  const float u1 = float((w0 >> 8) + 1u) * 5.9604644775390625e-08f;
  const float u2 = float(w1 >> 8) * 5.9604644775390625e-08f;
  const ff l = ff_log(u1);
  const ff r = ff_sqrt(ff_make(-2.0f * l.hi, -2.0f * l.lo));
  const ff theta = ff_mul(ff_make(6.2831854820251465f, -1.7484555314695172e-07f),
                          ff_make(u2, 0.0f));
  ff s, c;
  ff_sincos(theta, s, c);
  const ff a = ff_mul(r, c), b = ff_mul(r, s);
  z0 = d_add(d_from_f32(a.hi), d_from_f32(a.lo));
  z1 = d_add(d_from_f32(b.hi), d_from_f32(b.lo));
}

#ifndef MPSRT_KERNELS_HOST_TEST

// ---------------------------------------------------------------- random fills

constant uint OP [[function_constant(0)]];     // backend::RandomOp
constant uint DTYPE [[function_constant(1)]];  // backend::RandomDType
constant uint WIDE [[function_constant(2)]];   // IntRange: range > 2^32 (two words per value)
constant uint ES [[function_constant(3)]];     // element size in bytes
constant uint WPE [[function_constant(4)]];    // words per element: 2 for float64 uniforms and
                                               // wide integer ranges, else 1

constant uint kBits = 0, kUniform = 1, kNormal = 2, kIntRange = 3;
constant uint kF16 = 4, kBF16 = 5, kF32 = 6, kF64 = 7, kBool = 8;

static ulong from_float(float v) {
  if (DTYPE == kF16) return f32_to_f16(v);
  if (DTYPE == kBF16) return f32_to_bf16(v);
  return as_type<uint>(v);
}

// IntRange's element: low + x (two's complement) as the dtype's value. Integers: its low
// bytes; bool: != 0; floats: the integer's exact value (the core keeps |low + x| <= 2^digits).
static ulong int_value(constant RandomArgs& a, ulong x) {
  const ulong v = (ulong(a.low[0]) | (ulong(a.low[1]) << 32)) + x;
  if (DTYPE == kBool) return v != 0 ? 1 : 0;
  if (DTYPE == kF16 || DTYPE == kBF16 || DTYPE == kF32) return from_float(float(long(v)));
  if (DTYPE == kF64) return d_from_i64(v);
  return v;
}

// Element i (0 .. 4 / WPE - 1) of the block with words w, as its bytes (little-endian).
static ulong element(constant RandomArgs& a, uint4 w, uint i) {
  if (OP == kBits) return w[i];
  if (OP == kUniform) {
    if (DTYPE == kF64) {
      const ulong u = (ulong(w[2 * i + 1]) << 32) | ulong(w[2 * i]);
      const ulong uf = d_from_u64(u >> 11, 53);
      return d_add(a.da, d_mul(a.db, uf));
    }
    float u;
    if (DTYPE == kF16) {
      u = float(w[i] >> 21) * 4.8828125e-04f;
    } else if (DTYPE == kBF16) {
      u = float(w[i] >> 24) * 3.90625e-03f;
    } else {
      u = float(w[i] >> 8) * 5.9604644775390625e-08f;
    }
    return from_float(a.fa + opaque(a.fb * u, a.zero));
  }
  if (OP == kIntRange) {
    const ulong r = ulong(a.range[0]) | (ulong(a.range[1]) << 32);
    if (WIDE != 0u) {
      const ulong x = (ulong(w[2 * i + 1]) << 32) | ulong(w[2 * i]);
      return int_value(a, x % r);
    }
    return int_value(a, a.range[1] != 0u ? ulong(w[i]) : ulong(w[i] % a.range[0]));
  }
  // Bernoulli
  const ulong t = ulong(a.thresh[0]) | (ulong(a.thresh[1]) << 32);
  if (!(ulong(w[i]) < t)) return 0;
  if (DTYPE == kF16) return 0x3c00u;
  if (DTYPE == kBF16) return 0x3f80u;
  if (DTYPE == kF32) return 0x3f800000u;
  if (DTYPE == kF64) return 0x3ff0000000000000ul;
  return 1;
}

// One thread per Philox block: computes its (up to) four elements and writes their bytes,
// at most 32, into at most nine words.
kernel void random_fill(device atomic_uint* words [[buffer(0)]],
                        constant RandomArgs& a [[buffer(1)]],
                        uint gid [[thread_position_in_grid]],
                        uint grid [[threads_per_grid]]) {
  const uint epb = 4u / WPE;
  for (uint k = gid; k < a.nblocks; k += grid) {
    const uint lo = a.block0[0] + k;
    const uint4 w = philox(uint2(lo, a.block0[1] + (lo < k ? 1u : 0u)),
                           uint2(a.seed[0], a.seed[1]));
    ulong v[4] = {0, 0, 0, 0};
    if (OP == kNormal) {
      if (DTYPE == kF64) {
        ulong z[4];
        box_muller_f64(w.x, w.y, z[0], z[1]);
        box_muller_f64(w.z, w.w, z[2], z[3]);
        for (uint i = 0; i < 4; ++i) v[i] = d_add(a.da, d_mul(a.db, z[i]));
      } else {
        float z[4];
        box_muller_f32(w.x, w.y, a.zero, z[0], z[1]);
        box_muller_f32(w.z, w.w, a.zero, z[2], z[3]);
        for (uint i = 0; i < 4; ++i) v[i] = from_float(a.fa + opaque(a.fb * z[i], a.zero));
      }
    } else {
      for (uint i = 0; i < epb; ++i) v[i] = element(a, w, i);
    }
    // Bytes of elements e0 .. e0 + epb - 1 (those below count) into words from `base`.
    const uint e0 = k * epb;
    const ulong start = a.dst_off + ulong(e0) * ES;
    const ulong base = start & ~ulong(3);
    uint acc[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    uint mask[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (uint i = 0; i < epb; ++i) {
      if (e0 + i >= a.count) break;
      const uint pos0 = uint(start - base) + i * ES;
      for (uint b = 0; b < ES; ++b) {
        const uint pos = pos0 + b;
        const uint byte = uint(v[i] >> (8 * b)) & 0xffu;
        acc[pos >> 2] |= byte << (8 * (pos & 3u));
        mask[pos >> 2] |= 0xffu << (8 * (pos & 3u));
      }
    }
    for (uint j = 0; j < 9; ++j) put_word(words, (base >> 2) + j, acc[j], mask[j]);
  }
}

#endif  // MPSRT_KERNELS_HOST_TEST
