// Optimizer operators on mpsrt's optim kernel (csrc/kernels/optim.comp): the foreach ops that
// torch.optim's foreach implementations (the default on the mpsrt device) call and mpsrt has no
// single-tensor kernel for (lerp, addcmul, addcdiv, sqrt, maximum; add, mul and div run on
// elementwise_ops through torch's per-tensor foreach path), and the fused SGD and Adam(W)
// steps (fused=True). One launch per tensor of the lists; every tensor contiguous, of one
// float dtype (float32, float16, bfloat16), the lists' tensors of matching sizes, else the op
// declines as a whole before anything runs.
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <cmath>

#include "host_access.h"
#include "kernels.h"

namespace mpsrt::torch_glue {
namespace {

using kernels::arg;
using kernels::Declined;
using kernels::Launch;

// optim.comp's ops and flags.
enum OptimOp : uint32_t {
  kLerp = 0,
  kAddcmul = 1,
  kAddcdiv = 2,
  kOptimSqrt = 3,
  kOptimMaximum = 4,
  kAdam = 5,
  kSgd = 6
};
enum Flag : uint32_t {
  kList = 1,
  kAdamW = 2,
  kAmsgrad = 4,
  kMaximize = 8,
  kNesterov = 16,
  kMomentum = 32,
  kFirst = 64
};
constexpr size_t kBindings = 6;

// optim.comp's push constants after base[8].
struct OptimPush {
  uint32_t n = 0;
  float value = 0.0f;
  float beta1 = 0.0f;
  float beta2 = 0.0f;
  float weight_decay = 0.0f;
  float eps = 0.0f;
  float ln_beta1 = 0.0f;
  float ln_beta2 = 0.0f;
};

using Lists = std::vector<std::vector<at::Tensor>>;

// The dtype id of the lists' tensors, after checking that every list has the first's length
// and that tensor i of every list is a contiguous mpsrt tensor of the first list's device,
// dtype and numel (declines otherwise).
uint32_t check_lists(const Lists& lists) {
  if (lists.empty() || lists[0].empty()) throw Declined{};
  const at::Tensor& first = lists[0][0];
  const at::ScalarType st = first.scalar_type();
  if (st != at::kFloat && st != at::kHalf && st != at::kBFloat16) throw Declined{};
  for (const std::vector<at::Tensor>& list : lists) {
    if (list.size() != lists[0].size()) throw Declined{};
    for (size_t i = 0; i < list.size(); ++i) {
      const at::Tensor& t = list[i];
      if (!t.defined() || !is_mpsrt(t) || t.device() != first.device() || t.scalar_type() != st ||
          !t.is_contiguous() || t.numel() != lists[0][i].numel() || t.numel() > INT32_MAX)
        throw Declined{};
    }
  }
  return static_cast<uint32_t>(kernels::dtype_id(st));
}

// One launch over `bound` (binding 0 first; the unused bindings bind it), bindings whose bit is
// set in `written` written. Tensors without elements launch nothing.
void launch_optim(uint32_t op, uint32_t flags, uint32_t dt, uint32_t step_dt, OptimPush p,
                  const std::vector<at::Tensor>& bound, uint32_t written) {
  const at::Tensor& x = bound[0];
  if (x.numel() == 0) return;
  p.n = static_cast<uint32_t>(x.numel());
  Launch l("optim", x.device().index());
  l.spec(op).spec(dt).spec(step_dt).spec(flags);
  for (size_t b = 0; b < kBindings; ++b) {
    const bool used = b < bound.size() && bound[b].defined();
    l.arg(used ? bound[b] : x, used && (written >> b & 1u) != 0);
  }
  l.push(p).grid(p.n, 256).run();
}

std::vector<at::Tensor> list_arg(const c10::OperatorHandle& op, const torch::jit::Stack& s,
                                 size_t i) {
  return arg(op, s, i).toTensorVector();
}

void finish_void(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  torch::jit::drop(s, op.schema().arguments().size());
}

// _foreach_lerp_.Scalar / .List: self[i] = lerp(self[i], tensors1[i], weight or weights[i]).
template <bool List>
bool foreach_lerp(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  Lists lists{list_arg(op, s, 0), list_arg(op, s, 1)};
  OptimPush p;
  if constexpr (List) {
    lists.push_back(list_arg(op, s, 2));
  } else {
    p.value = static_cast<float>(arg(op, s, 2).toScalar().toDouble());
  }
  const uint32_t dt = check_lists(lists);
  for (size_t i = 0; i < lists[0].size(); ++i) {
    std::vector<at::Tensor> bound{lists[0][i], lists[1][i]};
    if (List) bound.push_back(lists[2][i]);
    launch_optim(kLerp, List ? kList : 0, dt, dt, p, bound, 1);
  }
  finish_void(op, s);
  return true;
}

// _foreach_addcmul_ / _foreach_addcdiv_ .Scalar and .ScalarList:
// self[i] += value(s[i]) * tensor1[i] (* or /) tensor2[i].
template <uint32_t Op, bool ScalarList>
bool foreach_addc(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const Lists lists{list_arg(op, s, 0), list_arg(op, s, 1), list_arg(op, s, 2)};
  const uint32_t dt = check_lists(lists);
  std::vector<double> values(lists[0].size());
  if constexpr (ScalarList) {
    const c10::ArrayRef<c10::IValue> scalars = arg(op, s, 3).toListRef();
    if (scalars.size() != values.size()) throw Declined{};
    for (size_t i = 0; i < values.size(); ++i) values[i] = scalars[i].toScalar().toDouble();
  } else {
    std::fill(values.begin(), values.end(), arg(op, s, 3).toScalar().toDouble());
  }
  for (size_t i = 0; i < lists[0].size(); ++i) {
    OptimPush p;
    p.value = static_cast<float>(values[i]);
    launch_optim(Op, 0, dt, dt, p, {lists[0][i], lists[1][i], lists[2][i]}, 1);
  }
  finish_void(op, s);
  return true;
}

// _foreach_sqrt (new tensors) and _foreach_sqrt_ (in place).
template <bool Inplace>
bool foreach_sqrt(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const Lists lists{list_arg(op, s, 0)};
  const uint32_t dt = check_lists(lists);
  std::vector<at::Tensor> outs;
  for (const at::Tensor& t : lists[0]) {
    outs.push_back(Inplace ? t : at::empty_like(t, at::MemoryFormat::Contiguous));
    launch_optim(kOptimSqrt, 0, dt, dt, OptimPush{}, {outs.back(), t}, 1);
  }
  finish_void(op, s);
  if (!Inplace) s.emplace_back(std::move(outs));
  return true;
}

// _foreach_maximum_.List: self[i] = maximum(self[i], other[i]) (amsgrad's running maximum).
bool foreach_maximum(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const Lists lists{list_arg(op, s, 0), list_arg(op, s, 1)};
  const uint32_t dt = check_lists(lists);
  for (size_t i = 0; i < lists[0].size(); ++i)
    launch_optim(kOptimMaximum, 0, dt, dt, OptimPush{}, {lists[0][i], lists[1][i]}, 1);
  finish_void(op, s);
  return true;
}

// _fused_adam_ / _fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
// state_steps, *, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale,
// found_inf): one step per parameter; the steps are one-element device tensors (already
// incremented by the optimizer). grad_scale / found_inf (AMP) decline.
template <bool AdamW>
bool fused_adam(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const bool amsgrad = arg(op, s, 11).toBool();
  if (!arg(op, s, 13).isNone() || !arg(op, s, 14).isNone()) throw Declined{};
  Lists lists{list_arg(op, s, 0), list_arg(op, s, 1), list_arg(op, s, 2), list_arg(op, s, 3)};
  if (amsgrad) lists.push_back(list_arg(op, s, 4));
  const uint32_t dt = check_lists(lists);
  const std::vector<at::Tensor> steps = list_arg(op, s, 5);
  if (steps.size() != lists[0].size()) throw Declined{};
  for (const at::Tensor& t : steps) {
    if (!is_mpsrt(t) || t.device() != lists[0][0].device() || t.numel() != 1 ||
        t.scalar_type() != at::kFloat)
      throw Declined{};
  }
  OptimPush p;
  const double beta1 = arg(op, s, 7).toDouble();
  const double beta2 = arg(op, s, 8).toDouble();
  p.value = static_cast<float>(arg(op, s, 6).toDouble());
  p.beta1 = static_cast<float>(beta1);
  p.beta2 = static_cast<float>(beta2);
  p.weight_decay = static_cast<float>(arg(op, s, 9).toDouble());
  p.eps = static_cast<float>(arg(op, s, 10).toDouble());
  p.ln_beta1 = static_cast<float>(std::log(beta1));
  p.ln_beta2 = static_cast<float>(std::log(beta2));
  const uint32_t flags =
      (AdamW ? kAdamW : 0) | (amsgrad ? kAmsgrad : 0) | (arg(op, s, 12).toBool() ? kMaximize : 0);
  for (size_t i = 0; i < lists[0].size(); ++i) {
    const at::Tensor max_sq = amsgrad ? lists[4][i] : at::Tensor();
    launch_optim(kAdam, flags, dt, MPSRT_DTYPE_FLOAT32, p,
                 {lists[0][i], lists[1][i], lists[2][i], lists[3][i], max_sq, steps[i]}, 0b11101);
  }
  finish_void(op, s);
  return true;
}

// _fused_sgd_(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
// nesterov, maximize, is_first_step, grad_scale, found_inf): an empty buffer list is SGD
// without momentum. grad_scale / found_inf decline.
bool fused_sgd(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  if (!arg(op, s, 10).isNone() || !arg(op, s, 11).isNone()) throw Declined{};
  Lists lists{list_arg(op, s, 0), list_arg(op, s, 1)};
  const std::vector<at::Tensor> bufs = list_arg(op, s, 2);
  const double momentum = arg(op, s, 4).toDouble();
  const bool with_buffers = momentum != 0.0;
  if (with_buffers) lists.push_back(bufs);
  const uint32_t dt = check_lists(lists);
  OptimPush p;
  p.weight_decay = static_cast<float>(arg(op, s, 3).toDouble());
  p.beta1 = static_cast<float>(momentum);
  p.value = static_cast<float>(arg(op, s, 5).toDouble());
  p.beta2 = static_cast<float>(arg(op, s, 6).toDouble());
  const uint32_t flags = (with_buffers ? kMomentum : 0) | (arg(op, s, 7).toBool() ? kNesterov : 0) |
                         (arg(op, s, 8).toBool() ? kMaximize : 0) |
                         (arg(op, s, 9).toBool() ? kFirst : 0);
  for (size_t i = 0; i < lists[0].size(); ++i) {
    const at::Tensor buf = with_buffers ? lists[2][i] : at::Tensor();
    launch_optim(kSgd, flags, dt, dt, p, {lists[0][i], lists[1][i], buf}, 0b101);
  }
  finish_void(op, s);
  return true;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  kernels::impl(m, "_foreach_lerp_.Scalar", &foreach_lerp<false>);
  kernels::impl(m, "_foreach_lerp_.List", &foreach_lerp<true>);
  kernels::impl(m, "_foreach_addcmul_.Scalar", &foreach_addc<kAddcmul, false>);
  kernels::impl(m, "_foreach_addcmul_.ScalarList", &foreach_addc<kAddcmul, true>);
  kernels::impl(m, "_foreach_addcdiv_.Scalar", &foreach_addc<kAddcdiv, false>);
  kernels::impl(m, "_foreach_addcdiv_.ScalarList", &foreach_addc<kAddcdiv, true>);
  kernels::impl(m, "_foreach_sqrt", &foreach_sqrt<false>);
  kernels::impl(m, "_foreach_sqrt_", &foreach_sqrt<true>);
  kernels::impl(m, "_foreach_maximum_.List", &foreach_maximum);
  kernels::impl(m, "_fused_adam_", &fused_adam<false>);
  kernels::impl(m, "_fused_adamw_", &fused_adam<true>);
  kernels::impl(m, "_fused_sgd_", &fused_sgd);
}

}  // namespace mpsrt::torch_glue
