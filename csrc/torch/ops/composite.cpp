// Ops that run on the device as a composition of its other ops, where the device runs mpsrt's
// kernels: each is a few launches of the element-wise and reduction kernels, no kernel of its
// own. They are what models reach besides the big families: the infinity and NaN tests and
// all / any (scaled_dot_product_attention's math path checks for fully masked rows with them),
// dropout's backward, clamp with tensor bounds and isin. Each composition dispatches to the device
// again (so a declined piece still falls back on its own); the result is torch's, dtype and shape
// included.
#include <ATen/ops/abs.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/minimum.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <ATen/ops/all_ops.h>
#include <ATen/ops/any_ops.h>
#include <ATen/ops/clamp_max_ops.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/clamp_ops.h>
#include <ATen/ops/isin_ops.h>
#include <ATen/ops/isinf_ops.h>
#include <ATen/ops/isnan_ops.h>
#include <ATen/ops/isneginf_ops.h>
#include <ATen/ops/isposinf_ops.h>
#include <ATen/ops/native_dropout_backward_ops.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "ops/common.h"

namespace mpsrt::torch_glue::ops::composite {
namespace {

// The result of an op: `result` where out is undefined (the functional form), else `result`
// copied into out (the out= form; resized as torch's out= ops resize an output of the wrong
// shape).
at::Tensor into(at::Tensor& out, const at::Tensor& result) {
  if (!out.defined()) return result;
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

// isneginf / isposinf / isinf / isnan (a bool out= argument).
template <FloatTest T>
struct FloatTestOp {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self) {
    if (self.is_complex() || (out.defined() && out.scalar_type() != at::kBool)) {
      return std::nullopt;
    }
    return into(out, float_test<T>(self));
  }
};

// all / any over dims (none: every dim) as the minimum / maximum of self != 0, a bool tensor
// (torch's all / any of uint8 give uint8).
template <bool Any>
struct AllAny {
  // all(self), all.all_out
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self) {
    return reduce(out, self, {}, false);
  }
  // all.dim, all.out
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self, int64_t dim,
                                       bool keepdim) {
    return reduce(out, self, {dim}, keepdim);
  }
  // all.dims, all.dims_out
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self,
                                       at::OptionalIntArrayRef dim, bool keepdim) {
    return reduce(out, self, dim ? dim->vec() : std::vector<int64_t>{}, keepdim);
  }

 private:
  static std::optional<at::Tensor> reduce(at::Tensor& out, const at::Tensor& self,
                                          const std::vector<int64_t>& dims, bool keepdim) {
    if (self.numel() == 0 || self.is_complex()) return std::nullopt;
    const at::Tensor nonzero = at::ne(self, 0);
    at::Tensor r = Any ? at::amax(nonzero, dims, keepdim) : at::amin(nonzero, dims, keepdim);
    if (self.scalar_type() == at::kByte) r = r.to(at::kByte);
    if (out.defined() && out.scalar_type() != r.scalar_type()) return std::nullopt;
    return into(out, r);
  }
};

// native_dropout_backward(grad, mask, scale) = grad * mask * scale.
struct DropoutBackward {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& grad,
                                       const at::Tensor& mask, double scale) {
    if (!at::isFloatingType(grad.scalar_type()) || grad.sizes() != mask.sizes()) {
      return std::nullopt;
    }
    return into(out, at::mul(grad, mask).mul_(scale));
  }
};

// clamp with tensor bounds: maximum with the lower, then minimum with the upper (torch's order:
// a lower bound above the upper gives the upper; NaN anywhere gives NaN). An out= argument
// takes the result's dtype where torch casts it.
std::optional<at::Tensor> clamp_tensor(at::Tensor& out, const at::Tensor& self,
                                       const std::optional<at::Tensor>& lo,
                                       const std::optional<at::Tensor>& hi) {
  if (self.is_complex() || self.scalar_type() == at::kBool) return std::nullopt;
  at::Tensor r = self;
  if (lo) r = at::maximum(r, *lo);
  if (hi) r = at::minimum(r, *hi);
  if (out.defined() && !at::canCast(r.scalar_type(), out.scalar_type())) return std::nullopt;
  return into(out, r);
}

// clamp.Tensor(self, min, max): one bound at least (torch's error comes from the fallback).
struct ClampTensor {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self,
                                       const std::optional<at::Tensor>& min,
                                       const std::optional<at::Tensor>& max) {
    if (!min && !max) return std::nullopt;
    return clamp_tensor(out, self, min, max);
  }
};

// clamp_min.Tensor / clamp_max.Tensor.
template <bool Max>
struct ClampOneTensor {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self,
                                       const at::Tensor& bound) {
    return Max ? clamp_tensor(out, self, std::nullopt, bound)
               : clamp_tensor(out, self, bound, std::nullopt);
  }
};

// isin(elements, test_elements): every element against every test element at once (eq, then
// any over the tests), as generate() asks whether the last tokens end their sequences. Declines
// where that comparison would be large (more than 2^24 pairs: torch's sorting method then,
// through the fallback) or the dtypes differ (torch promotes them first).
struct IsIn {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& elements,
                                       const at::Tensor& test, bool /*assume_unique*/,
                                       bool invert) {
    const int64_t pairs = elements.numel() * test.numel();
    if (elements.scalar_type() != test.scalar_type() || pairs > (int64_t{1} << 24)) {
      return std::nullopt;
    }
    at::Tensor hit = at::zeros(elements.sizes(), elements.options().dtype(at::kBool));
    if (pairs > 0) {
      hit = at::eq(elements.reshape({-1, 1}), test.reshape({1, -1})).any(1).view(elements.sizes());
    }
    return into(out, invert ? at::logical_not(hit) : hit);
  }
};

namespace A = at::_ops;

// The functional and out= forms of op `Core`.
template <class F, class O, class Core>
void forms(torch::Library& m) {
  reg<F, Functional<Core>>(m);
  reg<O, Out<Core>>(m);
}

void register_ops(torch::Library& m) {
  forms<A::isneginf, A::isneginf_out, FloatTestOp<kIsNegInf>>(m);
  forms<A::isposinf, A::isposinf_out, FloatTestOp<kIsPosInf>>(m);
  reg<A::isinf, Functional<FloatTestOp<kIsInf>>>(m);
  reg<A::isnan, Functional<FloatTestOp<kIsNan>>>(m);
  forms<A::all, A::all_all_out, AllAny<false>>(m);
  forms<A::all_dim, A::all_out, AllAny<false>>(m);
  forms<A::all_dims, A::all_dims_out, AllAny<false>>(m);
  forms<A::any, A::any_all_out, AllAny<true>>(m);
  forms<A::any_dim, A::any_out, AllAny<true>>(m);
  forms<A::any_dims, A::any_dims_out, AllAny<true>>(m);
  forms<A::clamp_Tensor, A::clamp_Tensor_out, ClampTensor>(m);
  forms<A::clamp_min_Tensor, A::clamp_min_Tensor_out, ClampOneTensor<false>>(m);
  forms<A::clamp_max_Tensor, A::clamp_max_Tensor_out, ClampOneTensor<true>>(m);
  forms<A::native_dropout_backward, A::native_dropout_backward_out, DropoutBackward>(m);
  forms<A::isin_Tensor_Tensor, A::isin_Tensor_Tensor_out, IsIn>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::composite

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::composite::register_ops(m);
}
