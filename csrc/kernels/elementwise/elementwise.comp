// Element-wise ops over up to four operands with strides and broadcasting (operand 0 the
// output, 1..3 inputs), each operand in its own dtype, computed in float32 (floating math:
// torch's opmath for float16 / bfloat16 / float32) or in 64-bit integers (integer and bool
// math), as torch's TensorIterator lays them out (up to 4 dims after coalescing). An input may
// be a scalar: its value in push constants (a CPU scalar of the op, or a parameter such as
// add's alpha or clamp's bounds).
//
// Ops, specialisation constants and push constants: elementwise.h.
//
// The transcendental functions are written out (Cephes' single-precision polynomials, an erf
// after N. Juffa) rather than taken from GLSL, whose precision guarantees (log2 near 1: 2^-21
// absolute; sin/cos: 2^-11) fall short of torch's float32 results (within about 1 ulp).
#version 450
layout(local_size_x = 256) in;

#include "elementwise/elementwise.h"
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)

// The operands' element offsets for the linear index split into dims (idx, innermost first).
uint offset_of(uint o, uint idx[4]) {
  uint off = 0u;
  for (uint d = 0u; d < NDIM; ++d) off += uint(int(idx[d]) * pc.strides[o * 4u + d]);
  return off;
}

bool is_scalar(uint o) { return (SCALARS & (1u << o)) != 0u; }
float scalar_f(uint o) { return uintBitsToFloat(uint(pc.strides[o * 4u])); }
int64_t scalar_i(uint o) {
  return int64_t(packUint2x32(uvec2(uint(pc.strides[o * 4u]), uint(pc.strides[o * 4u + 1u]))));
}

float in_f(uint o, uint idx[4]) {
  if (o > NIN) return 0.0;
  if (is_scalar(o)) return scalar_f(o);
  uint e = offset_of(o, idx);
  if (o == 1u) return ld1f(DT1, e);
  if (o == 2u) return ld2f(DT2, e);
  return ld3f(DT3, e);
}
int64_t in_i(uint o, uint idx[4]) {
  if (o > NIN) return 0l;
  if (is_scalar(o)) return scalar_i(o);
  uint e = offset_of(o, idx);
  if (o == 1u) return ld1i(DT1, e);
  if (o == 2u) return ld2i(DT2, e);
  return ld3i(DT3, e);
}

// ---- float32 functions (Cephes expf / logf / sinf / cosf / tanhf, about 1 ulp) ----

// x * 2^e for e in [-300, 300] (two steps: ldexp's exponent must stay within the float range).
float scale2(float x, int e) {
  int h = e / 2;
  return ldexp(ldexp(x, h), e - h);
}

float exp_f(float x) {
  if (isnan(x)) return x;
  if (x > 88.72283905206835) return uintBitsToFloat(0x7f800000u);
  if (x < -103.972084045410) return 0.0;
  float n = floor(x * 1.44269504088896341 + 0.5);
  float r = x - n * 0.693359375;
  r = r - n * -2.12194440e-4;
  float z = r * r;
  float q = 1.9875691500E-4;
  q = q * r + 1.3981999507E-3;
  q = q * r + 8.3334519073E-3;
  q = q * r + 4.1665795894E-2;
  q = q * r + 1.6666665459E-1;
  q = q * r + 5.0000001201E-1;
  q = q * z + r + 1.0;
  return scale2(q, int(n));
}

float log_f(float x) {
  if (isnan(x) || x < 0.0) return uintBitsToFloat(0x7fc00000u);
  if (x == 0.0) return uintBitsToFloat(0xff800000u);
  if (isinf(x)) return x;
  int e;
  float m = frexp(x, e);  // m in [0.5, 1)
  if (m < 0.707106781186547524) {
    e -= 1;
    m = m + m - 1.0;
  } else {
    m = m - 1.0;
  }
  float z = m * m;
  float y = 7.0376836292E-2;
  y = y * m - 1.1514610310E-1;
  y = y * m + 1.1676998740E-1;
  y = y * m - 1.2420140846E-1;
  y = y * m + 1.4249322787E-1;
  y = y * m - 1.6668057665E-1;
  y = y * m + 2.0000714765E-1;
  y = y * m - 2.4999993993E-1;
  y = y * m + 3.3333331174E-1;
  y = y * m * z;
  float fe = float(e);
  y += fe * -2.12194440e-4;
  y += -0.5 * z;
  return m + y + fe * 0.693359375;
}

// sin (cosine = false) or cos of x; Cody-Waite reduction by pi/4 for |x| <= 8192, GLSL's
// functions beyond (as Cephes, which gives up there).
float sincos_f(float x, bool cosine) {
  if (isnan(x) || isinf(x)) return uintBitsToFloat(0x7fc00000u);
  float ax = abs(x);
  if (ax > 8192.0) return cosine ? cos(x) : sin(x);
  uint j = uint(ax * 1.27323954473516);
  float y = float(j);
  if ((j & 1u) != 0u) {
    j += 1u;
    y += 1.0;
  }
  j &= 7u;
  float sign = (!cosine && x < 0.0) ? -1.0 : 1.0;
  if (j > 3u) {
    sign = -sign;
    j -= 4u;
  }
  if (cosine && j > 1u) sign = -sign;
  float r = ((ax - y * 0.78515625) - y * 2.4187564849853515625e-4) - y * 3.77489497744594108e-8;
  float z = r * r;
  bool use_cos = cosine ? (j == 0u || j == 3u) : (j == 1u || j == 2u);
  float v;
  if (use_cos) {
    v = ((2.443315711809948E-005 * z - 1.388731625493765E-003) * z + 4.166664568298827E-002) *
        z * z - 0.5 * z + 1.0;
  } else {
    v = ((-1.9515295891E-4 * z + 8.3321608736E-3) * z - 1.6666654611E-1) * z * r + r;
  }
  return sign * v;
}

float tanh_f(float x) {
  if (isnan(x)) return x;
  float ax = abs(x);
  if (ax >= 9.0) return sign(x);
  if (ax >= 0.625) {
    float t = 1.0 - 2.0 / (exp_f(2.0 * ax) + 1.0);
    return x < 0.0 ? -t : t;
  }
  float z = x * x;
  float q = -5.70498872745E-3;
  q = q * z + 2.06390887954E-2;
  q = q * z - 5.37397155531E-2;
  q = q * z + 1.33314422036E-1;
  q = q * z - 3.33332819422E-1;
  return q * z * x + x;
}

// erf after N. Juffa's erff (max error about 1 ulp): an odd polynomial below 0.9277, and
// 1 - exp(polynomial) above.
float erf_f(float a) {
  float t = abs(a);
  if (t >= 4.0) return isnan(a) ? a : sign(a);  // 1 - erfc(4) is 1.0 in float32
  float s = a * a;
  if (t > 0.927734375) {
    float r = fma(-1.72853470e-5, t, 3.83197126e-4);
    float u = fma(-3.88396438e-3, t, 2.42546219e-2);
    r = fma(r, s, u);
    r = fma(r, t, -1.06777877e-1);
    r = fma(r, t, -6.34846687e-1);
    r = fma(r, t, -1.28717512e-1);
    r = fma(r, t, -t);
    r = 1.0 - exp_f(r);
    return a < 0.0 ? -r : r;
  }
  float r = -5.96761703e-4;
  r = fma(r, s, 4.99119423e-3);
  r = fma(r, s, -2.67681349e-2);
  r = fma(r, s, 1.12819925e-1);
  r = fma(r, s, -3.76125336e-1);
  r = fma(r, s, 1.28379166e-1);
  return fma(r, a, a);
}

float sigmoid_f(float x) { return 1.0 / (1.0 + exp_f(-x)); }

bool is_odd_integer(float y) { return abs(y) < 16777216.0 && mod(y, 2.0) == 1.0; }

// x ** y as C's powf: integer exponents up to 64 by repeated squaring (torch's x * x for 2, ...),
// square roots for +-0.5, exp(y * log|x|) otherwise.
float pow_f(float x, float y) {
  if (y == 0.0 || x == 1.0) return 1.0;
  if (isnan(x) || isnan(y)) return x + y;
  if (y == 0.5) return sqrt(x);
  if (y == -0.5) return 1.0 / sqrt(x);
  bool integer = floor(y) == y;
  if (integer && abs(y) <= 64.0) {
    uint k = uint(abs(y));
    float r = 1.0, b = x;
    for (uint i = 0u; i < 7u && k != 0u; ++i) {
      if ((k & 1u) != 0u) r *= b;
      b *= b;
      k >>= 1u;
    }
    return y < 0.0 ? 1.0 / r : r;
  }
  if (x < 0.0 && !integer && !isinf(x)) return uintBitsToFloat(0x7fc00000u);
  float r = exp_f(y * log_f(abs(x)));
  return (x < 0.0 && is_odd_integer(y)) ? -r : r;
}

// torch's div_floor_floating: the quotient rounded toward -inf, as Python's //.
float div_floor_f(float a, float b) {
  if (b == 0.0) return a / b;
  // fmod: the remainder of the truncated quotient, exact through fma for |a / b| < 2^24
  // (a itself for an infinite divisor).
  float m = isinf(b) && !isinf(a) ? a : fma(-b, trunc(a / b), a);
  float d = (a - m) / b;
  if (m != 0.0 && ((b < 0.0) != (m < 0.0))) d -= 1.0;
  if (d == 0.0) return (a / b) < 0.0 ? -0.0 : 0.0;
  float f = floor(d);
  if (d - f > 0.5) f += 1.0;
  return f;
}

float gelu_f(float x) {
  if (VARIANT == 1u) {
    float inner = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + tanh_f(inner));
  }
  return x * 0.5 * (1.0 + erf_f(x * 0.7071067811865476));
}

// d gelu(x) / dx, as torch's gelu_backward.
float gelu_grad_f(float x) {
  if (VARIANT == 1u) {
    const float beta = 0.7978845608028654, kappa = 0.044715;
    float x_sq = x * x;
    float t = tanh_f(beta * (x + kappa * x_sq * x));
    float left_derivative = 0.5 * (1.0 + t);
    float right_derivative = 0.5 * x * (1.0 - t * t) * beta * (1.0 + 3.0 * kappa * x_sq);
    return left_derivative + right_derivative;
  }
  float cdf = 0.5 * (1.0 + erf_f(x * 0.7071067811865476));
  float pdf = 0.3989422804014327 * exp_f(-0.5 * x * x);
  return cdf + x * pdf;
}

// NaN-propagating max / min (torch's maximum / minimum).
float max_f(float a, float b) { return isnan(a) || isnan(b) ? a + b : (a > b ? a : b); }
float min_f(float a, float b) { return isnan(a) || isnan(b) ? a + b : (a < b ? a : b); }

float clamp_f(float a, float lo, float hi) {
  if (isnan(a)) return a;
  if ((VARIANT & 1u) != 0u) a = a < lo ? lo : a;
  if ((VARIANT & 2u) != 0u) a = hi < a ? hi : a;
  return a;
}

// v within [lo, hi], NaN kept (as torch's CPU clamps in hardswish / hardsigmoid).
float clamp_nan_f(float v, float lo, float hi) {
  v = v < lo ? lo : v;
  return v > hi ? hi : v;
}

// log(1 + x) and exp(x) - 1 accurate near 0 (the rounding of 1 + x, or of exp(x), corrected
// by the ratio of the exact argument to the rounded one).
float log1p_f(float x) {
  float u = 1.0 + x;
  if (u == 1.0 || isnan(x)) return x;
  if (isinf(u)) return u;
  return log_f(u) * (x / (u - 1.0));
}

float expm1_f(float x) {
  float u = exp_f(x);
  if (u == 1.0 || isnan(x)) return x;
  float um1 = u - 1.0;
  if (um1 == -1.0 || isinf(u)) return um1;
  return um1 * (x / log_f(u));
}

float softplus_f(float x) {
  float bx = x * pc.p[0];
  return bx > pc.p[1] ? x : log1p_f(exp_f(bx)) / pc.p[0];
}

float softplus_bwd_f(float g, float x) {
  float bx = x * pc.p[0];
  if (bx > pc.p[1]) return g;
  float z = exp_f(bx);
  return g * z / (z + 1.0);
}

float elu_f(float x) {
  return x <= 0.0 ? expm1_f(x * pc.p[2]) * pc.p[0] : x * pc.p[1];
}

// elu's gradient from its input, or from its output (VARIANT 1).
float elu_bwd_f(float g, float b) {
  if (b > 0.0 || isnan(b)) return g * pc.p[1];
  if (VARIANT == 1u) return g * pc.p[2] * (b + pc.p[0]);
  return g * pc.p[2] * pc.p[0] * exp_f(b * pc.p[2]);
}

float mish_bwd_f(float g, float x) {
  float s = sigmoid_f(x);
  float t = tanh_f(log1p_f(exp_f(x)));
  return g * (t + x * s * (1.0 - t * t));
}

// At the bends (x = -3, 3) torch's CPU kernels take the outer side for float16 / bfloat16
// inputs and the inner side for float32.
float hardswish_bwd_f(float g, float x) {
  bool outer = DT2 == DT_F16 || DT2 == DT_BF16;
  if (outer ? x <= -3.0 : x < -3.0) return 0.0;
  return (outer ? x < 3.0 : x <= 3.0) ? g * (x / 3.0 + 0.5) : g;
}

// The activations (and their gradients) OP_HARDSWISH_BWD .. OP_PRELU_BWD_W.
float activation_f(float a, float b, float c) {
  if (OP == OP_HARDSWISH_BWD) return hardswish_bwd_f(a, b);
  if (OP == OP_HARDSIGMOID) return clamp_nan_f(a + 3.0, 0.0, 6.0) / 6.0;
  if (OP == OP_HARDSIGMOID_BWD) return (b > -3.0 && b < 3.0) ? a * (1.0 / 6.0) : 0.0;
  if (OP == OP_LEAKY_RELU) return a > 0.0 ? a : a * pc.p[0];
  if (OP == OP_LEAKY_RELU_BWD) return b > 0.0 ? a : a * pc.p[0];
  if (OP == OP_ELU) return elu_f(a);
  if (OP == OP_ELU_BWD) return elu_bwd_f(a, b);
  if (OP == OP_SOFTPLUS) return softplus_f(a);
  if (OP == OP_SOFTPLUS_BWD) return softplus_bwd_f(a, b);
  if (OP == OP_MISH) return a * tanh_f(log1p_f(exp_f(a)));
  if (OP == OP_MISH_BWD) return mish_bwd_f(a, b);
  if (OP == OP_HARDTANH_BWD) return (b <= pc.p[0] || b >= pc.p[1]) ? 0.0 : a;
  if (OP == OP_PRELU) return a > 0.0 ? a : b * a;
  if (OP == OP_PRELU_BWD_IN) return b > 0.0 ? a : c * a;
  return b > 0.0 ? 0.0 : b * a;  // OP_PRELU_BWD_W
}

float op_f(uint idx[4]) {
  float a = in_f(1u, idx);
  float b = in_f(2u, idx);
  float c = in_f(3u, idx);
  if (OP == OP_ADD) return a + c * b;
  if (OP == OP_SUB) return a - c * b;
  if (OP == OP_MUL) return a * b;
  if (OP == OP_DIV) return a / b;
  if (OP == OP_NEG) return -a;
  if (OP == OP_RELU) return a > 0.0 ? a : (isnan(a) ? a : 0.0);
  if (OP == OP_ABS) return abs(a);
  if (OP == OP_EXP) return exp_f(a);
  if (OP == OP_LOG) return log_f(a);
  if (OP == OP_SQRT) return sqrt(a);
  if (OP == OP_RSQRT) return 1.0 / sqrt(a);
  if (OP == OP_RECIPROCAL) return 1.0 / a;
  if (OP == OP_POW) return pow_f(a, b);
  if (OP == OP_TANH) return tanh_f(a);
  if (OP == OP_SIGMOID) return sigmoid_f(a);
  if (OP == OP_GELU) return gelu_f(a);
  if (OP == OP_SILU) return a / (1.0 + exp_f(-a));
  if (OP == OP_HARDSWISH) return a * clamp_nan_f(a + 3.0, 0.0, 6.0) / 6.0;
  if (OP == OP_WHERE) return a != 0.0 ? b : c;
  if (OP == OP_EQ) return a == b ? 1.0 : 0.0;
  if (OP == OP_NE) return a == b ? 0.0 : 1.0;
  if (OP == OP_LT) return a < b ? 1.0 : 0.0;
  if (OP == OP_LE) return a <= b ? 1.0 : 0.0;
  if (OP == OP_GT) return a > b ? 1.0 : 0.0;
  if (OP == OP_GE) return a >= b ? 1.0 : 0.0;
  if (OP == OP_CLAMP) return clamp_f(a, b, (VARIANT & 1u) != 0u ? c : b);
  if (OP == OP_MAXIMUM) return max_f(a, b);
  if (OP == OP_MINIMUM) return min_f(a, b);
  if (OP == OP_SIN) return sincos_f(a, false);
  if (OP == OP_COS) return sincos_f(a, true);
  if (OP == OP_LOGICAL_NOT) return a == 0.0 ? 1.0 : 0.0;
  if (OP == OP_THRESHOLD_BWD) return b <= c ? 0.0 : a;
  if (OP == OP_GELU_BWD) return a * gelu_grad_f(b);
  if (OP == OP_SILU_BWD) {
    float s = sigmoid_f(b);
    return a * s * (1.0 + b * (1.0 - s));
  }
  if (OP == OP_SIGMOID_BWD) return a * (1.0 - b) * b;
  if (OP == OP_TANH_BWD) return a * (1.0 - b * b);
  if (OP == OP_DIV_TRUNC) return trunc(a / b);
  if (OP == OP_DIV_FLOOR) return div_floor_f(a, b);
  if (OP == OP_MASKED_FILL) return b != 0.0 ? c : a;
  if (OP >= OP_HARDSWISH_BWD && OP <= OP_PRELU_BWD_W) return activation_f(a, b, c);
  return a;
}

// Integer a ** b as torch's powi: negative exponents give 0 but for bases 1 and -1.
int64_t pow_i(int64_t a, int64_t b) {
  if (b < 0l) {
    if (a == 1l) return 1l;
    if (a == -1l) return (b & 1l) == 0l ? 1l : -1l;
    return 0l;
  }
  int64_t r = 1l;
  for (uint i = 0u; i < 64u && b != 0l; ++i) {
    if ((b & 1l) != 0l) r *= a;
    a *= a;
    b >>= 1;
  }
  return r;
}

int64_t op_i(uint idx[4]) {
  int64_t a = in_i(1u, idx);
  int64_t b = in_i(2u, idx);
  int64_t c = in_i(3u, idx);
  if (OP == OP_ADD) return a + c * b;
  if (OP == OP_SUB) return a - c * b;
  if (OP == OP_MUL) return a * b;
  if (OP == OP_NEG) return -a;
  if (OP == OP_RELU) return a > 0l ? a : 0l;
  if (OP == OP_ABS) {
    // Branch-free (all ones for negative a): the select form gave wrong int32 results on
    // llvmpipe.
    int64_t m = a >> 63;
    return (a ^ m) - m;
  }
  if (OP == OP_POW) return pow_i(a, b);
  if (OP == OP_WHERE) return a != 0l ? b : c;
  if (OP == OP_EQ) return a == b ? 1l : 0l;
  if (OP == OP_NE) return a != b ? 1l : 0l;
  if (OP == OP_LT) return a < b ? 1l : 0l;
  if (OP == OP_LE) return a <= b ? 1l : 0l;
  if (OP == OP_GT) return a > b ? 1l : 0l;
  if (OP == OP_GE) return a >= b ? 1l : 0l;
  if (OP == OP_CLAMP) {
    if ((VARIANT & 1u) != 0u) a = a < b ? b : a;
    int64_t hi = (VARIANT & 1u) != 0u ? c : b;
    if ((VARIANT & 2u) != 0u) a = hi < a ? hi : a;
    return a;
  }
  if (OP == OP_MAXIMUM) return a > b ? a : b;
  if (OP == OP_MINIMUM) return a < b ? a : b;
  if (OP == OP_LOGICAL_NOT) return a == 0l ? 1l : 0l;
  if (OP == OP_THRESHOLD_BWD) return b <= c ? 0l : a;
  if (OP == OP_MASKED_FILL) return b != 0l ? c : a;
  if (OP == OP_BITWISE_AND) return a & b;
  if (OP == OP_BITWISE_OR) return a | b;
  if (OP == OP_BITWISE_XOR) return a ^ b;
  if (OP == OP_BITWISE_NOT) return DT0 == DT_BOOL ? (a == 0l ? 1l : 0l) : ~a;
  return a;
}

void main() {
  for (uint i = linear_id(); i < pc.n; i += grid_size()) {
    uint idx[4];
    uint rest = i;
    for (uint d = 0u; d < 4u; ++d) {
      idx[d] = d < NDIM ? rest % pc.sizes[d] : 0u;
      if (d < NDIM) rest /= pc.sizes[d];
    }
    uint o = offset_of(0u, idx);
    if (INT_MATH != 0u) {
      st0i(DT0, o, op_i(idx));
    } else {
      float v = op_f(idx);
      // A bool result is whether the value is not zero (NaN included), as C converts.
      if (DT0 == DT_BOOL) {
        st0i(DT0, o, (isnan(v) || v != 0.0) ? 1l : 0l);
      } else {
        st0f(DT0, o, v);
      }
    }
  }
}
