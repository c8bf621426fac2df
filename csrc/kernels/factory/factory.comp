// Tensors written from their index (arange, linspace, eye) and index-conditioned copies
// (tril / triu: a batch of matrices; roll: a shift along one dim) over a strided geometry of
// up to 3 dims (cols, rows, batch). The copies move bits (the glue passes an integer dtype of
// the element's width), so every dtype copies exactly.
//
// Ops, specialisation constants and push constants: factory.h.
#version 450
layout(local_size_x = 256) in;

#include "factory/factory.h"
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)

double f64_of(uint w[2]) { return packDouble2x32(uvec2(w[0], w[1])); }
int64_t i64_of(uint w[2]) { return int64_t(packUint2x32(uvec2(w[0], w[1]))); }

// v rounded to the output's precision: linspace computes in the output's dtype (float16 /
// bfloat16 arithmetic rounds each result); arange in float32 for those.
float rnd(float v) {
  if (OP != OP_LINSPACE) return v;
  if (DT0 == DT_F16) return float(float16_t(v));
  if (DT0 == DT_BF16) return bf16_to_float(float_to_bf16(v));
  return v;
}

// arange / linspace's value at i.
void store_range(uint o, uint i) {
  bool low = OP == OP_ARANGE || i < pc.mid;
  // linspace's upper half counts back from the end.
  uint j = OP == OP_ARANGE ? i : (low ? i : pc.steps - i - 1u);
  if (MATH == MATH_I64) {
    st0i(DT0, o, i64_of(pc.a) + i64_of(pc.b) * int64_t(j));
  } else if (MATH == MATH_F32) {
    precise float step = rnd(uintBitsToFloat(pc.b[0]) * rnd(float(j)));
    precise float v = low ? uintBitsToFloat(pc.a[0]) + step : uintBitsToFloat(pc.c[0]) - step;
    st0f(DT0, o, v);
  } else {
    precise double step = f64_of(pc.b) * double(j);
    precise double v = low ? f64_of(pc.a) + step : f64_of(pc.c) - step;
    if (DT0 == DT_F64) {
      arg0_u64.v[at0(DT0, o)] = doubleBitsToUint64(v);
    } else if (dtype_is_float(DT0)) {
      st0f(DT0, o, float(v));
    } else {
      st0i(DT0, o, int64_t(v));  // toward zero, as C converts
    }
  }
}

void main() {
  for (uint i = linear_id(); i < pc.n; i += grid_size()) {
    uint col = i % pc.sizes[0];
    uint row = (i / pc.sizes[0]) % pc.sizes[1];
    uint mat = i / (pc.sizes[0] * pc.sizes[1]);
    uint o = uint(int(col) * pc.ostrides[0] + int(row) * pc.ostrides[1] +
                  int(mat) * pc.ostrides[2]);
    if (OP == OP_ARANGE || OP == OP_LINSPACE) {
      store_range(o, i);
    } else if (OP == OP_EYE) {
      st0i(DT0, o, col == row ? 1l : 0l);
    } else {
      int d = int(col) - int(row);
      bool keep = OP == OP_ROLL || (OP == OP_TRIL ? d <= pc.k : d >= pc.k);
      uint src = OP == OP_ROLL ? (row + pc.sizes[1] - uint(pc.k)) % pc.sizes[1] : row;
      uint e = uint(int(col) * pc.istrides[0] + int(src) * pc.istrides[1] +
                    int(mat) * pc.istrides[2]);
      st0i(DT0, o, keep ? ld1i(DT1, e) : 0l);
    }
  }
}
