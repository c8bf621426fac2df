// Reductions of a strided input over some of its dims (sum, mean, amax/amin, argmax/argmin,
// max/min with indices, var/std), as a 2-D problem: output row o (the kept dims, the output
// contiguous in their order) reduces the `len` elements r of the reduced dims (r: their linear
// index in the input's logical order, which is what argmax/argmin return). Float inputs are
// reduced in float32, integer and bool inputs in 64-bit integers (sum, max/min, arg*).
//
// Two shapes of launch (PER_GROUP): a workgroup of 256 invocations per row (each invocation
// loops over every 256th element, then a tree reduction in shared memory: rows of up to
// 256 * 65534 elements), or one invocation per row (short rows, or rows whose kept dim is the
// input's dense one, so that neighbouring invocations read neighbouring elements; rows under
// 65535 elements), the grid looping over rows.
//
// Ops, specialisation constants and push constants: reduce.h.
// Arguments: 0 the output (values, or the indices for OUT_INDEX), 1 the input, 2 for OUT_BOTH
// the indices (int64; max/min) or the mean (var/std, in the output's dtype).
#version 450
layout(local_size_x = 256) in;

#include "reduce/reduce.h"
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)

const uint NONE = 0xffffffffu;  // no element seen yet (max/min)

shared float s_f[LOCAL];
shared int64_t s_i[LOCAL];
shared uint s_idx[LOCAL];

// The input offset (elements) of row o's first element, and of element r within a row.
uint row_offset(uint o) {
  uint off = 0u;
  for (uint d = 0u; d < ONDIM; ++d) {
    off += (o % pc.osize[d]) * pc.ostride[d];
    o /= pc.osize[d];
  }
  return off;
}
uint elem_offset(uint r) {
  uint off = 0u;
  for (uint d = 0u; d < RNDIM; ++d) {
    off += (r % pc.rsize[d]) * pc.rstride[d];
    r /= pc.rsize[d];
  }
  return off;
}

// Whether value a at index ia wins over b at ib for max/min: an element over none, NaN over
// numbers (torch propagates NaN), the larger (max) or smaller (min), the first on ties.
bool wins_f(float a, uint ia, float b, uint ib) {
  if (ia == NONE) return false;
  if (ib == NONE) return true;
  bool na = isnan(a), nb = isnan(b);
  if (na || nb) return na && (!nb || ia < ib);
  if (a != b) return OP == OP_MAX ? a > b : a < b;
  return ia < ib;
}
bool wins_i(int64_t a, uint ia, int64_t b, uint ib) {
  if (ia == NONE) return false;
  if (ib == NONE) return true;
  if (a != b) return OP == OP_MAX ? a > b : a < b;
  return ia < ib;
}

// Tree reductions across the workgroup (every invocation gets the result); identity where
// an invocation covers the whole row. Called in uniform control flow only.
float group_sum_f(float v, uint lid) {
  if (PER_GROUP == 0u) return v;
  s_f[lid] = v;
  barrier();
  for (uint s = LOCAL / 2u; s > 0u; s >>= 1u) {
    if (lid < s) s_f[lid] += s_f[lid + s];
    barrier();
  }
  float r = s_f[0];
  barrier();
  return r;
}
int64_t group_sum_i(int64_t v, uint lid) {
  if (PER_GROUP == 0u) return v;
  s_i[lid] = v;
  barrier();
  for (uint s = LOCAL / 2u; s > 0u; s >>= 1u) {
    if (lid < s) s_i[lid] += s_i[lid + s];
    barrier();
  }
  int64_t r = s_i[0];
  barrier();
  return r;
}
void group_best_f(inout float v, inout uint idx, uint lid) {
  if (PER_GROUP == 0u) return;
  s_f[lid] = v;
  s_idx[lid] = idx;
  barrier();
  for (uint s = LOCAL / 2u; s > 0u; s >>= 1u) {
    if (lid < s && wins_f(s_f[lid + s], s_idx[lid + s], s_f[lid], s_idx[lid])) {
      s_f[lid] = s_f[lid + s];
      s_idx[lid] = s_idx[lid + s];
    }
    barrier();
  }
  v = s_f[0];
  idx = s_idx[0];
  barrier();
}
void group_best_i(inout int64_t v, inout uint idx, uint lid) {
  if (PER_GROUP == 0u) return;
  s_i[lid] = v;
  s_idx[lid] = idx;
  barrier();
  for (uint s = LOCAL / 2u; s > 0u; s >>= 1u) {
    if (lid < s && wins_i(s_i[lid + s], s_idx[lid + s], s_i[lid], s_idx[lid])) {
      s_i[lid] = s_i[lid + s];
      s_idx[lid] = s_idx[lid + s];
    }
    barrier();
  }
  v = s_i[0];
  idx = s_idx[0];
  barrier();
}

// Writes row o's result: the value, its index, or both.
void write_f(uint o, float v, uint idx) {
  if (OUT == OUT_INDEX) {
    st0i(DT_I64, o, int64_t(idx));
  } else {
    st0f(DTO, o, v);
    if (OUT == OUT_BOTH) st2i(DT_I64, o, int64_t(idx));
  }
}
void write_i(uint o, int64_t v, uint idx) {
  if (OUT == OUT_INDEX) {
    st0i(DT_I64, o, int64_t(idx));
  } else {
    st0i(DTO, o, v);
    if (OUT == OUT_BOTH) st2i(DT_I64, o, int64_t(idx));
  }
}

// var / std from the sum of squared deviations q over n elements: q / max(0, n - correction)
// (explicitly inf or NaN where that divides by zero, as torch's CPU kernel gives).
float var_of(float q, uint n) {
  float dof = max(0.0, float(n) - pc.correction);
  float inf = uintBitsToFloat(0x7f800000u), nan = uintBitsToFloat(0x7fc00000u);
  float v = dof > 0.0 ? q / dof : (q > 0.0 ? inf : nan);
  return OP == OP_STD ? sqrt(v) : v;
}

// Row o in float math; invocation `lid` of the row's `step` covers elements lid, lid + step, ...
void row_float(uint o, uint lid, uint step) {
  uint ob = row_offset(o);
  uint n = pc.len;
  if (OP == OP_MAX || OP == OP_MIN) {
    float best = 0.0;
    uint bi = NONE;
    for (uint r = lid; r < n; r += step) {
      float x = ld1f(DTI, ob + elem_offset(r));
      if (wins_f(x, r, best, bi)) {
        best = x;
        bi = r;
      }
    }
    group_best_f(best, bi, lid);
    if (lid == 0u) write_f(o, best, bi);
    return;
  }
  float s = 0.0;
  for (uint r = lid; r < n; r += step) s += ld1f(DTI, ob + elem_offset(r));
  s = group_sum_f(s, lid);
  if (OP == OP_SUM || OP == OP_MEAN) {
    if (lid == 0u) write_f(o, OP == OP_SUM ? s : s / float(n), 0u);
    return;
  }
  // var / std: a second pass over the row, around the mean.
  float mean = s / float(n);
  float q = 0.0;
  for (uint r = lid; r < n; r += step) {
    float d = ld1f(DTI, ob + elem_offset(r)) - mean;
    q += d * d;
  }
  q = group_sum_f(q, lid);
  if (lid == 0u) {
    st0f(DTO, o, var_of(q, n));
    if (OUT == OUT_BOTH) st2f(DTO, o, mean);  // var_mean / std_mean
  }
}

// Row o in 64-bit integer math (sum, max/min).
void row_int(uint o, uint lid, uint step) {
  uint ob = row_offset(o);
  uint n = pc.len;
  if (OP == OP_MAX || OP == OP_MIN) {
    int64_t best = 0l;
    uint bi = NONE;
    for (uint r = lid; r < n; r += step) {
      int64_t x = ld1i(DTI, ob + elem_offset(r));
      if (wins_i(x, r, best, bi)) {
        best = x;
        bi = r;
      }
    }
    group_best_i(best, bi, lid);
    if (lid == 0u) write_i(o, best, bi);
    return;
  }
  int64_t s = 0l;
  for (uint r = lid; r < n; r += step) s += ld1i(DTI, ob + elem_offset(r));
  s = group_sum_i(s, lid);
  if (lid == 0u) write_i(o, s, 0u);
}

void main() {
  if (PER_GROUP != 0u) {
    // One row per workgroup (uniform across it, so the barriers stay in uniform control flow).
    uint o = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (o >= pc.rows) return;
    if (INT_MATH != 0u) {
      row_int(o, gl_LocalInvocationID.x, LOCAL);
    } else {
      row_float(o, gl_LocalInvocationID.x, LOCAL);
    }
    return;
  }
  for (uint o = linear_id(); o < pc.rows; o += grid_size()) {
    if (INT_MATH != 0u) {
      row_int(o, 0u, 1u);
    } else {
      row_float(o, 0u, 1u);
    }
  }
}
