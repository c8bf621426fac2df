// Loss operators on mpsrt's loss kernel (csrc/kernels/loss/): nll_loss forward and backward (so
// that cross_entropy = log_softmax + nll_loss runs on the device) and mse_loss forward and
// backward; float32, float16 and bfloat16 inputs, computed in float32. The reduced forms run in
// one workgroup (inputs of up to 256 * 65535 rows or elements; larger decline). A target
// outside [0, C) counts as ignored on the device (torch's CPU kernel raises).
#include <ATen/ops/empty.h>
#include <ATen/ops/mse_loss_backward_ops.h>
#include <ATen/ops/mse_loss_ops.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <torch/library.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <tuple>
#include <vector>

#include "loss/loss.h"
#include "ops/common.h"

namespace mpsrt::torch_glue::ops::loss {
namespace {

using namespace mpsrt::kernels::loss;  // NOLINT: the kernel's interface

// torch's reductions (at::Reduction).
enum Reduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };
constexpr int64_t kMaxReduced = int64_t(256) * 65535;  // one workgroup's loop limit

// Whether every value is a non-negative int32 (the kernel's counts and strides).
template <class... V>
bool index32(V... v) {
  return ((v >= 0) && ...) && fits<int32_t>(v...);
}

// The push block a launch starts from: one class, scale 1, every size 1, the rest 0.
Push initial_push() {
  Push p{};
  p.c = 1;
  p.scale = 1.0f;
  std::fill(std::begin(p.sizes), std::end(p.sizes), 1u);
  return p;
}

// The kernel's dtype of a float32 / float16 / bfloat16 tensor; nothing for other dtypes.
std::optional<uint32_t> float_dtype(const at::Tensor& t) {
  if (!is_float(t.scalar_type())) return std::nullopt;
  return dt(t);
}

// The specialisation constants of one launch (loss.h).
struct LossLaunch {
  uint32_t op = OP_NLL;
  uint32_t dt = MPSRT_DTYPE_FLOAT32;
  uint32_t target_dt = MPSRT_DTYPE_INT64;
  bool weight = false;
  bool mean = false;
  uint32_t ndim = 1;
  uint32_t grad_dt = MPSRT_DTYPE_FLOAT32;
};

// One launch; args binding 0 first (written), unused bindings bind binding 0's tensor (never
// read). False (nothing launched) where an argument is not bindable.
[[nodiscard]] bool launch_loss(const LossLaunch& k, const Push& p,
                               std::initializer_list<at::Tensor> args, uint64_t items) {
  const at::Tensor& out = *args.begin();
  Launch l("loss", out.device().index());
  l.spec(SPEC_OP, k.op).spec(SPEC_DT, k.dt).spec(SPEC_DTT, k.target_dt);
  l.spec(SPEC_WEIGHT, k.weight ? 1 : 0).spec(SPEC_MEAN, k.mean ? 1 : 0);
  l.spec(SPEC_NDIM, k.ndim).spec(SPEC_DTG, k.grad_dt);
  size_t i = 0;
  for (const at::Tensor& t : args) l.arg(t.defined() ? t : out, i++ == 0);
  for (; i < 5; ++i) l.arg(out, false);
  l.push(p);
  if (k.op == OP_NLL_REDUCE || k.op == OP_MSE_REDUCE) {
    l.groups(1);
  } else {
    l.grid(items, 256);
  }
  return l.run();
}

// nll_loss's checked arguments: input [N, C] or [C], target [N] or [], weight [C] or none.
struct Nll {
  at::Tensor self, target, weight;
  int64_t reduction = kMean;
  LossLaunch k;
  Push p = initial_push();
};

// Whether nll_loss's arguments have the shapes, dtypes and reduction the kernel takes.
bool nll_shapes(const at::Tensor& self, const at::Tensor& target, const at::Tensor& weight,
                int64_t reduction) {
  const bool batch = self.dim() == 2;
  if ((self.dim() != 1 && !batch) || target.dim() != self.dim() - 1) return false;
  if (target.scalar_type() != at::kLong || reduction < kNone || reduction > kSum) return false;
  const int64_t n = batch ? self.size(0) : 1;
  const int64_t c = self.size(-1);
  if ((batch && target.size(0) != n) || n == 0 || c == 0) return false;
  return !weight.defined() ||
         (weight.dim() == 1 && weight.numel() == c && weight.scalar_type() == self.scalar_type());
}

std::optional<Nll> nll_args(const at::Tensor& self, const at::Tensor& target,
                            const std::optional<at::Tensor>& weight, int64_t reduction,
                            int64_t ignore_index) {
  Nll a{self, target, weight.value_or(at::Tensor()), reduction};
  if (!nll_shapes(self, target, a.weight, reduction)) return std::nullopt;
  const std::optional<uint32_t> dtype = float_dtype(self);
  const bool batch = self.dim() == 2;
  const int64_t n = batch ? self.size(0) : 1;
  const int64_t c = self.size(-1);
  const int64_t xs0 = batch ? self.stride(0) : 0;
  const int64_t ts = batch ? target.stride(0) : 0;
  const int64_t ws = a.weight.defined() ? a.weight.stride(0) : 0;
  if (!dtype || !index32(n, c, xs0, self.stride(-1), ts, ws) || !fits<int32_t>(ignore_index)) {
    return std::nullopt;
  }
  a.k.dt = *dtype;
  a.k.weight = a.weight.defined();
  a.k.mean = reduction == kMean;
  a.p.n = static_cast<uint32_t>(n);
  a.p.c = static_cast<uint32_t>(c);
  a.p.ignore = static_cast<int32_t>(ignore_index);
  a.p.as_[0] = static_cast<int32_t>(xs0);
  a.p.as_[1] = static_cast<int32_t>(self.stride(-1));
  a.p.bs[0] = static_cast<int32_t>(ts);
  if (a.k.weight) a.p.bs[1] = static_cast<int32_t>(ws);
  return a;
}

// Whether the loss is one value per row (reduction none of a batch).
bool per_row(const Nll& a) {
  return a.reduction == kNone && a.self.dim() == 2;
}

// Runs nll_loss's forward into output and total_weight (shaped as torch shapes them); false
// (nothing launched) where it declines.
[[nodiscard]] bool nll_forward(const Nll& a, at::Tensor& output, at::Tensor& total_weight) {
  LossLaunch k = a.k;
  Push p = a.p;
  if (per_row(a)) {
    const int64_t os = output.stride(0);
    if (!index32(os)) return false;
    total_weight.zero_();
    k.op = OP_NLL;
    p.gs[0] = static_cast<int32_t>(os);
    return launch_loss(k, p, {output, a.self, a.target, a.weight}, p.n);
  }
  if (a.p.n > kMaxReduced) return false;
  k.op = OP_NLL_REDUCE;
  return launch_loss(k, p, {output, a.self, a.target, a.weight, total_weight}, 1);
}

// The forward's output sizes: [N] per row, else a scalar.
std::vector<int64_t> nll_out_sizes(const Nll& a) {
  return per_row(a) ? std::vector<int64_t>{a.self.size(0)} : std::vector<int64_t>{};
}

// nll_loss_forward(self, target, weight, reduction, ignore_index) -> (output, total_weight).
std::optional<std::tuple<at::Tensor, at::Tensor>> nll_loss_forward(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    int64_t reduction, int64_t ignore_index) {
  const std::optional<Nll> a = nll_args(self, target, weight, reduction, ignore_index);
  if (!a) return std::nullopt;
  at::Tensor output = at::empty(nll_out_sizes(*a), self.options());
  at::Tensor total_weight = at::empty({}, self.options());
  if (!nll_forward(*a, output, total_weight)) return std::nullopt;
  return std::make_tuple(output, total_weight);
}

// nll_loss_forward.output(..., output, total_weight): the outputs as torch shapes them.
std::optional<std::tuple<at::Tensor&, at::Tensor&>> nll_loss_forward_out(
    const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    int64_t reduction, int64_t ignore_index, at::Tensor& output, at::Tensor& total_weight) {
  const std::optional<Nll> a = nll_args(self, target, weight, reduction, ignore_index);
  if (!a) return std::nullopt;
  if (output.sizes() != at::IntArrayRef(nll_out_sizes(*a)) || total_weight.numel() != 1 ||
      output.scalar_type() != self.scalar_type() ||
      total_weight.scalar_type() != self.scalar_type()) {
    return std::nullopt;
  }
  if (!nll_forward(*a, output, total_weight)) return std::nullopt;
  return std::tuple<at::Tensor&, at::Tensor&>(output, total_weight);
}

// nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight)
// -> grad_input (new, or out= as grad_input: contiguous, of self's sizes and dtype).
struct NllBackward {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& grad,
                                       const at::Tensor& self, const at::Tensor& target,
                                       const std::optional<at::Tensor>& weight, int64_t reduction,
                                       int64_t ignore_index, const at::Tensor& total_weight) {
    std::optional<Nll> a = nll_args(self, target, weight, reduction, ignore_index);
    if (!a) return std::nullopt;
    const bool rows = per_row(*a);
    if (grad.scalar_type() != self.scalar_type() || total_weight.numel() != 1 ||
        total_weight.scalar_type() != self.scalar_type() ||
        (rows ? grad.dim() != 1 || grad.size(0) != self.size(0) : grad.numel() != 1)) {
      return std::nullopt;
    }
    const int64_t gs = rows ? grad.stride(0) : 0;
    if (!fits<int32_t>(int64_t(a->p.n) * a->p.c) || !index32(gs)) return std::nullopt;
    if (out.defined() && (out.sizes() != self.sizes() || !out.is_contiguous() ||
                          out.scalar_type() != self.scalar_type())) {
      return std::nullopt;
    }
    at::Tensor gi = out.defined() ? out : at::empty(self.sizes(), self.options());
    a->k.op = OP_NLL_BACKWARD;
    a->k.grad_dt = a->k.dt;
    a->p.gs[0] = static_cast<int32_t>(gs);
    const uint64_t items = uint64_t(a->p.n) * a->p.c;
    if (!launch_loss(a->k, a->p, {gi, grad, a->target, a->weight, total_weight}, items)) {
      return std::nullopt;
    }
    return gi;
  }
};

// mse_loss's shape in the kernel's terms: innermost first; strides of a, b and (if defined)
// the gradient expanded to the shape. Nothing where the shapes differ or do not fit.
std::optional<Push> mse_push(const at::Tensor& a, const at::Tensor& b, const at::Tensor& grad) {
  if (a.sizes() != b.sizes() || a.dim() > MAX_DIMS || a.numel() == 0) return std::nullopt;
  Push p = initial_push();
  const int64_t nd = a.dim();
  for (int64_t k = 0; k < nd; ++k) {
    const int64_t d = nd - 1 - k;
    const int64_t gs = grad.defined() ? grad.stride(k) : 0;
    if (!index32(a.size(k), a.stride(k), b.stride(k), gs)) return std::nullopt;
    p.sizes[d] = static_cast<uint32_t>(a.size(k));
    p.as_[d] = static_cast<int32_t>(a.stride(k));
    p.bs[d] = static_cast<int32_t>(b.stride(k));
    p.gs[d] = static_cast<int32_t>(gs);
  }
  if (!index32(a.numel())) return std::nullopt;
  p.n = static_cast<uint32_t>(a.numel());
  return p;
}

// The launch of mse op `op` over a and b (one float dtype).
std::optional<LossLaunch> mse_launch(uint32_t op, const at::Tensor& a, const at::Tensor& b) {
  const std::optional<uint32_t> dtype = float_dtype(a);
  if (!dtype || b.scalar_type() != a.scalar_type()) return std::nullopt;
  LossLaunch k;
  k.op = op;
  k.dt = *dtype;
  k.grad_dt = k.dt;
  k.ndim = static_cast<uint32_t>(std::max<int64_t>(a.dim(), 1));
  return k;
}

// Whether out (defined: an out= argument) takes a result of these sizes and a's dtype.
bool out_fits(const at::Tensor& out, at::IntArrayRef sizes, const at::Tensor& a) {
  return !out.defined() ||
         (out.sizes() == sizes && out.is_contiguous() && out.scalar_type() == a.scalar_type());
}

// mse_loss(self, target, reduction) -> the loss (new, or out=).
struct MseLoss {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                                       int64_t reduction) {
    if (reduction < kNone || reduction > kSum) return std::nullopt;
    const std::optional<Push> p = mse_push(a, b, at::Tensor());
    if (!p) return std::nullopt;
    std::optional<LossLaunch> k = mse_launch(reduction == kNone ? OP_MSE : OP_MSE_REDUCE, a, b);
    if (!k) return std::nullopt;
    k->mean = reduction == kMean;
    if (reduction != kNone && a.numel() > kMaxReduced) return std::nullopt;
    const std::vector<int64_t> sizes =
        reduction == kNone ? a.sizes().vec() : std::vector<int64_t>{};
    if (!out_fits(out, sizes, a)) return std::nullopt;
    at::Tensor result = out.defined() ? out : at::empty(sizes, a.options());
    if (!launch_loss(*k, *p, {result, a, b}, p->n)) return std::nullopt;
    return result;
  }
};

// mse_loss_backward(grad_output, self, target, reduction) -> grad_input (new, or out=).
struct MseLossBackward {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& grad, const at::Tensor& a,
                                       const at::Tensor& b, int64_t reduction) {
    if (reduction < kNone || reduction > kSum || grad.scalar_type() != a.scalar_type()) {
      return std::nullopt;
    }
    if (reduction != kNone ? grad.numel() != 1 : grad.dim() > a.dim()) return std::nullopt;
    const at::Tensor g =
        reduction != kNone ? grad.reshape({}).expand(a.sizes()) : grad.expand(a.sizes());
    std::optional<Push> p = mse_push(a, b, g);
    if (!p) return std::nullopt;
    p->scale = reduction == kMean ? static_cast<float>(2.0 / static_cast<double>(a.numel())) : 2.0f;
    const std::optional<LossLaunch> k = mse_launch(OP_MSE_BACKWARD, a, b);
    if (!k || !out_fits(out, a.sizes(), a)) return std::nullopt;
    at::Tensor gi = out.defined() ? out : at::empty(a.sizes(), a.options());
    if (!launch_loss(*k, *p, {gi, a, b, g}, p->n)) return std::nullopt;
    return gi;
  }
};

void register_ops(torch::Library& m) {
  namespace A = at::_ops;
  reg<A::nll_loss_forward, &nll_loss_forward, HostPath::kTyped>(m);
  reg<A::nll_loss_forward_output, &nll_loss_forward_out>(m);
  reg<A::nll_loss_backward, Functional<NllBackward>, HostPath::kTyped>(m);
  reg<A::nll_loss_backward_grad_input, Out<NllBackward>>(m);
  reg<A::mse_loss, Functional<MseLoss>, HostPath::kTyped>(m);
  reg<A::mse_loss_out, Out<MseLoss>>(m);
  reg<A::mse_loss_backward, Functional<MseLossBackward>, HostPath::kTyped>(m);
  reg<A::mse_loss_backward_grad_input, Out<MseLossBackward>>(m);
}

}  // namespace

}  // namespace mpsrt::torch_glue::ops::loss

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::loss::register_ops(m);
}
