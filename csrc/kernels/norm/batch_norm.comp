// Batch norm (and group norm) over channels, forward and backward. Channel k has `count`
// elements: element i is at k * cstride[a] + the reduction dims' offset of i (up to 3 dims after
// coalescing, innermost first, strided: any layout, channels-last too), for operand a (0: x,
// 1: dy, 2: out / dx). Float32 math and statistics; x / dy / out float32, float16 or bfloat16.
//   STATS:      per (channel, chunk of `chunk` elements): Welford (count, mean, M2), float32
//               partials [channel][chunk][3]; a workgroup per (chunk, channel), tree merge
//               (workgroup x: the chunk; y and z: the channel, z * groups in y + y).
//   MERGE:      per channel (an invocation): the partials merged (Welford) -> mean, invstd =
//               1 / sqrt(var + eps) (biased var); running stats (HAS_RUN) updated in place:
//               r = momentum * stat + (1 - momentum) * r, the variance unbiased (M2 / (n - 1)).
//   STATS_MERGE: where a channel is one chunk: STATS's workgroup per channel ends with MERGE's
//               work on its one partial (the partials are never written).
//   APPLY:      out = (x - mean) * invstd * w + b (w, b optional; VAR: invstd from a variance).
//   GRAD_SUMS:  per (channel, chunk): sums of dy and dy * (x - mean), float32 [channel][chunk][2].
//   GRAD_MERGE: per channel: the sums [channel][2]; dw = sum(dy * (x - mean)) * invstd, db =
//               sum(dy) where wanted.
//   GRAD_APPLY: TRAIN: dx = (dy - s0 / n - (x - mean) * invstd^2 * s1 / n) * invstd * w;
//               else dx = dy * invstd * w.
// Group norm (GN, contiguous [N, C, HW] input, G groups of D channels): GN_ROWS makes the
// channels the N * G rows of D * HW elements, with weight / bias per element's channel (the
// gradient's sums then take g = dy * w, and dx = (g - s0 / n - (x - mean) * invstd^2 * s1 / n) *
// invstd); GN_COLS reduces channel c over (hw, n) with row (n, c / D)'s statistics: sums of dy
// and dy * (x - mean) * invstd (the weight's gradient is then s1 itself).
//
// Ops, specialisation constants and push constants: batch_norm.h.
// Arguments: 0 out / dx / partials (written), 1 x, 2 mean, 3 invstd or variance (written by
// MERGE), 4 weight / running mean / dw, 5 bias / running var / db, 6 dy (GRAD_SUMS, GRAD_APPLY)
// or partials (the merges), 7 sums [channel][2] (GRAD_MERGE writes, GRAD_APPLY reads); an absent
// one binds another argument, unused.
#version 450
layout(local_size_x = 256) in;

#include "norm/batch_norm.h"
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)
MPSRT_ARG(4)
MPSRT_ARG(5)
MPSRT_ARG(6)
MPSRT_ARG(7)

shared float s_n[LOCAL];
shared float s_m[LOCAL];
shared float s_q[LOCAL];

// Offset (elements) of channel k's element i in operand a (0: x, 1: dy, 2: out).
uint offset(uint a, uint k, uint i) {
  uint off = k * pc.cstride[a];
  for (uint d = 0u; d < RDIM; ++d) {
    off += (i % pc.rsize[d]) * pc.rstride[a * 3u + d];
    i /= pc.rsize[d];
  }
  return off;
}

// The index of the statistics for channel k's element i.
uint stat_index(uint k, uint i) {
  if (GN == GN_COLS) return (i / pc.hw) * pc.groups + k / pc.group_channels;
  return k;
}

// The weight's / bias's index for channel k's element i.
uint param_index(uint k, uint i) {
  if (GN == GN_ROWS) return (k % pc.groups) * pc.group_channels + i / pc.hw;
  return k;
}

float invstd_at(uint s) {
  float v = ld3f(DTS, s);
  return VAR != 0u ? inversesqrt(v + pc.eps) : v;
}

// Welford merge of (n, mean, M2) b into a.
vec3 welford(vec3 a, vec3 b) {
  float n = a.x + b.x;
  if (n == 0.0) return a;
  float d = b.y - a.y;
  return vec3(n, a.y + d * (b.x / n), a.z + b.z + d * d * (a.x * b.x / n));
}

// The workgroup's merge of v (Welford, or plain sums of .yz with `sums`): invocation 0 gets it.
vec3 group_merge(vec3 v, uint lid, bool sums) {
  s_n[lid] = v.x;
  s_m[lid] = v.y;
  s_q[lid] = v.z;
  barrier();
  for (uint s = LOCAL / 2u; s > 0u; s >>= 1u) {
    if (lid < s) {
      vec3 a = vec3(s_n[lid], s_m[lid], s_q[lid]);
      vec3 b = vec3(s_n[lid + s], s_m[lid + s], s_q[lid + s]);
      vec3 r = sums ? a + b : welford(a, b);
      s_n[lid] = r.x;
      s_m[lid] = r.y;
      s_q[lid] = r.z;
    }
    barrier();
  }
  return vec3(s_n[0], s_m[0], s_q[0]);
}

// Channel k's statistics from its merged (n, mean, M2) v: mean, invstd = 1 / sqrt(var + eps)
// (biased var); the running statistics (HAS_RUN) updated in place.
void finish_stats(uint k, vec3 v) {
  float var = v.z / v.x;
  st2f(DTS, k, v.y);
  st3f(DTS, k, inversesqrt(var + pc.eps));
  if (HAS_RUN == 0u) return;
  float m = pc.momentum;
  st4f(DTR, k, m * v.y + (1.0 - m) * ld4f(DTR, k));
  st5f(DTR, k, m * (v.z / (v.x - 1.0)) + (1.0 - m) * ld5f(DTR, k));
}

// STATS, STATS_MERGE and GRAD_SUMS: a workgroup per (chunk, channel) (uniform: barriers in
// uniform flow).
void chunk_op(uint lid) {
  uint c = gl_WorkGroupID.x, k = gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y;
  if (k >= pc.channels) return;  // the whole workgroup (uniform)
  uint lo = c * pc.chunk, hi = min(pc.count, lo + pc.chunk);
  vec3 v = vec3(0.0);
  bool grad = OP == OP_GRAD_SUMS;
  float mean = 0.0, r = 1.0;
  if (grad && GN != GN_COLS) mean = ld2f(DTS, k);
  for (uint i = lo + lid; i < hi; i += LOCAL) {
    float x = ld1f(DTX, offset(0u, k, i));
    if (!grad) {
      v = welford(v, vec3(1.0, x, 0.0));
      continue;
    }
    float g = ld6f(DTG, offset(1u, k, i));
    if (GN == GN_ROWS && HAS_W != 0u) g *= ld4f(DTW, param_index(k, i));
    if (GN == GN_COLS) {
      uint s = stat_index(k, i);
      mean = ld2f(DTS, s);
      r = invstd_at(s);
    }
    v += vec3(0.0, g, g * (x - mean) * r);
  }
  v = group_merge(v, lid, grad);
  if (lid != 0u) return;
  if (OP == OP_STATS_MERGE) {
    finish_stats(k, v);
    return;
  }
  uint p = k * pc.chunks + c;
  if (grad) {
    st0f(DT_F32, p * 2u, v.y);
    st0f(DT_F32, p * 2u + 1u, v.z);
  } else {
    st0f(DT_F32, p * 3u, v.x);
    st0f(DT_F32, p * 3u + 1u, v.y);
    st0f(DT_F32, p * 3u + 2u, v.z);
  }
}

void merge(uint k) {
  vec3 v = vec3(0.0);
  for (uint c = 0u; c < pc.chunks; ++c) {
    uint p = k * pc.chunks + c;
    vec3 b = vec3(ld6f(DT_F32, p * 3u), ld6f(DT_F32, p * 3u + 1u), ld6f(DT_F32, p * 3u + 2u));
    v = welford(v, b);
  }
  finish_stats(k, v);
}

void grad_merge(uint k) {
  vec2 s = vec2(0.0);
  for (uint c = 0u; c < pc.chunks; ++c) {
    uint p = k * pc.chunks + c;
    s += vec2(ld6f(DT_F32, p * 2u), ld6f(DT_F32, p * 2u + 1u));
  }
  st7f(DT_F32, k * 2u, s.x);
  st7f(DT_F32, k * 2u + 1u, s.y);
  if (HAS_W != 0u) st4f(DTW, k, GN == GN_COLS ? s.y : s.y * invstd_at(k));
  if (HAS_B != 0u) st5f(DTW, k, s.x);
}

void apply(uint k, uint i) {
  float x = ld1f(DTX, offset(0u, k, i));
  float y = (x - ld2f(DTS, k)) * invstd_at(k);
  uint w = param_index(k, i);
  if (HAS_W != 0u) y *= ld4f(DTW, w);
  if (HAS_B != 0u) y += ld5f(DTW, w);
  st0f(DTX, offset(2u, k, i), y);
}

void grad_apply(uint k, uint i) {
  float g = ld6f(DTG, offset(1u, k, i));
  float r = invstd_at(k);
  float w = HAS_W != 0u ? ld4f(DTW, param_index(k, i)) : 1.0;
  float dx;
  if (TRAIN == 0u) {
    dx = g * r * w;
  } else {
    float x = ld1f(DTX, offset(0u, k, i));
    float n = float(pc.count);
    float s0 = ld7f(DT_F32, k * 2u) / n, s1 = ld7f(DT_F32, k * 2u + 1u) / n;
    float d = (x - ld2f(DTS, k)) * r * r * s1;
    dx = GN == GN_ROWS ? (g * w - s0 - d) * r : (g - s0 - d) * r * w;
  }
  st0f(DTX, offset(2u, k, i), dx);
}

void main() {
  if (OP == OP_STATS || OP == OP_STATS_MERGE || OP == OP_GRAD_SUMS) {
    chunk_op(gl_LocalInvocationID.x);
    return;
  }
  if (OP == OP_MERGE || OP == OP_GRAD_MERGE) {
    for (uint k = linear_id(); k < pc.channels; k += grid_size()) {
      if (OP == OP_MERGE) merge(k);
      else grad_merge(k);
    }
    return;
  }
  uint total = pc.channels * pc.count;
  for (uint e = linear_id(); e < total; e += grid_size()) {
    if (OP == OP_APPLY) apply(e / pc.count, e % pc.count);
    else grad_apply(e / pc.count, e % pc.count);
  }
}
