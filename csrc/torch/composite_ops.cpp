// Ops that run on the device as a composition of its other ops, where the device runs mpsrt's
// kernels: each is a few launches of the element-wise and reduction kernels, no kernel of its
// own. They are what models reach besides the big families: the infinity and NaN tests and
// all / any (scaled_dot_product_attention's math path checks for fully masked rows with them),
// dropout's backward and clamp with tensor bounds. Each composition dispatches to the device again
// (so a declined piece still falls back on its own); the result is torch's, dtype and shape
// included.
#include <ATen/ops/abs.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/minimum.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>

#include "kernels.h"

namespace mpsrt::torch_glue {
namespace {

using kernels::arg;
using kernels::Declined;
using kernels::finish;

// The result of an op's functional form into its out= argument (resized as torch's out= ops
// resize an output of the wrong shape).
at::Tensor& into(at::Tensor& out, const at::Tensor& result) {
  if (out.sizes() != result.sizes()) out.resize_(result.sizes());
  out.copy_(result);
  return out;
}

enum FloatTest { kIsNegInf, kIsPosInf, kIsInf, kIsNan };

template <FloatTest T>
at::Tensor float_test(const at::Tensor& self) {
  if (!at::isFloatingType(self.scalar_type())) return at::zeros_like(self, at::kBool);
  constexpr double inf = std::numeric_limits<double>::infinity();
  switch (T) {
    case kIsNegInf:
      return at::eq(self, -inf);
    case kIsPosInf:
      return at::eq(self, inf);
    case kIsInf:
      return at::eq(at::abs(self), inf);
    default:
      return at::ne(self, self);
  }
}

template <FloatTest T, bool Out>
bool float_test_op(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  if (self.is_complex()) throw Declined{};
  at::Tensor r = float_test<T>(self);
  if constexpr (Out) {
    at::Tensor out = arg(op, s, 1).toTensor();
    if (out.scalar_type() != at::kBool) throw Declined{};
    finish(op, s, into(out, r));
  } else {
    finish(op, s, r);
  }
  return true;
}

// all / any over dims (none: every dim) as the minimum / maximum of self != 0, a bool tensor.
enum class AllAnyDims { kAll, kOne, kList };

template <bool Any, AllAnyDims D, bool Out>
bool all_any(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  if (self.numel() == 0 || self.is_complex()) throw Declined{};
  std::vector<int64_t> dims;
  bool keepdim = false;
  if constexpr (D == AllAnyDims::kOne) {
    dims.push_back(arg(op, s, 1).toInt());
    keepdim = arg(op, s, 2).toBool();
  } else if constexpr (D == AllAnyDims::kList) {
    if (!arg(op, s, 1).isNone()) dims = arg(op, s, 1).toIntVector();
    keepdim = arg(op, s, 2).toBool();
  }
  const at::Tensor nonzero = at::ne(self, 0);
  at::Tensor r = Any ? at::amax(nonzero, dims, keepdim) : at::amin(nonzero, dims, keepdim);
  // torch's all / any of uint8 give uint8; of every other dtype, bool.
  if (self.scalar_type() == at::kByte) r = r.to(at::kByte);
  if constexpr (Out) {
    at::Tensor out = arg(op, s, D == AllAnyDims::kAll ? 1 : 3).toTensor();
    if (out.scalar_type() != r.scalar_type()) throw Declined{};
    finish(op, s, into(out, r));
  } else {
    finish(op, s, r);
  }
  return true;
}

// native_dropout_backward(grad, mask, scale) = grad * mask * scale.
template <bool Out>
bool dropout_backward(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor grad = arg(op, s, 0).toTensor(), mask = arg(op, s, 1).toTensor();
  const double scale = arg(op, s, 2).toDouble();
  if (!at::isFloatingType(grad.scalar_type()) || grad.sizes() != mask.sizes()) throw Declined{};
  at::Tensor r = at::mul(grad, mask).mul_(scale);
  if constexpr (Out) {
    at::Tensor out = arg(op, s, 3).toTensor();
    finish(op, s, into(out, r));
  } else {
    finish(op, s, r);
  }
  return true;
}

// clamp with tensor bounds: maximum with the lower, then minimum with the upper (torch's order:
// a lower bound above the upper gives the upper; NaN anywhere gives NaN).
enum TensorClamp { kClampBoth, kClampMin, kClampMax };

template <TensorClamp K, bool Out>
bool clamp_tensor(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  std::optional<at::Tensor> lo, hi;
  if constexpr (K == kClampBoth) {
    lo = arg(op, s, 1).toOptional<at::Tensor>();
    hi = arg(op, s, 2).toOptional<at::Tensor>();
    if (!lo && !hi) throw Declined{};  // torch's error comes from the fallback
  } else if constexpr (K == kClampMin) {
    lo = arg(op, s, 1).toTensor();
  } else {
    hi = arg(op, s, 1).toTensor();
  }
  if (self.is_complex() || self.scalar_type() == at::kBool) throw Declined{};
  at::Tensor r = self;
  if (lo) r = at::maximum(r, *lo);
  if (hi) r = at::minimum(r, *hi);
  if constexpr (Out) {
    at::Tensor out = arg(op, s, K == kClampBoth ? 3 : 2).toTensor();
    if (!at::canCast(r.scalar_type(), out.scalar_type())) throw Declined{};
    finish(op, s, into(out, r));
  } else {
    finish(op, s, r);
  }
  return true;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  kernels::impl(m, "isneginf", &float_test_op<kIsNegInf, false>);
  kernels::impl(m, "isneginf.out", &float_test_op<kIsNegInf, true>);
  kernels::impl(m, "isposinf", &float_test_op<kIsPosInf, false>);
  kernels::impl(m, "isposinf.out", &float_test_op<kIsPosInf, true>);
  kernels::impl(m, "isinf", &float_test_op<kIsInf, false>);
  kernels::impl(m, "isnan", &float_test_op<kIsNan, false>);
  kernels::impl(m, "all", &all_any<false, AllAnyDims::kAll, false>);
  kernels::impl(m, "all.dim", &all_any<false, AllAnyDims::kOne, false>);
  kernels::impl(m, "all.dims", &all_any<false, AllAnyDims::kList, false>);
  kernels::impl(m, "all.out", &all_any<false, AllAnyDims::kOne, true>);
  kernels::impl(m, "all.dims_out", &all_any<false, AllAnyDims::kList, true>);
  kernels::impl(m, "all.all_out", &all_any<false, AllAnyDims::kAll, true>);
  kernels::impl(m, "any", &all_any<true, AllAnyDims::kAll, false>);
  kernels::impl(m, "any.dim", &all_any<true, AllAnyDims::kOne, false>);
  kernels::impl(m, "any.dims", &all_any<true, AllAnyDims::kList, false>);
  kernels::impl(m, "any.out", &all_any<true, AllAnyDims::kOne, true>);
  kernels::impl(m, "any.dims_out", &all_any<true, AllAnyDims::kList, true>);
  kernels::impl(m, "any.all_out", &all_any<true, AllAnyDims::kAll, true>);
  kernels::impl(m, "clamp.Tensor", &clamp_tensor<kClampBoth, false>);
  kernels::impl(m, "clamp.Tensor_out", &clamp_tensor<kClampBoth, true>);
  kernels::impl(m, "clamp_min.Tensor", &clamp_tensor<kClampMin, false>);
  kernels::impl(m, "clamp_min.Tensor_out", &clamp_tensor<kClampMin, true>);
  kernels::impl(m, "clamp_max.Tensor", &clamp_tensor<kClampMax, false>);
  kernels::impl(m, "clamp_max.Tensor_out", &clamp_tensor<kClampMax, true>);
  kernels::impl(m, "native_dropout_backward", &dropout_backward<false>);
  kernels::impl(m, "native_dropout_backward.out", &dropout_backward<true>);
}

}  // namespace mpsrt::torch_glue
