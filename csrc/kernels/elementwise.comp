// Element-wise ops over up to four operands with strides and broadcasting (operand 0 the
// output, 1..3 inputs), each operand in its own dtype, computed in float32 (floating results)
// or in 64-bit integers (integer and bool results), as torch's TensorIterator lays them out
// (up to 4 dims after coalescing). An input may be a scalar: its value in push constants.
//
// Specialisation constants: 0 the op (OP_* below), 1 the number of dims, 2-5 the operands'
// dtypes, 6 the number of inputs, 7 integer compute (1) or float (0), 8 a bit per input that is
// a scalar (bit i: input i, from 1).
// Push constants (after base[8]): n elements, sizes[4] (innermost first), strides[4][4]
// (operand-major, in elements; a scalar input's two first strides hold its value: float32
// bits, or the 64-bit integer), alpha (float) and two op parameters.
#version 450
layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
  uint base[8];
  uint n;
  uint sizes[4];
  int strides[16];
  float alpha;
  float p0;
  float p1;
} pc;

#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)

layout(constant_id = 0) const uint OP = 0;
layout(constant_id = 1) const uint NDIM = 1;
layout(constant_id = 2) const uint DT0 = DT_F32;
layout(constant_id = 3) const uint DT1 = DT_F32;
layout(constant_id = 4) const uint DT2 = DT_F32;
layout(constant_id = 5) const uint DT3 = DT_F32;
layout(constant_id = 6) const uint NIN = 1;
layout(constant_id = 7) const uint INT_MATH = 0;
layout(constant_id = 8) const uint SCALARS = 0;

#define OP_COPY 0u
#define OP_ADD 1u
#define OP_SUB 2u
#define OP_MUL 3u
#define OP_DIV 4u
#define OP_NEG 5u
#define OP_RELU 6u

// The element offsets of operand `o` for linear index i.
uint offset_of(uint o, uint i) {
  uint off = 0u;
  for (uint d = 0u; d < NDIM; ++d) {
    uint idx = i % pc.sizes[d];
    i /= pc.sizes[d];
    off += uint(int(idx) * pc.strides[o * 4u + d]);
  }
  return off;
}

bool is_scalar(uint o) { return (SCALARS & (1u << o)) != 0u; }
float scalar_f(uint o) { return uintBitsToFloat(uint(pc.strides[o * 4u])); }
int64_t scalar_i(uint o) {
  return int64_t(packUint2x32(uvec2(uint(pc.strides[o * 4u]), uint(pc.strides[o * 4u + 1u]))));
}

float in_f(uint o, uint i) {
  if (is_scalar(o)) return scalar_f(o);
  uint e = offset_of(o, i);
  if (o == 1u) return ld1f(DT1, e);
  if (o == 2u) return ld2f(DT2, e);
  return ld3f(DT3, e);
}
int64_t in_i(uint o, uint i) {
  if (is_scalar(o)) return scalar_i(o);
  uint e = offset_of(o, i);
  if (o == 1u) return ld1i(DT1, e);
  if (o == 2u) return ld2i(DT2, e);
  return ld3i(DT3, e);
}

float op_f(uint i) {
  float a = in_f(1u, i);
  float b = NIN > 1u ? in_f(2u, i) : 0.0;
  if (OP == OP_ADD) return a + pc.alpha * b;
  if (OP == OP_SUB) return a - pc.alpha * b;
  if (OP == OP_MUL) return a * b;
  if (OP == OP_DIV) return a / b;
  if (OP == OP_NEG) return -a;
  if (OP == OP_RELU) return a > 0.0 ? a : (isnan(a) ? a : 0.0);
  return a;
}

int64_t op_i(uint i) {
  int64_t a = in_i(1u, i);
  int64_t b = NIN > 1u ? in_i(2u, i) : 0l;
  int64_t alpha = int64_t(pc.alpha);
  if (OP == OP_ADD) return a + alpha * b;
  if (OP == OP_SUB) return a - alpha * b;
  if (OP == OP_MUL) return a * b;
  if (OP == OP_NEG) return -a;
  if (OP == OP_RELU) return a > 0l ? a : 0l;
  return a;
}

void main() {
  for (uint i = linear_id(); i < pc.n; i += grid_size()) {
    uint o = offset_of(0u, i);
    if (INT_MATH != 0u) {
      st0i(DT0, o, op_i(i));
    } else {
      st0f(DT0, o, op_f(i));
    }
  }
}
