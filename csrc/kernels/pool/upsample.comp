// Resampling over tensors seen as [N, C, D, H, W] (1-d and 2-d: D and H of 1): nearest,
// nearest-exact, linear (linear, bilinear, trilinear) and bicubic, align_corners either way,
// forward and backward, computed in float32. Each dim of the output samples the input at taps
// clamp(first + t, 0, n - 1), t < TAPS (1, 2 or 4), with weights from the dim's float scale as
// torch's CPU kernels compute them.
//   forward:  binding 0 out (strides ds), 1 input (ss); one invocation per output element.
//   backward: binding 0 grad_input (ds), 1 grad_output (ss); one invocation per grad_input
//     element, a gather over the outputs whose taps reach it (found by binary search: an
//     output's first tap never decreases with it), in output order: no atomics.
// The glue keeps the outputs that reach an element at most 8192 (llvmpipe's loop limit).
//
// Modes, specialisation constants and push constants: upsample.h.
#version 450
layout(local_size_x = 256) in;

#include "pool/upsample.h"
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)

const int TAPS = MODE == MODE_CUBIC ? 4 : (MODE == MODE_LINEAR ? 2 : 1);
const float CUBIC_A = -0.75;

int in_n(uint j) {
  return int(pc.in_[j]);
}
int out_n(uint j) {
  return int(pc.out_[j]);
}

// The cubic convolution weights of the 4 taps at fraction t.
vec4 cubic_weights(float t) {
  const float a = CUBIC_A;
  precise float x = t + 1.0, y = 1.0 - t;
  precise float z = y + 1.0;
  precise vec4 w;
  w.x = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
  w.y = ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0;
  w.z = ((a + 2.0) * y - (a + 3.0)) * y * y + 1.0;
  w.w = ((a * z - 5.0 * a) * z + 8.0 * a) * z - 4.0 * a;
  return w;
}

// Output o's first tap in dim j (the taps' weights in w).
int first_tap(uint j, int o, out vec4 w) {
  const float s = pc.scale[j];
  w = vec4(1.0, 0.0, 0.0, 0.0);
  if (in_n(j) == 1 && out_n(j) == 1) return 0;
  if (MODE == MODE_NEAREST) return min(int(floor(float(o) * s)), in_n(j) - 1);
  if (MODE == MODE_NEAREST_EXACT) return min(int(floor((float(o) + 0.5) * s)), in_n(j) - 1);
  if (MODE == MODE_LINEAR && in_n(j) == out_n(j)) return o;
  precise float x = ALIGN != 0u ? s * float(o) : s * (float(o) + 0.5) - 0.5;
  if (MODE == MODE_LINEAR) x = max(x, 0.0);
  const int i0 = min(int(floor(x)), in_n(j) - 1);
  precise float t = clamp(x - float(i0), 0.0, 1.0);
  if (MODE == MODE_LINEAR) {
    w = vec4(1.0 - t, t, 0.0, 0.0);
    return i0;
  }
  w = cubic_weights(t);
  return i0 - 1;
}

int taps(uint j) {
  return in_n(j) == 1 && out_n(j) == 1 ? 1 : TAPS;
}

ivec3 decompose(inout uint e, ivec3 sz) {
  ivec3 p;
  p.z = int(e % uint(sz.z));
  e /= uint(sz.z);
  p.y = int(e % uint(sz.y));
  e /= uint(sz.y);
  p.x = int(e % uint(sz.x));
  e /= uint(sz.x);
  return p;
}

uint src_at(uint plane, ivec3 q) {
  return plane + uint(q.x) * pc.ss[2] + uint(q.y) * pc.ss[3] + uint(q.z) * pc.ss[4];
}

float forward(uint plane, ivec3 o) {
  vec4 wd, wh, ww;
  const ivec3 f = ivec3(first_tap(0u, o.x, wd), first_tap(1u, o.y, wh), first_tap(2u, o.z, ww));
  const ivec3 last = ivec3(in_n(0u), in_n(1u), in_n(2u)) - 1;
  float sum = 0.0;
  for (int a = 0; a < taps(0u); ++a) {
    float sum_h = 0.0;
    for (int b = 0; b < taps(1u); ++b) {
      float sum_w = 0.0;
      for (int c = 0; c < taps(2u); ++c) {
        const ivec3 q = clamp(f + ivec3(a, b, c), ivec3(0), last);
        sum_w += ww[c] * ld1f(DT, src_at(plane, q));
      }
      sum_h += wh[b] * sum_w;
    }
    sum += wd[a] * sum_h;
  }
  return sum;
}

// The weight input position i of dim j takes from output o (its taps that clamp to i).
float weight_of(uint j, int o, int i) {
  vec4 w;
  const int f = first_tap(j, o, w);
  float s = 0.0;
  for (int t = 0; t < taps(j); ++t) {
    if (clamp(f + t, 0, in_n(j) - 1) == i) s += w[t];
  }
  return s;
}

// The outputs of dim j whose taps reach input position i, [lo, hi] (empty: lo > hi).
ivec2 reaching(uint j, int i) {
  vec4 w;
  const int lo_f = i == 0 ? -(1 << 30) : i - (taps(j) - 1);
  const int hi_f = i == in_n(j) - 1 ? (1 << 30) : i;
  int lo = 0, hi = out_n(j);  // the first o with first_tap(o) >= lo_f
  while (lo < hi) {
    const int m = (lo + hi) / 2;
    if (first_tap(j, m, w) >= lo_f) hi = m; else lo = m + 1;
  }
  int a = lo;
  hi = out_n(j);  // the first o with first_tap(o) > hi_f
  while (lo < hi) {
    const int m = (lo + hi) / 2;
    if (first_tap(j, m, w) > hi_f) hi = m; else lo = m + 1;
  }
  return ivec2(a, lo - 1);
}

float backward(uint plane, ivec3 p) {
  const ivec2 rd = reaching(0u, p.x), rh = reaching(1u, p.y), rw = reaching(2u, p.z);
  float sum = 0.0;
  for (int d = rd.x; d <= rd.y; ++d) {
    const float wd = weight_of(0u, d, p.x);
    for (int h = rh.x; h <= rh.y; ++h) {
      const float wh = weight_of(1u, h, p.y);
      for (int w = rw.x; w <= rw.y; ++w) {
        const ivec3 o = ivec3(d, h, w);
        sum += wd * wh * weight_of(2u, w, p.z) * ld1f(DT, src_at(plane, o));
      }
    }
  }
  return sum;
}

void main() {
  const ivec3 sz = BACKWARD != 0u ? ivec3(pc.in_[0], pc.in_[1], pc.in_[2])
                                  : ivec3(pc.out_[0], pc.out_[1], pc.out_[2]);
  for (uint e = linear_id(); e < pc.total; e += grid_size()) {
    uint r = e;
    const ivec3 p = decompose(r, sz);
    const uint c = r % pc.c, n = r / pc.c;
    const uint plane = n * pc.ss[0] + c * pc.ss[1];
    const uint dst = n * pc.ds[0] + c * pc.ds[1] + uint(p.x) * pc.ds[2] + uint(p.y) * pc.ds[3] +
                     uint(p.z) * pc.ds[4];
    st0f(DT, dst, BACKWARD != 0u ? backward(plane, p) : forward(plane, p));
  }
}
