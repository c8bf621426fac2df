// Optimizer operators on mpsrt's optim kernel (csrc/kernels/optim/): the foreach ops that
// torch.optim's foreach implementations (the default on the mpsrt device) call and mpsrt has no
// single-tensor kernel for (lerp, addcmul, addcdiv, sqrt, maximum; add, mul and div run on
// the elementwise ops through torch's per-tensor foreach path), and the fused SGD and Adam(W)
// steps (fused=True). One launch per tensor of the lists; every tensor contiguous, of one
// float dtype (float32, float16, bfloat16), the lists' tensors of matching sizes, else the op
// declines as a whole before anything runs.
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <ATen/ops/_foreach_addcdiv_ops.h>
#include <ATen/ops/_foreach_addcmul_ops.h>
#include <ATen/ops/_foreach_lerp_ops.h>
#include <ATen/ops/_foreach_maximum_ops.h>
#include <ATen/ops/_foreach_sqrt_ops.h>
#include <ATen/ops/_fused_adam_ops.h>
#include <ATen/ops/_fused_adamw_ops.h>
#include <ATen/ops/_fused_sgd_ops.h>

#include <cmath>
#include <optional>
#include <vector>

#include "device/host_access.h"
#include "ops/common.h"
#include "optim/optim.h"

namespace mpsrt::torch_glue::ops::optim {
namespace {

using namespace mpsrt::kernels::optim;  // NOLINT: the kernel's interface

using Lists = std::vector<at::TensorList>;

// Whether tensor t of a list can stand at a place whose first list's tensor is `like`: a
// contiguous mpsrt tensor of first's device and dtype and like's numel, 32-bit sized.
bool list_tensor_ok(const at::Tensor& t, const at::Tensor& first, const at::Tensor& like) {
  return t.defined() && is_mpsrt(t) && t.device() == first.device() &&
         t.scalar_type() == first.scalar_type() && t.is_contiguous() && t.numel() == like.numel() &&
         fits<int32_t>(t.numel());
}

// The dtype id of the lists' tensors, after checking that every list has the first's length
// and that tensor i of every list is a contiguous mpsrt tensor of the first list's device,
// dtype and numel; nothing (the op declines) otherwise.
std::optional<uint32_t> check_lists(const Lists& lists) {
  if (lists.empty() || lists[0].empty()) return std::nullopt;
  const at::Tensor& first = lists[0][0];
  if (!is_float(first.scalar_type())) return std::nullopt;
  for (const at::TensorList& list : lists) {
    if (list.size() != lists[0].size()) return std::nullopt;
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list_tensor_ok(list[i], first, lists[0][i])) return std::nullopt;
    }
  }
  return dt(first);
}

// One launch over `bound` (binding 0 first; the unused bindings bind it), bindings whose bit is
// set in `written` written. Tensors without elements launch nothing. False (nothing launched)
// where an argument is not bindable.
[[nodiscard]] bool launch_optim(uint32_t op, uint32_t flags, uint32_t dtype, uint32_t step_dt,
                                Push p, const std::vector<at::Tensor>& bound, uint32_t written) {
  const at::Tensor& x = bound[0];
  if (x.numel() == 0) return true;
  p.n = static_cast<uint32_t>(x.numel());
  Launch l("optim", x.device().index());
  l.spec(SPEC_OP, op).spec(SPEC_DT, dtype).spec(SPEC_DTS, step_dt).spec(SPEC_FLAGS, flags);
  for (size_t b = 0; b < BINDINGS; ++b) {
    const bool used = b < bound.size() && bound[b].defined();
    l.arg(used ? bound[b] : x, used && (written >> b & 1u) != 0);
  }
  return l.push(p).grid(p.n, 256).run();
}

// _foreach_lerp_.Scalar: self[i] = lerp(self[i], tensors1[i], weight).
bool foreach_lerp_scalar(at::TensorList self, at::TensorList tensors1, const c10::Scalar& weight) {
  Push p{};
  p.value = static_cast<float>(weight.toDouble());
  const std::optional<uint32_t> dtype = check_lists({self, tensors1});
  if (!dtype) return false;
  for (size_t i = 0; i < self.size(); ++i) {
    if (!launch_optim(OP_LERP, 0, *dtype, *dtype, p, {self[i], tensors1[i]}, 1)) return false;
  }
  return true;
}

// _foreach_lerp_.List: self[i] = lerp(self[i], tensors1[i], weights[i]).
bool foreach_lerp_list(at::TensorList self, at::TensorList tensors1, at::TensorList weights) {
  const std::optional<uint32_t> dtype = check_lists({self, tensors1, weights});
  if (!dtype) return false;
  for (size_t i = 0; i < self.size(); ++i) {
    if (!launch_optim(OP_LERP, F_LIST, *dtype, *dtype, Push{}, {self[i], tensors1[i], weights[i]},
                      1)) {
      return false;
    }
  }
  return true;
}

// _foreach_addcmul_ / _foreach_addcdiv_ .Scalar and .ScalarList:
// self[i] += value(s[i]) * tensor1[i] (* or /) tensor2[i].
template <uint32_t Op>
struct ForeachAddc {
  static bool run(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2,
                  const c10::Scalar& value) {
    const std::optional<uint32_t> dtype = check_lists({self, tensor1, tensor2});
    if (!dtype) return false;
    return launch_all(*dtype, self, tensor1, tensor2,
                      std::vector<double>(self.size(), value.toDouble()));
  }
  static bool run(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2,
                  at::ArrayRef<c10::Scalar> scalars) {
    const std::optional<uint32_t> dtype = check_lists({self, tensor1, tensor2});
    if (!dtype || scalars.size() != self.size()) return false;
    std::vector<double> values(self.size());
    for (size_t i = 0; i < values.size(); ++i) values[i] = scalars[i].toDouble();
    return launch_all(*dtype, self, tensor1, tensor2, values);
  }

 private:
  [[nodiscard]] static bool launch_all(uint32_t dtype, at::TensorList self, at::TensorList tensor1,
                                       at::TensorList tensor2, const std::vector<double>& values) {
    for (size_t i = 0; i < self.size(); ++i) {
      Push p{};
      p.value = static_cast<float>(values[i]);
      if (!launch_optim(Op, 0, dtype, dtype, p, {self[i], tensor1[i], tensor2[i]}, 1)) {
        return false;
      }
    }
    return true;
  }
};

// _foreach_sqrt (new tensors) and _foreach_sqrt_ (in place): outs[i] = sqrt(self[i]).
[[nodiscard]] bool foreach_sqrt_into(at::TensorList self, const std::vector<at::Tensor>& outs) {
  const std::optional<uint32_t> dtype = check_lists({self});
  if (!dtype) return false;
  for (size_t i = 0; i < self.size(); ++i) {
    if (!launch_optim(OP_SQRT, 0, *dtype, *dtype, Push{}, {outs[i], self[i]}, 1)) return false;
  }
  return true;
}

std::optional<std::vector<at::Tensor>> foreach_sqrt(at::TensorList self) {
  if (!check_lists({self})) return std::nullopt;
  std::vector<at::Tensor> outs;
  for (const at::Tensor& t : self) outs.push_back(at::empty_like(t, at::MemoryFormat::Contiguous));
  if (!foreach_sqrt_into(self, outs)) return std::nullopt;
  return outs;
}

bool foreach_sqrt_(at::TensorList self) {
  return foreach_sqrt_into(self, self.vec());
}

// _foreach_maximum_.List: self[i] = maximum(self[i], other[i]) (amsgrad's running maximum).
bool foreach_maximum(at::TensorList self, at::TensorList other) {
  const std::optional<uint32_t> dtype = check_lists({self, other});
  if (!dtype) return false;
  for (size_t i = 0; i < self.size(); ++i) {
    if (!launch_optim(OP_MAXIMUM, 0, *dtype, *dtype, Push{}, {self[i], other[i]}, 1)) {
      return false;
    }
  }
  return true;
}

// Whether the steps are one float32 element each, mpsrt tensors of the parameters' device, one
// per parameter.
bool steps_ok(at::TensorList steps, at::TensorList params) {
  if (steps.size() != params.size()) return false;
  for (const at::Tensor& t : steps) {
    if (!is_mpsrt(t) || t.device() != params[0].device() || t.numel() != 1 ||
        t.scalar_type() != at::kFloat) {
      return false;
    }
  }
  return true;
}

// The Adam step's push constants.
Push adam_push(double lr, double beta1, double beta2, double weight_decay, double eps) {
  Push p{};
  p.value = static_cast<float>(lr);
  p.beta1 = static_cast<float>(beta1);
  p.beta2 = static_cast<float>(beta2);
  p.weight_decay = static_cast<float>(weight_decay);
  p.eps = static_cast<float>(eps);
  p.ln_beta1 = static_cast<float>(std::log(beta1));
  p.ln_beta2 = static_cast<float>(std::log(beta2));
  return p;
}

// _fused_adam_ / _fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
// state_steps, *, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale,
// found_inf): one step per parameter; the steps are one-element device tensors (already
// incremented by the optimizer). grad_scale / found_inf (AMP) decline.
template <bool AdamW>
bool fused_adam(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs,
                at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                at::TensorList state_steps, double lr, double beta1, double beta2,
                double weight_decay, double eps, bool amsgrad, bool maximize,
                const std::optional<at::Tensor>& grad_scale,
                const std::optional<at::Tensor>& found_inf) {
  if (grad_scale.has_value() || found_inf.has_value()) return false;
  Lists lists{self, grads, exp_avgs, exp_avg_sqs};
  if (amsgrad) lists.push_back(max_exp_avg_sqs);
  const std::optional<uint32_t> dtype = check_lists(lists);
  if (!dtype || !steps_ok(state_steps, self)) return false;
  const Push p = adam_push(lr, beta1, beta2, weight_decay, eps);
  const uint32_t flags =
      (AdamW ? F_ADAMW : 0) | (amsgrad ? F_AMSGRAD : 0) | (maximize ? F_MAXIMIZE : 0);
  for (size_t i = 0; i < self.size(); ++i) {
    const at::Tensor max_sq = amsgrad ? max_exp_avg_sqs[i] : at::Tensor();
    if (!launch_optim(OP_ADAM, flags, *dtype, MPSRT_DTYPE_FLOAT32, p,
                      {self[i], grads[i], exp_avgs[i], exp_avg_sqs[i], max_sq, state_steps[i]},
                      0b11101)) {
      return false;
    }
  }
  return true;
}

// _fused_sgd_(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
// nesterov, maximize, is_first_step, grad_scale, found_inf): a momentum of 0 is SGD without
// momentum buffers. grad_scale / found_inf decline.
bool fused_sgd(at::TensorList self, at::TensorList grads, at::TensorList momentum_buffer_list,
               double weight_decay, double momentum, double lr, double dampening, bool nesterov,
               bool maximize, bool is_first_step, const std::optional<at::Tensor>& grad_scale,
               const std::optional<at::Tensor>& found_inf) {
  if (grad_scale.has_value() || found_inf.has_value()) return false;
  const bool with_buffers = momentum != 0.0;
  Lists lists{self, grads};
  if (with_buffers) lists.push_back(momentum_buffer_list);
  const std::optional<uint32_t> dtype = check_lists(lists);
  if (!dtype) return false;
  Push p{};
  p.weight_decay = static_cast<float>(weight_decay);
  p.beta1 = static_cast<float>(momentum);
  p.value = static_cast<float>(lr);
  p.beta2 = static_cast<float>(dampening);
  const uint32_t flags = (with_buffers ? F_MOMENTUM : 0) | (nesterov ? F_NESTEROV : 0) |
                         (maximize ? F_MAXIMIZE : 0) | (is_first_step ? F_FIRST : 0);
  for (size_t i = 0; i < self.size(); ++i) {
    const at::Tensor buf = with_buffers ? momentum_buffer_list[i] : at::Tensor();
    if (!launch_optim(OP_SGD, flags, *dtype, *dtype, p, {self[i], grads[i], buf}, 0b101)) {
      return false;
    }
  }
  return true;
}

void register_ops(torch::Library& m) {
  namespace A = at::_ops;
  reg<A::_foreach_lerp__Scalar, &foreach_lerp_scalar>(m);
  reg<A::_foreach_lerp__List, &foreach_lerp_list>(m);
  reg<A::_foreach_addcmul__Scalar, ForeachAddc<OP_ADDCMUL>>(m);
  reg<A::_foreach_addcmul__ScalarList, ForeachAddc<OP_ADDCMUL>>(m);
  reg<A::_foreach_addcdiv__Scalar, ForeachAddc<OP_ADDCDIV>>(m);
  reg<A::_foreach_addcdiv__ScalarList, ForeachAddc<OP_ADDCDIV>>(m);
  reg<A::_foreach_sqrt, &foreach_sqrt>(m);
  reg<A::_foreach_sqrt_, &foreach_sqrt_>(m);
  reg<A::_foreach_maximum__List, &foreach_maximum>(m);
  reg<A::_fused_adam_, &fused_adam<false>>(m);
  reg<A::_fused_adamw_, &fused_adam<true>>(m);
  reg<A::_fused_sgd_, &fused_sgd>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::optim

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::optim::register_ops(m);
}
