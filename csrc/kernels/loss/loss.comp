// Loss functions: nll_loss (forward and backward, reductions none / mean / sum, class weights,
// ignore_index) and mse_loss (forward and backward), computed in float32.
//
// nll_loss over input x [N, C] (strides XS0, XS1), target t [N] (stride TS), weight w [C]
// (stride WS; WEIGHT 0: all 1): the loss of row n is -w[t[n]] * x[n, t[n]], 0 where t[n] is
// ignore_index or outside [0, C) (torch raises there).
//   OP 0 (per row): binding 0 out[n] (stride OS), 1 x, 2 t, 3 w.
//   OP 1 (reduced, ONE workgroup): out[0] = the sum, or sum / total weight (MEAN); binding 4
//     total_weight[0] = the weights' sum over the rows counted. Bindings 0-3 as OP 0.
//   OP 2 (backward): grad_input [N, C] contiguous at binding 0: -w[t[n]] * g at (n, t[n]),
//     0 elsewhere; g = grad_output[n] (stride OS; 0 for a reduced loss),
//     divided by total_weight[0] (binding 4) for MEAN. Binding 1 grad_output, 2 t, 3 w.
// mse_loss over a and b (same shape, up to 5 dims, strides as, bs; grad_output strides gs):
//   OP 3 (per element): out[i] (contiguous) = (a - b)^2. Bindings 0 out, 1 a, 2 b.
//   OP 4 (reduced, ONE workgroup): out[0] = the sum of (a - b)^2, / n for MEAN.
//   OP 5 (backward): grad_input[i] (contiguous) = scale * (a - b) * grad_output[i . gs]
//     (scale: 2, or 2 / n for MEAN). Bindings 0 grad_input, 1 a, 2 b, 3 grad_output.
// The one-workgroup reductions loop n / 256 times per invocation: callers keep n below
// 256 * 65535 (llvmpipe's loop limit).
//
// Ops, specialisation constants and push constants: loss.h.
#version 450
layout(local_size_x = 256) in;

#include "loss/loss.h"
#include "common.glsl"

// nll's strides (in elements) in the mse fields (loss.h).
#define XS0 pc.as_[0]
#define XS1 pc.as_[1]
#define TS pc.bs[0]
#define WS pc.bs[1]
#define OS pc.gs[0]

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)
MPSRT_ARG(4)

shared float s_sum[256];
shared float s_weight[256];

// Row n's target class, or -1 where the row counts for nothing.
int target_of(uint n) {
  const int64_t t = ld2i(DTT, n * uint(TS));
  if (t == int64_t(pc.ignore) || t < 0l || t >= int64_t(pc.c)) return -1;
  return int(t);
}

float weight_of(int t) {
  return WEIGHT != 0u ? ld3f(DT, uint(t * WS)) : 1.0;
}

// Row n's loss (x, binding 1) and weight.
vec2 nll_row(uint n) {
  const int t = target_of(n);
  if (t < 0) return vec2(0.0);
  const float w = weight_of(t);
  return vec2(-w * ld1f(DT, n * uint(XS0) + uint(t * XS1)), w);
}

// Element i's offsets in a, b and grad_output.
uvec3 mse_offsets(uint i) {
  uvec3 o = uvec3(0u);
  for (uint d = 0u; d < NDIM; ++d) {
    const uint c = i % pc.sizes[d];
    i /= pc.sizes[d];
    o += c * uvec3(uint(pc.as_[d]), uint(pc.bs[d]), uint(pc.gs[d]));
  }
  return o;
}

float mse_diff(uvec3 o) {
  return ld1f(DT, o.x) - ld2f(DT, o.y);
}

// The sums over the workgroup of every invocation's (sum, weight): in s_sum[0], s_weight[0].
void reduce_group(vec2 mine) {
  const uint l = gl_LocalInvocationID.x;
  s_sum[l] = mine.x;
  s_weight[l] = mine.y;
  barrier();
  for (uint half_ = 128u; half_ > 0u; half_ >>= 1) {
    if (l < half_) {
      s_sum[l] += s_sum[l + half_];
      s_weight[l] += s_weight[l + half_];
    }
    barrier();
  }
}

void reduced() {
  vec2 mine = vec2(0.0);
  for (uint i = gl_LocalInvocationID.x; i < pc.n; i += 256u) {
    if (OP == OP_NLL_REDUCE) {
      mine += nll_row(i);
    } else {
      const float d = mse_diff(mse_offsets(i));
      mine.x += d * d;
    }
  }
  reduce_group(mine);
  if (gl_LocalInvocationID.x != 0u) return;
  if (OP == OP_NLL_REDUCE) {
    st0f(DT, 0u, MEAN != 0u ? s_sum[0] / s_weight[0] : s_sum[0]);
    st4f(DT, 0u, s_weight[0]);
  } else {
    st0f(DT, 0u, MEAN != 0u ? s_sum[0] / float(pc.n) : s_sum[0]);
  }
}

void nll_backward(uint i) {
  const uint n = i / pc.c;
  const int t = target_of(n);
  if (t != int(i % pc.c)) {
    st0f(DT, i, 0.0);
    return;
  }
  float g = ld1f(DTG, n * uint(OS));
  if (MEAN != 0u) g /= ld4f(DT, 0u);
  st0f(DT, i, -weight_of(t) * g);
}

void main() {
  if (OP == OP_NLL_REDUCE || OP == OP_MSE_REDUCE) {
    reduced();
    return;
  }
  const uint items = OP == OP_NLL_BACKWARD ? pc.n * pc.c : pc.n;
  for (uint i = linear_id(); i < items; i += grid_size()) {
    if (OP == OP_NLL) {
      st0f(DT, i * uint(OS), nll_row(i).x);
    } else if (OP == OP_NLL_BACKWARD) {
      nll_backward(i);
    } else if (OP == OP_MSE) {
      const float d = mse_diff(mse_offsets(i));
      st0f(DT, i, d * d);
    } else {
      const uvec3 o = mse_offsets(i);
      st0f(DT, i, pc.scale * mse_diff(o) * ld3f(DTG, o.z));
    }
  }
}
