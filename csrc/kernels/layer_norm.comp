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
// Specialisation constants: 0 the op (OP_*), 1 x's dtype (also out / dx and dy), 2 weight's
// and bias's, 3 mean's and rstd's, 4 has weight, 5 has bias, 6 / 7 the number of row dims /
// normalized dims (1..3), 8 dy's dtype.
// Arguments: 0 out (forward) or dx, 1 x, 2 mean, 3 rstd (written by the forward), 4 weight,
// 5 bias (forward) or dy (backward); an absent one binds another argument, unused.
// Push constants (after base[8]): rows, len, eps, the row dims' sizes (innermost first), x's and
// dy's strides over them, the normalized dims' sizes, x's and dy's strides over them (elements).
#version 450
layout(local_size_x = 256) in;

layout(push_constant) uniform Push {
  uint base[8];
  uint rows;
  uint len;
  float eps;
  uint osize[3];
  uint ostride[6];
  uint isize[3];
  uint istride[6];
} pc;

#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)
MPSRT_ARG(4)
MPSRT_ARG(5)

layout(constant_id = 0) const uint OP = 0;
layout(constant_id = 1) const uint DTX = DT_F32;
layout(constant_id = 2) const uint DTW = DT_F32;
layout(constant_id = 3) const uint DTS = DT_F32;
layout(constant_id = 4) const uint HAS_W = 0;
layout(constant_id = 5) const uint HAS_B = 0;
layout(constant_id = 6) const uint ONDIM = 1;
layout(constant_id = 7) const uint INDIM = 1;
layout(constant_id = 8) const uint DTG = DT_F32;

#define OP_FORWARD 0u
#define OP_BACKWARD 1u

#define LOCAL 256u
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
