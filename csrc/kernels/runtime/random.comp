// Random fills: mpsrt/philox.h's stream definition, bit-identical to the cpu backend's
// scalar table (csrc/backends/cpu/random_impl.h) for raw bits, uniform, integer ranges and
// bernoulli; normal within 2 float32 ulps (see vk_kernels.cpp). An invocation computes one Philox block at a time and
// writes the elements made from its four words; it handles UNROLL blocks a stride apart per
// step of a grid-stride loop (so each store of a subgroup writes contiguous bytes). The op,
// dtype and word count are specialisation constants, so each pipeline holds only its own path.
//
// Two builds of this file: without MPSRT_RANDOM_F64 it has no float64 type at all (Metal has
// none: SPIRV-Cross translates this build to MSL) and writes every dtype but float64; float32 /
// float16 / bfloat16 normals use float-float log, sqrt and sin / cos (ff_math.glsl) rounded
// once. With -DMPSRT_RANDOM_F64 (vulkan, for float64 outputs only) it adds the float64
// uniform, normal and integer-range paths in double precision.
//
// Stores: a block whose elements are all written and whose bytes are aligned to their width
// (at most 16) is written with the widest store: two uvec4 (32 bytes: 4 x 64-bit elements),
// one uvec4 (16 bytes: 4 x 32-bit or 2 x 64-bit), one uvec2 (4 x 16-bit) or one word
// (4 x 8-bit). Other blocks (the last one of a dispatch, destinations misaligned for the
// width, VEC = 4) are written word by word, partial words merged with atomics on this block's
// bytes only.
#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_GOOGLE_include_directive : require

#include "ff_math.glsl"

layout(local_size_x_id = 5) in;

layout(constant_id = 0) const uint OP = 0;     // backend::RandomOp
layout(constant_id = 1) const uint DTYPE = 0;  // backend::RandomDType
layout(constant_id = 2) const uint WIDE = 0;   // IntRange: range > 2^32 (two words per value)
layout(constant_id = 3) const uint ES = 4;     // element size in bytes
layout(constant_id = 4) const uint WPE = 1;    // words per element: 2 for float64 uniforms
                                               // and wide integer ranges, else 1
layout(constant_id = 6) const uint UNROLL = 2;  // blocks per invocation and step
layout(constant_id = 7) const uint VEC = 16;    // widest store in bytes: 16 or 4

const uint kBits = 0, kUniform = 1, kNormal = 2, kIntRange = 3, kBernoulli = 4;
const uint kU8 = 0, kI32 = 1, kI64 = 2, kU32 = 3, kF16 = 4, kBF16 = 5, kF32 = 6, kF64 = 7,
           kBool = 8, kI8 = 9, kI16 = 10, kU16 = 11, kU64 = 12;

layout(set = 0, binding = 0) buffer Dst {
  uint words[];
};
layout(set = 0, binding = 0) buffer Dst2 {
  uvec2 words2[];
};
layout(set = 0, binding = 0) buffer Dst4 {
  uvec4 words4[];
};

layout(push_constant) uniform Params {
#ifdef MPSRT_RANDOM_F64
  double da;     // Uniform f64: low; Normal f64: mean
  double db;     // Uniform f64: high - low; Normal f64: std
#else
  uvec2 da;  // the same bytes, unused without float64
  uvec2 db;
#endif
  uvec2 seed;    // the Philox key
  uvec2 block0;  // the Philox block of this dispatch's block 0
  uvec2 low;     // IntRange
  uvec2 range;   // IntRange
  uvec2 thresh;  // Bernoulli
  uint nblocks;  // blocks in this dispatch
  uint e_lo;     // elements [e_lo, e_hi) are written, counted from block 0's first element
  uint e_hi;
  uint dst_off;  // window byte offset of block 0's first element
  float fa;      // float32 forms: Uniform low / Normal mean
  float fb;      // Uniform high - low / Normal std
}
pc;

// Elements per block (normal: two pairs of words, four elements) and their bytes.
#define EPB (4u / WPE)
#define BLOCK_BYTES (EPB * ES)

uvec4 philox(uvec2 ctr, uvec2 key) {
  uvec4 c = uvec4(ctr, 0u, 0u);
  uvec2 k = key;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) k += uvec2(0x9E3779B9u, 0xBB67AE85u);
    uint hi0, lo0, hi1, lo1;
    umulExtended(0xD2511F53u, c.x, hi0, lo0);
    umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
    c = uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
  }
  return c;
}

// IEEE binary16 bits of f, rounded to nearest even (random_impl.h's f32_to_f16).
uint f32_to_f16(float f) {
  const uint x = floatBitsToUint(f);
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
uint f32_to_bf16(float f) {
  const uint x = floatBitsToUint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u;
  return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}

#ifdef MPSRT_RANDOM_F64
// Natural logarithm of x > 0 in double precision (relative error a few 1e-16): x = f 2^e with
// f in [sqrt(1/2), sqrt(2)), log f = 2 atanh(s), s = (f - 1) / (f + 1), |s| < 0.172.
double log_d(double x) {
  int e;
  double f = frexp(x, e);
  if (f < 0.70710678118654752440lf) {
    f *= 2.0lf;
    e -= 1;
  }
  precise double s = (f - 1.0lf) / (f + 1.0lf);
  precise double s2 = s * s;
  precise double p = 1.0lf / 23.0lf;
  p = p * s2 + 1.0lf / 21.0lf;
  p = p * s2 + 1.0lf / 19.0lf;
  p = p * s2 + 1.0lf / 17.0lf;
  p = p * s2 + 1.0lf / 15.0lf;
  p = p * s2 + 1.0lf / 13.0lf;
  p = p * s2 + 1.0lf / 11.0lf;
  p = p * s2 + 1.0lf / 9.0lf;
  p = p * s2 + 1.0lf / 7.0lf;
  p = p * s2 + 1.0lf / 5.0lf;
  p = p * s2 + 1.0lf / 3.0lf;
  precise double lf = 2.0lf * s + 2.0lf * (s * s2 * p);
  const double de = double(e);
  // ln 2 split so that e * kLn2Hi is exact.
  precise double res = de * 6.93147180369123816490e-01lf + (de * 1.90821492927058770002e-10lf + lf);
  return res;
}

// sin and cos of t in [0, 8) in double precision: t = k pi/2 + r with |r| <= pi/4 (pi/2 in
// two parts, the first with 33 bits so that k times it is exact), then Taylor series.
void sincos_d(double t, out double s, out double c) {
  const double k = roundEven(t * 6.36619772367581382433e-01lf);
  precise double r = (t - k * 1.57079632673412561417e+00lf) - k * 6.07710050650619224932e-11lf;
  precise double r2 = r * r;
  precise double ps = -1.0lf / 121645100408832000.0lf;  // -1/19!
  ps = ps * r2 + 1.0lf / 355687428096000.0lf;           // 1/17!
  ps = ps * r2 - 1.0lf / 1307674368000.0lf;             // 1/15!
  ps = ps * r2 + 1.0lf / 6227020800.0lf;                // 1/13!
  ps = ps * r2 - 1.0lf / 39916800.0lf;                  // 1/11!
  ps = ps * r2 + 1.0lf / 362880.0lf;                    // 1/9!
  ps = ps * r2 - 1.0lf / 5040.0lf;                      // 1/7!
  ps = ps * r2 + 1.0lf / 120.0lf;                       // 1/5!
  ps = ps * r2 - 1.0lf / 6.0lf;                         // 1/3!
  precise double sn = r + r * r2 * ps;
  precise double pc_ = 1.0lf / 2432902008176640000.0lf;  // 1/20!
  pc_ = pc_ * r2 - 1.0lf / 6402373705728000.0lf;         // 1/18!
  pc_ = pc_ * r2 + 1.0lf / 20922789888000.0lf;           // 1/16!
  pc_ = pc_ * r2 - 1.0lf / 87178291200.0lf;              // 1/14!
  pc_ = pc_ * r2 + 1.0lf / 479001600.0lf;                // 1/12!
  pc_ = pc_ * r2 - 1.0lf / 3628800.0lf;                  // 1/10!
  pc_ = pc_ * r2 + 1.0lf / 40320.0lf;                    // 1/8!
  pc_ = pc_ * r2 - 1.0lf / 720.0lf;                      // 1/6!
  pc_ = pc_ * r2 + 1.0lf / 24.0lf;                       // 1/4!
  precise double cs = 1.0lf - 0.5lf * r2 + r2 * r2 * pc_;
  const uint q = uint(int(k)) & 3u;
  if (q == 0u) {
    s = sn;
    c = cs;
  } else if (q == 1u) {
    s = cs;
    c = -sn;
  } else if (q == 2u) {
    s = -sn;
    c = -cs;
  } else {
    s = -cs;
    c = sn;
  }
}

void box_muller_f64(uint w0, uint w1, out double z0, out double z1) {
  precise double u1 = double((w0 >> 8) + 1u) * 5.9604644775390625e-08lf;
  precise double u2 = double(w1 >> 8) * 5.9604644775390625e-08lf;
  precise double m = -2.0lf * log_d(u1);
  const double r = sqrt(m);
  precise double theta = 6.28318530717958647692lf * u2;
  double sd, cd;
  sincos_d(theta, sd, cd);
  precise double a = r * cd;
  precise double b = r * sd;
  z0 = a;
  z1 = b;
}

uvec2 bits64(double d) {
  return unpackDouble2x32(d);
}
#endif  // MPSRT_RANDOM_F64

// Box-Muller in float32, step by step as box_muller_f32 (mpsrt/philox.h): each float operation
// rounds once; logf, sqrtf and sincosf are float-float values rounded to float.
void box_muller_f32(uint w0, uint w1, out float z0, out float z1) {
  precise float u1 = float((w0 >> 8) + 1u) * 5.9604644775390625e-08;
  precise float u2 = float(w1 >> 8) * 5.9604644775390625e-08;
  const float l = ff_log(u1).x;
  precise float m = -2.0 * l;
  const float r = ff_sqrt_f(m);
  precise float theta = uintBitsToFloat(0x40C90FDBu) * u2;  // float(2 pi) * u2
  const vec4 sc = ff_sincos(theta);
  precise float a = r * sc.z;
  precise float b = r * sc.x;
  z0 = a;
  z1 = b;
}

uvec2 from_float(float v) {
  if (DTYPE == kF16) return uvec2(f32_to_f16(v), 0u);
  if (DTYPE == kBF16) return uvec2(f32_to_bf16(v), 0u);
  return uvec2(floatBitsToUint(v), 0u);
}

// IntRange's element: low + x (two's complement) as the dtype's value. Integers: its low
// bytes; bool: != 0; floats: the integer's exact value (the core keeps |low + x| <= 2^digits).
uvec2 int_value(uint64_t x) {
  // Integers of at most 32 bits: the low word of the sum (the same bits, without 64-bit adds).
  if (ES <= 4u && DTYPE != kBool && DTYPE != kF16 && DTYPE != kBF16 && DTYPE != kF32) {
    return uvec2(pc.low.x + uint(x), 0u);
  }
  const uint64_t v = uint64_t(pc.low.x) + (uint64_t(pc.low.y) << 32) + x;
  if (DTYPE == kBool) return uvec2(v != uint64_t(0) ? 1u : 0u, 0u);
  if (DTYPE == kF16 || DTYPE == kBF16 || DTYPE == kF32) return from_float(float(int64_t(v)));
#ifdef MPSRT_RANDOM_F64
  if (DTYPE == kF64) return bits64(double(int64_t(v)));
#endif
  return uvec2(uint(v), uint(v >> 32));
}

// Element i (0 .. EPB - 1) of the block with words w.
uvec2 element(uvec4 w, uint i) {
  if (OP == kBits) return uvec2(w[i], 0u);
  if (OP == kUniform) {
#ifdef MPSRT_RANDOM_F64
    if (DTYPE == kF64) {
      const uint64_t u = (uint64_t(w[2 * i + 1]) << 32) | uint64_t(w[2 * i]);
      precise double uf = double(u >> 11) * 1.1102230246251565e-16lf;
      precise double t = pc.db * uf;
      precise double v = pc.da + t;
      return bits64(v);
    }
#endif
    float u;
    if (DTYPE == kF16) {
      u = float(w[i] >> 21) * 4.8828125e-04;
    } else if (DTYPE == kBF16) {
      u = float(w[i] >> 24) * 3.90625e-03;
    } else {
      u = float(w[i] >> 8) * 5.9604644775390625e-08;
    }
    precise float t = pc.fb * u;
    precise float v = pc.fa + t;
    return from_float(v);
  }
  if (OP == kIntRange) {
    const uint64_t r = uint64_t(pc.range.x) | (uint64_t(pc.range.y) << 32);
    if (WIDE != 0u) {
      const uint64_t x = (uint64_t(w[2 * i + 1]) << 32) | uint64_t(w[2 * i]);
      return int_value(x % r);
    }
    return int_value(pc.range.y != 0u ? uint64_t(w[i]) : uint64_t(w[i] % pc.range.x));
  }
  // Bernoulli
  // w < threshold (at most 2^32): any word when the high word is set.
  const bool hit = pc.thresh.y != 0u || w[i] < pc.thresh.x;
  if (!hit) return uvec2(0u);
  if (DTYPE == kF16) return uvec2(0x3c00u, 0u);
  if (DTYPE == kBF16) return uvec2(0x3f80u, 0u);
  if (DTYPE == kF32) return uvec2(0x3f800000u, 0u);
  if (DTYPE == kF64) return uvec2(0u, 0x3ff00000u);
  return uvec2(1u, 0u);
}

// The elements v[0 .. EPB - 1] of block k.
void block_values(uint k, out uvec2 v[4]) {
  const uint lo = pc.block0.x + k;
  const uvec4 w = philox(uvec2(lo, pc.block0.y + (lo < k ? 1u : 0u)), pc.seed);
  v[0] = uvec2(0u);
  v[1] = uvec2(0u);
  v[2] = uvec2(0u);
  v[3] = uvec2(0u);
  if (OP == kNormal) {
#ifdef MPSRT_RANDOM_F64
    if (DTYPE == kF64) {
      double z0, z1, z2, z3;
      box_muller_f64(w.x, w.y, z0, z1);
      box_muller_f64(w.z, w.w, z2, z3);
      precise double t0 = pc.db * z0, t1 = pc.db * z1, t2 = pc.db * z2, t3 = pc.db * z3;
      precise double v0 = pc.da + t0, v1 = pc.da + t1, v2 = pc.da + t2, v3 = pc.da + t3;
      v[0] = bits64(v0);
      v[1] = bits64(v1);
      v[2] = bits64(v2);
      v[3] = bits64(v3);
      return;
    }
#endif
    {
      float z0, z1, z2, z3;
      box_muller_f32(w.x, w.y, z0, z1);
      box_muller_f32(w.z, w.w, z2, z3);
      precise float t0 = pc.fb * z0, t1 = pc.fb * z1, t2 = pc.fb * z2, t3 = pc.fb * z3;
      precise float v0 = pc.fa + t0, v1 = pc.fa + t1, v2 = pc.fa + t2, v3 = pc.fa + t3;
      v[0] = from_float(v0);
      v[1] = from_float(v1);
      v[2] = from_float(v2);
      v[3] = from_float(v3);
    }
  } else {
    for (uint i = 0u; i < EPB; ++i) v[i] = element(w, i);
  }
}

// Block k's elements, all inside [e_lo, e_hi), at a byte offset aligned to the store's width:
// one store of BLOCK_BYTES bytes (two for 32).
void store_wide(uint k, uvec2 v[4]) {
  const uint at = pc.dst_off + k * BLOCK_BYTES;
  if (BLOCK_BYTES == 32u) {  // 4 x 64-bit
    words4[at >> 4] = uvec4(v[0], v[1]);
    words4[(at >> 4) + 1u] = uvec4(v[2], v[3]);
  } else if (ES == 8u) {  // 2 x 64-bit
    words4[at >> 4] = uvec4(v[0], v[1]);
  } else if (BLOCK_BYTES == 16u) {  // 4 x 32-bit
    words4[at >> 4] = uvec4(v[0].x, v[1].x, v[2].x, v[3].x);
  } else if (BLOCK_BYTES == 8u) {  // 4 x 16-bit
    words2[at >> 3] = uvec2((v[0].x & 0xffffu) | (v[1].x << 16), (v[2].x & 0xffffu) | (v[3].x << 16));
  } else {  // 4 x 8-bit
    words[at >> 2] = (v[0].x & 0xffu) | ((v[1].x & 0xffu) << 8) | ((v[2].x & 0xffu) << 16) |
                     (v[3].x << 24);
  }
}

// Block k's elements inside [e_lo, e_hi), word by word.
void store_words(uint k, uvec2 v[4]) {
  const uint e0 = k * EPB;
  if (ES >= 4u) {
    for (uint i = 0u; i < EPB; ++i) {
      const uint e = e0 + i;
      if (e < pc.e_lo || e >= pc.e_hi) continue;
      const uint at = (pc.dst_off + e * ES) >> 2;
      words[at] = v[i].x;
      if (ES == 8u) words[at + 1u] = v[i].y;
    }
  } else {
    // 1- and 2-byte elements: at most 8 bytes, spread over up to three words; partial
    // words are merged with atomics on this block's bytes only.
    const uint base = (pc.dst_off + e0 * ES) & ~3u;
    uint acc[3] = uint[3](0u, 0u, 0u);
    uint mask[3] = uint[3](0u, 0u, 0u);
    for (uint i = 0u; i < EPB; ++i) {
      const uint e = e0 + i;
      if (e < pc.e_lo || e >= pc.e_hi) continue;
      const uint pos = pc.dst_off + e * ES - base;
      const uint m = ES == 1u ? 0xffu : 0xffffu;
      acc[pos >> 2] |= (v[i].x & m) << (8u * (pos & 3u));
      mask[pos >> 2] |= m << (8u * (pos & 3u));
    }
    for (uint j = 0u; j < 3u; ++j) {
      const uint at = (base >> 2) + j;
      if (mask[j] == 0xffffffffu) {
        words[at] = acc[j];
      } else if (mask[j] != 0u) {
        atomicAnd(words[at], ~mask[j]);
        atomicOr(words[at], acc[j]);
      }
    }
  }
}

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  // Wide stores: VEC = 16 and the destination aligned to min(BLOCK_BYTES, 16) (every block
  // then is: its offset adds multiples of BLOCK_BYTES).
  bool shapes = EPB == 4u || (EPB == 2u && ES == 8u);  // those store_wide() knows
  const bool wide = shapes && VEC >= 16u && (pc.dst_off & (min(BLOCK_BYTES, 16u) - 1u)) == 0u;
  for (uint k0 = gl_GlobalInvocationID.x; k0 < pc.nblocks; k0 += stride * UNROLL) {
    for (uint u = 0u; u < UNROLL; ++u) {
      const uint k = k0 + u * stride;
      if (k >= pc.nblocks) break;
      uvec2 v[4];
      block_values(k, v);
      const uint e0 = k * EPB;
      if (wide && e0 >= pc.e_lo && e0 + EPB <= pc.e_hi) {
        store_wide(k, v);
      } else {
        store_words(k, v);
      }
    }
  }
}
