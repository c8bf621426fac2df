// Optimizer steps on contiguous tensors of n elements, computed in float32 as torch's CPU
// kernels compute them (same operation order): the foreach ops' element-wise math, one launch
// per tensor of the lists, and the fused SGD and Adam(W) steps.
//
//   OP 0 lerp:     x = lerp(x, a, w)   (w: the scalar `value`, or b[i] with LIST)
//   OP 1 addcmul:  x = x + value * a * b
//   OP 2 addcdiv:  x = x + value * a / b
//   OP 3 sqrt:     x = sqrt(a)
//   OP 4 maximum:  x = max(x, a), NaN if either is NaN
// Bindings: 0 x (written), 1 a, 2 b (unused ones bind x).
//   OP 5 adam:     bindings 0 param, 1 grad, 2 exp_avg, 3 exp_avg_sq, 4 max_exp_avg_sq (AMSGRAD),
//                  5 the step (one element, dtype DTS); as torch's fused Adam (ADAMW: decoupled
//                  weight decay) with the bias corrections 1 - beta^step from ln(beta) (push).
//   OP 6 sgd:      bindings 0 param, 1 grad, 2 momentum buffer (MOMENTUM); as torch's fused SGD.
//
// Ops, flags, specialisation constants and push constants: optim.h.
#version 450
layout(local_size_x = 256) in;

#include "optim/optim.h"
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)
MPSRT_ARG(4)
MPSRT_ARG(5)

bool flag(uint f) { return (FLAGS & f) != 0u; }

// torch's lerp: exact at both ends, the formula picked by the weight's size.
float lerp_(float x, float y, float w) {
  return abs(w) < 0.5 ? x + w * (y - x) : y - (y - x) * (1.0 - w);
}

// exp(x) - 1 without the cancellation near 0 (GLSL has no expm1).
float expm1_(float x) {
  if (abs(x) >= 0.5) return exp(x) - 1.0;
  float term = x, sum = x;
  for (int k = 2; k <= 10; ++k) {
    term *= x / float(k);
    sum += term;
  }
  return sum;
}

void adam(uint i) {
  const float step = ld5f(DTS, 0u);
  const float bc1 = -expm1_(step * pc.ln_beta1);  // 1 - beta1^step
  const float bc2_sqrt = sqrt(-expm1_(step * pc.ln_beta2));
  const float lr = pc.value;
  float param = ld0f(DT, i);
  float grad = ld1f(DT, i);
  if (flag(F_MAXIMIZE)) grad = -grad;
  if (pc.weight_decay != 0.0) {
    if (flag(F_ADAMW)) {
      param = param * (1.0 - lr * pc.weight_decay);
    } else {
      grad += param * pc.weight_decay;
    }
  }
  const float exp_avg = lerp_(ld2f(DT, i), grad, 1.0 - pc.beta1);
  st2f(DT, i, exp_avg);
  float exp_avg_sq = ld3f(DT, i) * pc.beta2;
  exp_avg_sq = exp_avg_sq + (1.0 - pc.beta2) * grad * grad;
  st3f(DT, i, exp_avg_sq);
  float sq = exp_avg_sq;
  if (flag(F_AMSGRAD)) {
    sq = max(ld4f(DT, i), exp_avg_sq);
    st4f(DT, i, sq);
  }
  const float denom = sqrt(sq) / bc2_sqrt + pc.eps;
  st0f(DT, i, param - (lr / bc1) * exp_avg / denom);
}

void sgd(uint i) {
  float grad = ld1f(DT, i);
  const float param = ld0f(DT, i);
  if (flag(F_MAXIMIZE)) grad = -grad;
  if (pc.weight_decay != 0.0) grad += param * pc.weight_decay;
  if (flag(F_MOMENTUM)) {
    float buf = grad;
    if (!flag(F_FIRST)) buf = pc.beta1 * ld2f(DT, i) + (1.0 - pc.beta2) * grad;
    st2f(DT, i, buf);
    grad = flag(F_NESTEROV) ? grad + pc.beta1 * buf : buf;
  }
  st0f(DT, i, param - pc.value * grad);
}

void main() {
  for (uint i = linear_id(); i < pc.n; i += grid_size()) {
    if (OP == OP_ADAM) {
      adam(i);
    } else if (OP == OP_SGD) {
      sgd(i);
    } else if (OP == OP_SQRT) {
      st0f(DT, i, sqrt(ld1f(DT, i)));
    } else {
      const float x = ld0f(DT, i);
      const float a = ld1f(DT, i);
      float r;
      if (OP == OP_LERP) {
        r = lerp_(x, a, flag(F_LIST) ? ld2f(DT, i) : pc.value);
      } else if (OP == OP_ADDCMUL) {
        r = x + pc.value * a * ld2f(DT, i);
      } else if (OP == OP_ADDCDIV) {
        r = x + pc.value * a / ld2f(DT, i);
      } else {
        r = isnan(x) || isnan(a) ? x + a : max(x, a);
      }
      st0f(DT, i, r);
    }
  }
}
