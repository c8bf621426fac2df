// Layer norm over rows, forward and the input's gradient: row o (the leading dims, up to 3
// after coalescing) normalises its `len` elements (the normalized dims, up to 3), read strided;
// the results are contiguous (row o's element r at o * len + r), mean and rstd one per row,
// weight and bias contiguous over the normalized dims. Float32 math, two passes for the
// variance (biased, as torch's layer norm).
//   FORWARD:   mean, rstd = 1 / sqrt(var + eps), out = (x - mean) * rstd * w + b
//   BACKWARD:  xh = (x - mean) * rstd, g = dy * w,
//              dx = rstd * (g - mean(g) - xh * mean(g * xh))
// A workgroup of 256 invocations per row (each loops over every 256th element, then tree
// reductions in shared memory; rows of up to 256 * 65534 elements).
//
// Ops, specialisation constants and push constants: layer_norm.h.
// Arguments: 0 out (forward) or dx, 1 x, 2 mean, 3 rstd (written by the forward), 4 weight,
// 5 bias (forward) or dy (backward); an absent one binds another argument, unused.
#version 450
layout(local_size_x = 256) in;

#include "norm/layer_norm.h"
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)
MPSRT_ARG(4)
MPSRT_ARG(5)

shared float s_a[LOCAL];
shared float s_b[LOCAL];

// Offsets (elements) of row o's first element and of element r in a row, for operand a
// (0: x, 1: dy).
uint row_offset(uint a, uint o) {
  uint off = 0u;
  for (uint d = 0u; d < ONDIM; ++d) {
    off += (o % pc.osize[d]) * pc.ostride[a * 3u + d];
    o /= pc.osize[d];
  }
  return off;
}
uint elem_offset(uint a, uint r) {
  uint off = 0u;
  for (uint d = 0u; d < INDIM; ++d) {
    off += (r % pc.isize[d]) * pc.istride[a * 3u + d];
    r /= pc.isize[d];
  }
  return off;
}

// Sums of two values across the workgroup (every invocation gets them). Uniform control flow.
vec2 group_sum2(vec2 v, uint lid) {
  s_a[lid] = v.x;
  s_b[lid] = v.y;
  barrier();
  for (uint s = LOCAL / 2u; s > 0u; s >>= 1u) {
    if (lid < s) {
      s_a[lid] += s_a[lid + s];
      s_b[lid] += s_b[lid + s];
    }
    barrier();
  }
  vec2 r = vec2(s_a[0], s_b[0]);
  barrier();
  return r;
}

void forward(uint o, uint lid) {
  uint bx = row_offset(0u, o);
  float n = float(pc.len);
  float s = 0.0;
  for (uint r = lid; r < pc.len; r += LOCAL) s += ld1f(DTX, bx + elem_offset(0u, r));
  float mean = group_sum2(vec2(s, 0.0), lid).x / n;
  float q = 0.0;
  for (uint r = lid; r < pc.len; r += LOCAL) {
    float d = ld1f(DTX, bx + elem_offset(0u, r)) - mean;
    q += d * d;
  }
  float rstd = inversesqrt(group_sum2(vec2(q, 0.0), lid).x / n + pc.eps);
  for (uint r = lid; r < pc.len; r += LOCAL) {
    float y = (ld1f(DTX, bx + elem_offset(0u, r)) - mean) * rstd;
    if (HAS_W != 0u) y *= ld4f(DTW, r);
    if (HAS_B != 0u) y += ld5f(DTW, r);
    st0f(DTX, o * pc.len + r, y);
  }
  if (lid == 0u) {
    st2f(DTS, o, mean);
    st3f(DTS, o, rstd);
  }
}

void backward(uint o, uint lid) {
  uint bx = row_offset(0u, o), bg = row_offset(1u, o);
  float mean = ld2f(DTS, o), rstd = ld3f(DTS, o);
  vec2 s = vec2(0.0);  // sum(g), sum(g * xh)
  for (uint r = lid; r < pc.len; r += LOCAL) {
    float xh = (ld1f(DTX, bx + elem_offset(0u, r)) - mean) * rstd;
    float g = ld5f(DTG, bg + elem_offset(1u, r));
    if (HAS_W != 0u) g *= ld4f(DTW, r);
    s += vec2(g, g * xh);
  }
  s = group_sum2(s, lid) / float(pc.len);
  for (uint r = lid; r < pc.len; r += LOCAL) {
    float xh = (ld1f(DTX, bx + elem_offset(0u, r)) - mean) * rstd;
    float g = ld5f(DTG, bg + elem_offset(1u, r));
    if (HAS_W != 0u) g *= ld4f(DTW, r);
    st0f(DTX, o * pc.len + r, rstd * (g - s.x - xh * s.y));
  }
}

void main() {
  // One row per workgroup (uniform across it: the barriers stay in uniform control flow).
  uint o = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  if (o >= pc.rows) return;
  if (OP == OP_FORWARD) {
    forward(o, gl_LocalInvocationID.x);
  } else {
    backward(o, gl_LocalInvocationID.x);
  }
}
