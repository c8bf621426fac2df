// softmax / log_softmax along one dim and their backward, over strided operands: row o (the
// other dims, up to 3 after coalescing) holds the `len` elements along the dim. Float32 math,
// the row's maximum subtracted before exp.
//   SOFTMAX:      out = exp(x - max) / sum(exp(x - max))
//   LOG_SOFTMAX:  out = x - max - log(sum(exp(x - max)))
//   SOFTMAX_BWD:  grad_in = y * (g - sum(g * y))          (y: softmax's output)
//   LOG_BWD:      grad_in = g - exp(y) * sum(g)           (y: log_softmax's output)
// A workgroup of 256 invocations per row (each loops over every 256th element, then tree
// reductions in shared memory; rows of up to 256 * 65534) or one invocation per row (short
// rows: under 65535), by PER_GROUP.
//
// Ops, specialisation constants and push constants: softmax.h.
// Arguments: 0 the result, 1 x (forward) or g (backward), 2 y (backward; else unused).
#version 450
layout(local_size_x = 256) in;

#include "norm/softmax.h"
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)

shared float s_f[LOCAL];

// Argument a's offset (elements) of row o's first element.
uint row_offset(uint a, uint o) {
  uint off = 0u;
  for (uint d = 0u; d < ONDIM; ++d) {
    off += (o % pc.osize[d]) * pc.ostride[a * 3u + d];
    o /= pc.osize[d];
  }
  return off;
}

// NaN-propagating maximum (a NaN in the row makes the whole row NaN, as on torch's CPU).
float max_nan(float a, float b) {
  return (isnan(a) || a > b) ? a : b;
}

// Tree reductions across the workgroup (every invocation gets the result); identity where one
// invocation covers the row. Called in uniform control flow only.
float group_sum(float v, uint lid) {
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
float group_max(float v, uint lid) {
  if (PER_GROUP == 0u) return v;
  s_f[lid] = v;
  barrier();
  for (uint s = LOCAL / 2u; s > 0u; s >>= 1u) {
    if (lid < s) s_f[lid] = max_nan(s_f[lid], s_f[lid + s]);
    barrier();
  }
  float r = s_f[0];
  barrier();
  return r;
}

void forward(uint o, uint lid, uint step) {
  uint b0 = row_offset(0u, o), b1 = row_offset(1u, o);
  uint s0 = pc.dstride[0], s1 = pc.dstride[1];
  float m = uintBitsToFloat(0xff800000u);  // -inf
  for (uint r = lid; r < pc.len; r += step) m = max_nan(m, ld1f(DT1, b1 + r * s1));
  m = group_max(m, lid);
  float sum = 0.0;
  for (uint r = lid; r < pc.len; r += step) sum += exp(ld1f(DT1, b1 + r * s1) - m);
  sum = group_sum(sum, lid);
  if (OP == OP_SOFTMAX) {
    float inv = 1.0 / sum;
    for (uint r = lid; r < pc.len; r += step) {
      st0f(DT0, b0 + r * s0, exp(ld1f(DT1, b1 + r * s1) - m) * inv);
    }
  } else {
    float shift = m + log(sum);
    for (uint r = lid; r < pc.len; r += step) {
      st0f(DT0, b0 + r * s0, ld1f(DT1, b1 + r * s1) - shift);
    }
  }
}

void backward(uint o, uint lid, uint step) {
  uint b0 = row_offset(0u, o), b1 = row_offset(1u, o), b2 = row_offset(2u, o);
  uint s0 = pc.dstride[0], s1 = pc.dstride[1], s2 = pc.dstride[2];
  float sum = 0.0;
  for (uint r = lid; r < pc.len; r += step) {
    float g = ld1f(DT1, b1 + r * s1);
    sum += OP == OP_SOFTMAX_BWD ? g * ld2f(DT2, b2 + r * s2) : g;
  }
  sum = group_sum(sum, lid);
  for (uint r = lid; r < pc.len; r += step) {
    float g = ld1f(DT1, b1 + r * s1);
    float y = ld2f(DT2, b2 + r * s2);
    st0f(DT0, b0 + r * s0, OP == OP_SOFTMAX_BWD ? y * (g - sum) : g - exp(y) * sum);
  }
}

void row(uint o, uint lid, uint step) {
  if (OP == OP_SOFTMAX || OP == OP_LOG_SOFTMAX) {
    forward(o, lid, step);
  } else {
    backward(o, lid, step);
  }
}

void main() {
  if (PER_GROUP != 0u) {
    // One row per workgroup (uniform across it: the barriers stay in uniform control flow).
    uint o = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (o < pc.rows) row(o, gl_LocalInvocationID.x, LOCAL);
    return;
  }
  for (uint o = linear_id(); o < pc.rows; o += grid_size()) row(o, 0u, 1u);
}
