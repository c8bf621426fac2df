// Pooling over tensors seen as [N, C, D, H, W] (1-d and 2-d pools: D and H of 1, kernel 1):
// max (values, and int64 flat indices in the D*H*W plane; NaN wins: the last NaN's index),
// average (count_include_pad, divisor_override), adaptive max and adaptive average, forward and
// backward, computed in float32. One invocation per written element; every backward is a
// gather (each grad_input element sums the grad_output elements whose windows reach it, in
// output order): deterministic, no atomics.
//   forward:  binding 0 out (strides ds), 1 indices (ds; the max ops), 2 input (ss).
//   backward: binding 0 grad_input (ds), 1 indices (ss; the max ops), 2 grad_output (ss).
// The glue keeps the window of an output (forward) and the outputs that can reach an element
// (backward) at most 8192 per invocation (llvmpipe's loop limit) and flat indices below 2^31.
//
// Ops, specialisation constants and push constants: pool.h.
#version 450
layout(local_size_x = 256) in;

#include "pool/pool.h"
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)

const bool BACKWARD = OP >= OP_MAX_BACKWARD;
const bool ADAPTIVE = OP == OP_ADAPTIVE_MAX || OP == OP_ADAPTIVE_AVG ||
                      OP == OP_ADAPTIVE_MAX_BACKWARD || OP == OP_ADAPTIVE_AVG_BACKWARD;
const bool BY_INDEX = OP == OP_MAX_BACKWARD || OP == OP_ADAPTIVE_MAX_BACKWARD;

ivec3 in_size() {
  return ivec3(pc.in_[0], pc.in_[1], pc.in_[2]);
}
ivec3 out_size() {
  return ivec3(pc.out_[0], pc.out_[1], pc.out_[2]);
}
int ksize(uint j) {
  return int(pc.ks[j] & 0xffffu);
}
int kstride(uint j) {
  return int(pc.ks[j] >> 16);
}
int kpad(uint j) {
  return int(pc.pd[j] & 0xffffu);
}
int kdil(uint j) {
  return int(pc.pd[j] >> 16);
}

// A written element: its offset in dst, its (n, c) plane's offset in src, its (d, h, w).
struct Pos {
  uint dst;
  uint plane;
  ivec3 p;
};

Pos locate(uint e) {
  const ivec3 sz = BACKWARD ? in_size() : out_size();
  Pos r;
  r.p.z = int(e % uint(sz.z));
  e /= uint(sz.z);
  r.p.y = int(e % uint(sz.y));
  e /= uint(sz.y);
  r.p.x = int(e % uint(sz.x));
  e /= uint(sz.x);
  const uint c = e % pc.c, n = e / pc.c;
  r.dst = n * pc.ds[0] + c * pc.ds[1] + uint(r.p.x) * pc.ds[2] + uint(r.p.y) * pc.ds[3] +
          uint(r.p.z) * pc.ds[4];
  r.plane = n * pc.ss[0] + c * pc.ss[1];
  return r;
}

uint src_at(uint plane, ivec3 q) {
  return plane + uint(q.x) * pc.ss[2] + uint(q.y) * pc.ss[3] + uint(q.z) * pc.ss[4];
}

int flat_index(ivec3 q) {
  return (q.x * int(pc.in_[1]) + q.y) * int(pc.in_[2]) + q.z;
}

// Adaptive pooling's window of output o over a dim of in_n inputs and out_n outputs: [x, y).
ivec2 adaptive_window(int o, int in_n, int out_n) {
  return ivec2((o * in_n) / out_n, ((o + 1) * in_n + out_n - 1) / out_n);
}

// Output o's window in dim j: its first position, step and count (positions may lie outside
// the input: callers skip them). Average pools have dilation 1.
ivec3 window(uint j, int o) {
  if (ADAPTIVE) {
    const ivec2 w = adaptive_window(o, in_size()[j], out_size()[j]);
    return ivec3(w.x, 1, w.y - w.x);
  }
  return ivec3(o * kstride(j) - kpad(j), kdil(j), ksize(j));
}

// An average pool's divisor for the output at o (torch's pool_size / clipped count / override).
float avg_divisor(ivec3 o) {
  if (DIVISOR != 0u) return float(DIVISOR);
  int full = 1, inside = 1;
  for (uint j = 0u; j < 3u; ++j) {
    const int start = o[j] * kstride(j) - kpad(j);
    const int end = min(start + ksize(j), in_size()[j] + kpad(j));
    full *= end - start;
    inside *= min(end, in_size()[j]) - max(start, 0);
  }
  return float(COUNT_PAD != 0u ? full : inside);
}

// Forward: the max (and its index) or the average over the window of the output at at.p.
void forward(Pos at) {
  const ivec3 wd = window(0u, at.p.x), wh = window(1u, at.p.y), ww = window(2u, at.p.z);
  const ivec3 n = in_size();
  float best = uintBitsToFloat(0xff800000u), sum = 0.0;
  int best_i = -1, count = 0;
  for (int a = 0; a < wd.z; ++a) {
    const int d = wd.x + a * wd.y;
    if (d < 0 || d >= n.x) continue;
    for (int b = 0; b < wh.z; ++b) {
      const int h = wh.x + b * wh.y;
      if (h < 0 || h >= n.y) continue;
      for (int c = 0; c < ww.z; ++c) {
        const int w = ww.x + c * ww.y;
        if (w < 0 || w >= n.z) continue;
        const ivec3 q = ivec3(d, h, w);
        const float v = ld2f(DT, src_at(at.plane, q));
        if (best_i < 0) best_i = flat_index(q);
        if (v > best || isnan(v)) {
          best = v;
          best_i = flat_index(q);
        }
        sum += v;
        ++count;
      }
    }
  }
  if (OP == OP_MAX || OP == OP_ADAPTIVE_MAX) {
    st0f(DT, at.dst, best);
    st1i(DT_I64, at.dst, int64_t(max(best_i, 0)));
  } else if (OP == OP_AVG) {
    st0f(DT, at.dst, count == 0 ? 0.0 : sum / avg_divisor(at.p));
  } else {
    st0f(DT, at.dst, sum / float(wd.z) / float(wh.z) / float(ww.z));
  }
}

// Backward: the outputs of dim j whose windows can reach input position i, [lo, hi].
ivec2 reaching(uint j, int i) {
  const int out_n = out_size()[j];
  if (ADAPTIVE) {
    const int in_n = in_size()[j];
    return ivec2((i * out_n) / in_n, min(((i + 1) * out_n + in_n - 1) / in_n - 1, out_n - 1));
  }
  const int s = kstride(j);
  const int num = i + kpad(j) - (ksize(j) - 1) * kdil(j);
  return ivec2(num <= 0 ? 0 : (num + s - 1) / s, min((i + kpad(j)) / s, out_n - 1));
}

// The gradient one output at o sends to the input at `self` (flat index `me`).
float share(uint plane, ivec3 o, int me) {
  const uint at = src_at(plane, o);
  if (BY_INDEX) return ld1i(DT_I64, at) == int64_t(me) ? ld2f(DT, at) : 0.0;
  const float g = ld2f(DT, at);
  if (OP == OP_AVG_BACKWARD) return g / avg_divisor(o);
  const ivec3 in_n = in_size(), out_n = out_size();
  const ivec2 d = adaptive_window(o.x, in_n.x, out_n.x);
  const ivec2 h = adaptive_window(o.y, in_n.y, out_n.y);
  const ivec2 w = adaptive_window(o.z, in_n.z, out_n.z);
  return g / float(d.y - d.x) / float(h.y - h.x) / float(w.y - w.x);
}

void backward(Pos at) {
  const ivec2 rd = reaching(0u, at.p.x), rh = reaching(1u, at.p.y), rw = reaching(2u, at.p.z);
  const int me = flat_index(at.p);
  float sum = 0.0;
  for (int d = rd.x; d <= rd.y; ++d) {
    for (int h = rh.x; h <= rh.y; ++h) {
      for (int w = rw.x; w <= rw.y; ++w) sum += share(at.plane, ivec3(d, h, w), me);
    }
  }
  st0f(DT, at.dst, sum);
}

void main() {
  for (uint e = linear_id(); e < pc.total; e += grid_size()) {
    const Pos at = locate(e);
    if (BACKWARD) {
      backward(at);
    } else {
      forward(at);
    }
  }
}
