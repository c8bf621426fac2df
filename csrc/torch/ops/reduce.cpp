// Reductions on mpsrt's reduce kernel (csrc/kernels/reduce/): sum, mean, amax/amin, max/min
// (whole tensor, and along a dim with indices), argmax/argmin, var/std over any dims, with
// keepdim. The input stays where it is (strided): its kept dims and its reduced dims, each
// coalesced to at most 4, make a 2-D problem of output rows (the output is contiguous in the
// kept dims' order) and elements per row (the reduced dims' logical order, which is the index
// argmax returns). Floats are reduced in float32, integers and bool in int64; anything else
// (float64, complex, unsigned wider than a byte) declines to the fallback.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <ATen/ops/amax_ops.h>
#include <ATen/ops/amin_ops.h>
#include <ATen/ops/argmax_ops.h>
#include <ATen/ops/argmin_ops.h>
#include <ATen/ops/max_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/min_ops.h>
#include <ATen/ops/std_mean_ops.h>
#include <ATen/ops/std_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/var_mean_ops.h>
#include <ATen/ops/var_ops.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "ops/common.h"
#include "reduce/reduce.h"

namespace mpsrt::torch_glue::ops::reduce {
namespace {

using namespace mpsrt::kernels::reduce;  // NOLINT: the kernel's interface

constexpr int kMaxDims = 4;          // per side (kept, reduced) after coalescing
constexpr int64_t kMaxLoop = 65534;  // llvmpipe ends a loop after 65535 iterations

bool is_int(at::ScalarType t) {
  return t == at::kLong || t == at::kInt || t == at::kShort || t == at::kChar || t == at::kByte ||
         t == at::kBool;
}

// Dims listed outermost first, merged where the outer one continues the inner one and with
// size-1 dims dropped, innermost first: at most kMaxDims (else nothing), at least one.
struct Dims {
  uint32_t n = 0;
  uint32_t size[kMaxDims] = {1, 1, 1, 1};
  uint32_t stride[kMaxDims] = {0, 0, 0, 0};
  uint64_t numel = 1;
};

std::optional<Dims> coalesce(const std::vector<std::pair<int64_t, int64_t>>& dims) {
  std::vector<std::pair<int64_t, int64_t>> out;  // innermost first
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    const auto [size, stride] = *it;
    if (size == 1) continue;
    if (!out.empty() && stride == out.back().first * out.back().second) {
      out.back().first *= size;
      continue;
    }
    out.emplace_back(size, stride);
  }
  if (out.size() > static_cast<size_t>(kMaxDims)) return std::nullopt;
  Dims d;
  d.n = static_cast<uint32_t>(std::max<size_t>(out.size(), 1));
  for (size_t i = 0; i < out.size(); ++i) {
    const std::optional<uint32_t> size = narrow<uint32_t>(out[i].first);
    const std::optional<uint32_t> stride = narrow<uint32_t>(out[i].second);
    if (!size || !stride) return std::nullopt;
    d.size[i] = *size;
    d.stride[i] = *stride;
    d.numel *= static_cast<uint64_t>(*size);
  }
  return d;
}

// The reduced dims as a bit mask: None or an empty list reduce every dim (as torch does); a dim
// out of range or named twice declines (the fallback raises torch's error), as do more than 64
// dims.
std::optional<uint64_t> dim_mask(at::OptionalIntArrayRef dims, int64_t ndim) {
  if (ndim > 64) return std::nullopt;
  const uint64_t all = ndim >= 64 ? ~uint64_t(0) : (uint64_t(1) << ndim) - 1;
  if (!dims.has_value() || dims->empty()) return all;
  const int64_t range = std::max<int64_t>(ndim, 1);
  uint64_t mask = 0;
  for (int64_t d : *dims) {
    if (d < -range || d >= range) return std::nullopt;
    if (d < 0) d += range;
    if (ndim == 0) continue;  // a 0-dim tensor takes dim 0 / -1 and reduces nothing
    if (mask & (uint64_t(1) << d)) return std::nullopt;
    mask |= uint64_t(1) << d;
  }
  return mask;
}

// One dim (max.dim, argmax's dim), or None: every dim.
std::optional<uint64_t> one_dim_mask(std::optional<int64_t> dim, int64_t ndim) {
  if (!dim) return dim_mask(std::nullopt, ndim);
  return dim_mask(at::IntArrayRef(*dim), ndim);
}

struct Reduction {
  uint32_t op = OP_SUM;
  uint32_t out_mode = OUT_VALUE;
  at::ScalarType out_dtype = at::kFloat;
  bool int_math = false;
  float correction = 0.0f;
};

// The problem: the kept dims (output rows), the reduced dims (a row's elements), the output's
// shape, and whether an invocation (rather than a workgroup) reduces a row.
struct Plan {
  Dims o, e;
  std::vector<int64_t> shape;
  bool per_thread = false;
};

std::optional<Plan> plan(const at::Tensor& self, uint64_t mask, bool keepdim) {
  const int64_t ndim = self.dim();
  if (ndim > 64 || self.numel() == 0) return std::nullopt;
  std::vector<std::pair<int64_t, int64_t>> kept, red;
  Plan p;
  for (int64_t d = 0; d < ndim; ++d) {
    const bool reduced = (mask >> d) & 1;
    (reduced ? red : kept).emplace_back(self.size(d), self.stride(d));
    if (!reduced || keepdim) p.shape.push_back(reduced ? 1 : self.size(d));
  }
  const std::optional<Dims> o = coalesce(kept), e = coalesce(red);
  if (!o || !e) return std::nullopt;
  p.o = *o;
  p.e = *e;
  // An invocation per row for short rows and for rows whose kept dim is the dense one
  // (column reductions: neighbouring invocations read neighbouring elements); else a workgroup.
  p.per_thread = e->numel <= 32 || (o->stride[0] == 1 && o->numel >= LOCAL &&
                                    e->numel <= static_cast<uint64_t>(kMaxLoop));
  if (!p.per_thread && e->numel > LOCAL * static_cast<uint64_t>(kMaxLoop)) return std::nullopt;
  if (!fits<uint32_t>(o->numel, e->numel)) return std::nullopt;
  return p;
}

// The push constants of plan p.
Push push_of(const Plan& p, float correction) {
  Push push{};
  push.rows = static_cast<uint32_t>(p.o.numel);
  push.len = static_cast<uint32_t>(p.e.numel);
  std::copy_n(p.o.size, kMaxDims, push.osize);
  std::copy_n(p.o.stride, kMaxDims, push.ostride);
  std::copy_n(p.e.size, kMaxDims, push.rsize);
  std::copy_n(p.e.stride, kMaxDims, push.rstride);
  push.correction = correction;
  return push;
}

// Runs `r` over self's dims in `mask`; returns the output (and for OUT_BOTH the indices, or
// var_mean's / std_mean's mean).
std::optional<std::pair<at::Tensor, at::Tensor>> run_reduce(const at::Tensor& self, uint64_t mask,
                                                            bool keepdim, const Reduction& r) {
  const std::optional<Plan> p = plan(self, mask, keepdim);
  if (!p) return std::nullopt;
  const at::Tensor out =
      at::empty(p->shape, self.options().dtype(r.out_mode == OUT_INDEX ? at::kLong : r.out_dtype));
  // The second output: max/min's indices, var_mean's / std_mean's mean.
  const bool moments = r.op == OP_VAR || r.op == OP_STD;
  const at::Tensor second =
      r.out_mode == OUT_BOTH
          ? at::empty(p->shape, self.options().dtype(moments ? r.out_dtype : at::kLong))
          : at::Tensor();
  Launch l("reduce", self.device().index());
  l.spec(SPEC_OP, r.op).spec(SPEC_DTI, dt(self));
  l.spec(SPEC_DTO, static_cast<uint32_t>(dtype_id(r.out_dtype)));
  l.spec(SPEC_INT_MATH, r.int_math ? 1 : 0).spec(SPEC_PER_GROUP, p->per_thread ? 0 : 1);
  l.spec(SPEC_ONDIM, p->o.n).spec(SPEC_RNDIM, p->e.n).spec(SPEC_OUT, r.out_mode);
  l.arg(out, true).arg(self, false);
  if (second.defined()) {
    l.arg(second, true);
  } else {
    l.arg(out, false);
  }
  l.push(push_of(*p, r.correction));
  if (p->per_thread) {
    l.grid(p->o.numel, LOCAL);
  } else {
    const uint64_t x = std::min<uint64_t>(p->o.numel, 65535);
    l.groups(static_cast<uint32_t>(x), static_cast<uint32_t>((p->o.numel + x - 1) / x));
  }
  if (!l.run()) return std::nullopt;
  return std::make_pair(out, second);
}

// The values of run_reduce (a single-output op).
std::optional<at::Tensor> values(const at::Tensor& self, std::optional<uint64_t> mask, bool keepdim,
                                 const std::optional<Reduction>& r) {
  if (!mask || !r) return std::nullopt;
  auto res = run_reduce(self, *mask, keepdim, *r);
  if (!res) return std::nullopt;
  return res->first;
}

// The math and output dtype of sum / mean (`dtype` the op's dtype argument, maybe None): float
// outputs in float32 math, integer outputs (of integer or bool inputs) in int64.
std::optional<Reduction> sum_like(uint32_t op, const at::Tensor& self,
                                  std::optional<at::ScalarType> dtype) {
  const at::ScalarType in = self.scalar_type();
  if (!is_float(in) && !is_int(in)) return std::nullopt;
  Reduction r;
  r.op = op;
  r.out_dtype = dtype ? *dtype : is_int(in) ? at::kLong : in;
  if (is_int(r.out_dtype) && r.out_dtype != at::kBool && op == OP_SUM && is_int(in)) {
    r.int_math = true;
  } else if (!is_float(r.out_dtype)) {
    return std::nullopt;  // mean of integers without a float dtype, float sums into integers
  }
  return r;
}

// max / min / argmax / argmin: values in the input's dtype, float or int64 math.
std::optional<Reduction> extreme(uint32_t op, const at::Tensor& self, uint32_t out_mode) {
  const at::ScalarType in = self.scalar_type();
  if (!is_float(in) && !is_int(in)) return std::nullopt;
  Reduction r;
  r.op = op;
  r.out_mode = out_mode;
  r.out_dtype = out_mode == OUT_INDEX ? at::kLong : in;
  r.int_math = is_int(in);
  return r;
}

// sum / mean (self, *, dtype?) and sum.dim_IntList / mean.dim (self, dim?, keepdim, *, dtype?).
template <uint32_t Op>
struct SumMean {
  static std::optional<at::Tensor> run(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                       bool keepdim, std::optional<at::ScalarType> dtype) {
    const std::optional<Reduction> r = sum_like(Op, self, dtype);
    if (!r) return std::nullopt;
    return values(self, dim_mask(dim, self.dim()), keepdim, r);
  }
  static std::optional<at::Tensor> run(const at::Tensor& self,
                                       std::optional<at::ScalarType> dtype) {
    return run(self, std::nullopt, false, dtype);
  }
};

// amax / amin (self, dim[], keepdim) and max / min (self): the values.
template <uint32_t Op>
struct ExtremeValues {
  static std::optional<at::Tensor> run(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
    const std::optional<uint64_t> mask = dim_mask(dim, self.dim());
    return values(self, mask, keepdim, extreme(Op, self, OUT_VALUE));
  }
  static std::optional<at::Tensor> run(const at::Tensor& self) {
    return values(self, dim_mask(std::nullopt, self.dim()), false, extreme(Op, self, OUT_VALUE));
  }
};

// argmax / argmin (self, dim?, keepdim): the index along dim, or into the flattened tensor.
template <uint32_t Op>
std::optional<at::Tensor> arg_extreme(const at::Tensor& self, std::optional<int64_t> dim,
                                      bool keepdim) {
  const std::optional<uint64_t> mask = one_dim_mask(dim, self.dim());
  return values(self, mask, keepdim, extreme(Op, self, OUT_INDEX));
}

// max.dim / min.dim (self, dim, keepdim) -> (values, indices).
template <uint32_t Op>
std::optional<std::tuple<at::Tensor, at::Tensor>> extreme_dim(const at::Tensor& self, int64_t dim,
                                                              bool keepdim) {
  const std::optional<uint64_t> mask = one_dim_mask(dim, self.dim());
  if (!mask) return std::nullopt;
  const std::optional<Reduction> r = extreme(Op, self, OUT_BOTH);
  if (!r) return std::nullopt;
  auto res = run_reduce(self, *mask, keepdim, *r);
  if (!res) return std::nullopt;
  return std::make_tuple(res->first, res->second);
}

// var.correction / std.correction (self, dim?, *, correction?, keepdim) and var_mean /
// std_mean (the same) -> (var or std, mean): float inputs.
template <uint32_t Op, bool WithMean>
std::optional<std::pair<at::Tensor, at::Tensor>> var_std(
    const at::Tensor& self, at::OptionalIntArrayRef dim,
    const std::optional<c10::Scalar>& correction, bool keepdim) {
  if (!is_float(self.scalar_type())) return std::nullopt;
  const std::optional<uint64_t> mask = dim_mask(dim, self.dim());
  if (!mask) return std::nullopt;
  Reduction r;
  r.op = Op;
  r.out_mode = WithMean ? OUT_BOTH : OUT_VALUE;
  r.out_dtype = self.scalar_type();
  r.correction = correction ? correction->toFloat() : 1.0f;
  return run_reduce(self, *mask, keepdim, r);
}

template <uint32_t Op>
std::optional<at::Tensor> var_or_std(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                     const std::optional<c10::Scalar>& correction, bool keepdim) {
  auto res = var_std<Op, false>(self, dim, correction, keepdim);
  if (!res) return std::nullopt;
  return res->first;
}

template <uint32_t Op>
std::optional<std::tuple<at::Tensor, at::Tensor>> var_or_std_mean(
    const at::Tensor& self, at::OptionalIntArrayRef dim,
    const std::optional<c10::Scalar>& correction, bool keepdim) {
  auto res = var_std<Op, true>(self, dim, correction, keepdim);
  if (!res) return std::nullopt;
  return std::make_tuple(res->first, res->second);
}

namespace A = at::_ops;

void register_ops(torch::Library& m) {
  reg<A::sum_dim_IntList, SumMean<OP_SUM>, HostPath::kTyped>(m);
  reg<A::sum, SumMean<OP_SUM>, HostPath::kTyped>(m);
  reg<A::mean_dim, SumMean<OP_MEAN>, HostPath::kTyped>(m);
  reg<A::mean, SumMean<OP_MEAN>, HostPath::kTyped>(m);
  reg<A::amax, ExtremeValues<OP_MAX>, HostPath::kTyped>(m);
  reg<A::amin, ExtremeValues<OP_MIN>, HostPath::kTyped>(m);
  reg<A::max, ExtremeValues<OP_MAX>, HostPath::kTyped>(m);
  reg<A::min, ExtremeValues<OP_MIN>, HostPath::kTyped>(m);
  reg<A::argmax, &arg_extreme<OP_MAX>, HostPath::kTyped>(m);
  reg<A::argmin, &arg_extreme<OP_MIN>, HostPath::kTyped>(m);
  reg<A::max_dim, &extreme_dim<OP_MAX>, HostPath::kTyped>(m);
  reg<A::min_dim, &extreme_dim<OP_MIN>, HostPath::kTyped>(m);
  reg<A::var_correction, &var_or_std<OP_VAR>>(m);
  reg<A::std_correction, &var_or_std<OP_STD>>(m);
  reg<A::var_mean_correction, &var_or_std_mean<OP_VAR>>(m);
  reg<A::std_mean_correction, &var_or_std_mean<OP_STD>>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::reduce

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::reduce::register_ops(m);
}
