// Loss operators on mpsrt's loss kernel (csrc/kernels/loss.comp): nll_loss forward and
// backward (so that cross_entropy = log_softmax + nll_loss runs on the device) and mse_loss
// forward and backward; float32, float16 and bfloat16 inputs, computed in float32. The reduced
// forms run in one workgroup (inputs of up to 256 * 65535 rows or elements; larger decline).
// A target outside [0, C) counts as ignored on the device (torch's CPU kernel raises).
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "host_access.h"
#include "kernels.h"

namespace mpsrt::torch_glue {
namespace {

using kernels::arg;
using kernels::Declined;
using kernels::finish;
using kernels::Launch;

// loss.comp's ops, and torch's reductions (at::Reduction).
enum LossOp : uint32_t {
  kNll = 0,
  kNllReduce = 1,
  kNllBackward = 2,
  kMse = 3,
  kMseReduce = 4,
  kMseBackward = 5
};
enum LossReduction : int64_t { kLossNone = 0, kLossMean = 1, kLossSum = 2 };
constexpr int kLossMaxDims = 5;
constexpr int64_t kMaxReduced = int64_t(256) * 65535;  // one workgroup's loop limit

// loss.comp's push constants after base[8] (nll's strides in the mse fields: see there).
struct LossPush {
  uint32_t n = 0;
  uint32_t c = 1;
  int32_t ignore = 0;
  float scale = 1.0f;
  uint32_t sizes[kLossMaxDims] = {1, 1, 1, 1, 1};
  int32_t as[kLossMaxDims] = {};
  int32_t bs[kLossMaxDims] = {};
  int32_t gs[kLossMaxDims] = {};
};
static_assert(sizeof(LossPush) == 96, "loss.comp's push constants");

int32_t narrow_loss(int64_t v) {
  if (v < 0 || v > INT32_MAX) throw Declined{};
  return static_cast<int32_t>(v);
}

uint32_t float_dtype(const at::Tensor& t) {
  const at::ScalarType s = t.scalar_type();
  if (s != at::kFloat && s != at::kHalf && s != at::kBFloat16) throw Declined{};
  return static_cast<uint32_t>(kernels::dtype_id(s));
}

// The specialisation constants and bindings of one launch (unused bindings bind binding 0's
// tensor, never read).
struct LossLaunch {
  uint32_t op = kNll;
  uint32_t dt = MPSRT_DTYPE_FLOAT32;
  uint32_t target_dt = MPSRT_DTYPE_INT64;
  bool weight = false;
  bool mean = false;
  uint32_t ndim = 1;
  uint32_t grad_dt = MPSRT_DTYPE_FLOAT32;
};

void launch_loss(const LossLaunch& k, const LossPush& p, std::initializer_list<at::Tensor> args,
                 uint64_t items) {
  const at::Tensor& out = *args.begin();
  Launch l("loss", out.device().index());
  l.spec(k.op).spec(k.dt).spec(k.target_dt).spec(k.weight ? 1 : 0).spec(k.mean ? 1 : 0);
  l.spec(k.ndim).spec(k.grad_dt);
  size_t i = 0;
  for (const at::Tensor& t : args) l.arg(t.defined() ? t : out, i++ == 0);
  for (; i < 5; ++i) l.arg(out, false);
  l.push(p);
  if (k.op == kNllReduce || k.op == kMseReduce) {
    l.groups(1);
  } else {
    l.grid(items, 256);
  }
  l.run();
}

// nll_loss's checked arguments: input [N, C] or [C], target [N] or [], weight [C] or none.
struct Nll {
  at::Tensor self, target, weight;
  int64_t reduction = kLossMean;
  LossLaunch k;
  LossPush p;
};

Nll nll_args(const at::Tensor& self, const at::Tensor& target, const c10::IValue& weight,
             int64_t reduction, int64_t ignore_index) {
  Nll a{self, target, weight.isNone() ? at::Tensor() : weight.toTensor(), reduction};
  const bool batch = self.dim() == 2;
  if ((self.dim() != 1 && !batch) || target.dim() != self.dim() - 1) throw Declined{};
  if (target.scalar_type() != at::kLong || reduction < kLossNone || reduction > kLossSum)
    throw Declined{};
  const int64_t n = batch ? self.size(0) : 1;
  const int64_t c = self.size(-1);
  if ((batch && target.size(0) != n) || n == 0 || c == 0) throw Declined{};
  a.k.dt = float_dtype(self);
  if (a.weight.defined()) {
    if (a.weight.dim() != 1 || a.weight.numel() != c ||
        a.weight.scalar_type() != self.scalar_type())
      throw Declined{};
    a.k.weight = true;
    a.p.bs[1] = narrow_loss(a.weight.stride(0));
  }
  if (ignore_index < INT32_MIN || ignore_index > INT32_MAX) throw Declined{};
  a.k.mean = reduction == kLossMean;
  a.p.n = static_cast<uint32_t>(narrow_loss(n));
  a.p.c = static_cast<uint32_t>(narrow_loss(c));
  a.p.ignore = static_cast<int32_t>(ignore_index);
  a.p.as[0] = batch ? narrow_loss(self.stride(0)) : 0;
  a.p.as[1] = narrow_loss(self.stride(-1));
  a.p.bs[0] = batch ? narrow_loss(target.stride(0)) : 0;
  return a;
}

// Runs nll_loss's forward into output and total_weight (shaped as torch shapes them).
void nll_forward(const Nll& a, at::Tensor& output, at::Tensor& total_weight) {
  LossLaunch k = a.k;
  LossPush p = a.p;
  if (a.reduction == kLossNone && a.self.dim() == 2) {
    total_weight.zero_();
    k.op = kNll;
    p.gs[0] = narrow_loss(output.stride(0));
    launch_loss(k, p, {output, a.self, a.target, a.weight}, p.n);
  } else {
    if (a.p.n > kMaxReduced) throw Declined{};
    k.op = kNllReduce;
    launch_loss(k, p, {output, a.self, a.target, a.weight, total_weight}, 1);
  }
}

template <bool Out>
bool nll_loss_forward(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const Nll a = nll_args(arg(op, s, 0).toTensor(), arg(op, s, 1).toTensor(), arg(op, s, 2),
                         arg(op, s, 3).toInt(), arg(op, s, 4).toInt());
  const bool rows = a.reduction == kLossNone && a.self.dim() == 2;
  const std::vector<int64_t> out_sizes =
      rows ? std::vector<int64_t>{a.self.size(0)} : std::vector<int64_t>{};
  at::Tensor output, total_weight;
  if constexpr (Out) {
    output = arg(op, s, 5).toTensor();
    total_weight = arg(op, s, 6).toTensor();
    if (output.sizes() != at::IntArrayRef(out_sizes) || total_weight.numel() != 1 ||
        output.scalar_type() != a.self.scalar_type() ||
        total_weight.scalar_type() != a.self.scalar_type())
      throw Declined{};
  } else {
    output = at::empty(out_sizes, a.self.options());
    total_weight = at::empty({}, a.self.options());
  }
  nll_forward(a, output, total_weight);
  torch::jit::drop(s, op.schema().arguments().size());
  s.push_back(output);
  s.push_back(total_weight);
  return true;
}

// nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight).
template <bool Out>
bool nll_loss_backward(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor grad = arg(op, s, 0).toTensor();
  Nll a = nll_args(arg(op, s, 1).toTensor(), arg(op, s, 2).toTensor(), arg(op, s, 3),
                   arg(op, s, 4).toInt(), arg(op, s, 5).toInt());
  const at::Tensor total_weight = arg(op, s, 6).toTensor();
  const bool rows = a.reduction == kLossNone && a.self.dim() == 2;
  if (grad.scalar_type() != a.self.scalar_type() || total_weight.numel() != 1 ||
      total_weight.scalar_type() != a.self.scalar_type() ||
      (rows ? grad.dim() != 1 || grad.size(0) != a.self.size(0) : grad.numel() != 1))
    throw Declined{};
  if (int64_t(a.p.n) * a.p.c > INT32_MAX) throw Declined{};
  at::Tensor gi;
  if constexpr (Out) {
    gi = arg(op, s, 7).toTensor();
    if (gi.sizes() != a.self.sizes() || !gi.is_contiguous() ||
        gi.scalar_type() != a.self.scalar_type())
      throw Declined{};
  } else {
    gi = at::empty(a.self.sizes(), a.self.options());
  }
  a.k.op = kNllBackward;
  a.k.grad_dt = a.k.dt;
  a.p.gs[0] = rows ? narrow_loss(grad.stride(0)) : 0;
  launch_loss(a.k, a.p, {gi, grad, a.target, a.weight, total_weight}, uint64_t(a.p.n) * a.p.c);
  finish(op, s, gi);
  return true;
}

// mse_loss's shape in the kernel's terms: innermost first; strides of a, b and (if defined)
// the gradient expanded to the shape.
LossPush mse_push(const at::Tensor& a, const at::Tensor& b, const at::Tensor& grad) {
  if (a.sizes() != b.sizes() || a.dim() > kLossMaxDims || a.numel() == 0) throw Declined{};
  LossPush p;
  const int64_t nd = a.dim();
  for (int64_t k = 0; k < nd; ++k) {
    const int64_t d = nd - 1 - k;
    p.sizes[d] = static_cast<uint32_t>(narrow_loss(a.size(k)));
    p.as[d] = narrow_loss(a.stride(k));
    p.bs[d] = narrow_loss(b.stride(k));
    p.gs[d] = grad.defined() ? narrow_loss(grad.stride(k)) : 0;
  }
  p.n = static_cast<uint32_t>(narrow_loss(a.numel()));
  return p;
}

LossLaunch mse_launch(uint32_t op, const at::Tensor& a, const at::Tensor& b) {
  LossLaunch k;
  k.op = op;
  k.dt = float_dtype(a);
  k.grad_dt = k.dt;
  k.ndim = static_cast<uint32_t>(std::max<int64_t>(a.dim(), 1));
  if (b.scalar_type() != a.scalar_type()) throw Declined{};
  return k;
}

// mse_loss(self, target, reduction[, out]).
template <bool Out>
bool mse_loss(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor a = arg(op, s, 0).toTensor();
  const at::Tensor b = arg(op, s, 1).toTensor();
  const int64_t reduction = arg(op, s, 2).toInt();
  if (reduction < kLossNone || reduction > kLossSum) throw Declined{};
  const LossPush p = mse_push(a, b, at::Tensor());
  LossLaunch k = mse_launch(reduction == kLossNone ? kMse : kMseReduce, a, b);
  k.mean = reduction == kLossMean;
  if (reduction != kLossNone && a.numel() > kMaxReduced) throw Declined{};
  const std::vector<int64_t> sizes =
      reduction == kLossNone ? a.sizes().vec() : std::vector<int64_t>{};
  at::Tensor out;
  if constexpr (Out) {
    out = arg(op, s, 3).toTensor();
    if (out.sizes() != at::IntArrayRef(sizes) || !out.is_contiguous() ||
        out.scalar_type() != a.scalar_type())
      throw Declined{};
  } else {
    out = at::empty(sizes, a.options());
  }
  launch_loss(k, p, {out, a, b}, p.n);
  finish(op, s, out);
  return true;
}

// mse_loss_backward(grad_output, self, target, reduction[, grad_input]).
template <bool Out>
bool mse_loss_backward(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor grad = arg(op, s, 0).toTensor();
  const at::Tensor a = arg(op, s, 1).toTensor();
  const at::Tensor b = arg(op, s, 2).toTensor();
  const int64_t reduction = arg(op, s, 3).toInt();
  if (reduction < kLossNone || reduction > kLossSum || grad.scalar_type() != a.scalar_type())
    throw Declined{};
  if (reduction != kLossNone ? grad.numel() != 1 : grad.dim() > a.dim()) throw Declined{};
  const at::Tensor g =
      reduction != kLossNone ? grad.reshape({}).expand(a.sizes()) : grad.expand(a.sizes());
  LossPush p = mse_push(a, b, g);
  p.scale =
      reduction == kLossMean ? static_cast<float>(2.0 / static_cast<double>(a.numel())) : 2.0f;
  const LossLaunch k = mse_launch(kMseBackward, a, b);
  at::Tensor gi;
  if constexpr (Out) {
    gi = arg(op, s, 4).toTensor();
    if (gi.sizes() != a.sizes() || !gi.is_contiguous() || gi.scalar_type() != a.scalar_type())
      throw Declined{};
  } else {
    gi = at::empty(a.sizes(), a.options());
  }
  launch_loss(k, p, {gi, a, b, g}, p.n);
  finish(op, s, gi);
  return true;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  kernels::impl(m, "nll_loss_forward", &nll_loss_forward<false>);
  kernels::impl(m, "nll_loss_forward.output", &nll_loss_forward<true>);
  kernels::impl(m, "nll_loss_backward", &nll_loss_backward<false>);
  kernels::impl(m, "nll_loss_backward.grad_input", &nll_loss_backward<true>);
  kernels::impl(m, "mse_loss", &mse_loss<false>);
  kernels::impl(m, "mse_loss.out", &mse_loss<true>);
  kernels::impl(m, "mse_loss_backward", &mse_loss_backward<false>);
  kernels::impl(m, "mse_loss_backward.grad_input", &mse_loss_backward<true>);
}

}  // namespace mpsrt::torch_glue
