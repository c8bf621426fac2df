// Reductions on mpsrt's reduce kernel (csrc/kernels/reduce.comp): sum, mean, amax/amin,
// max/min (whole tensor, and along a dim with indices), argmax/argmin, var/std over any dims,
// with keepdim. The input stays where it is (strided): its kept dims and its reduced dims,
// each coalesced to at most 4, make a 2-D problem of output rows (the output is contiguous in
// the kept dims' order) and elements per row (the reduced dims' logical order, which is the
// index argmax returns). Floats are reduced in float32, integers and bool in int64; anything
// else (float64, complex, unsigned wider than a byte) declines to the fallback.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <vector>

#include "host_access.h"
#include "kernels.h"

namespace mpsrt::torch_glue {
namespace {

using kernels::arg;
using kernels::Declined;
using kernels::finish;
using kernels::Launch;

// reduce.comp's ops and outputs.
enum RedOp : uint32_t { kSum = 0, kMean = 1, kMax = 2, kMin = 3, kVar = 4, kStd = 5 };
enum RedOut : uint32_t { kValue = 0, kIndex = 1, kBoth = 2 };

constexpr int kReduceMaxDims = 4;          // per side (kept, reduced) after coalescing
constexpr uint32_t kReduceLocal = 256;     // reduce.comp's workgroup
constexpr int64_t kReduceMaxLoop = 65534;  // llvmpipe ends a loop after 65535 iterations

bool reduce_is_float(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}
bool reduce_is_int(at::ScalarType t) {
  return t == at::kLong || t == at::kInt || t == at::kShort || t == at::kChar || t == at::kByte ||
         t == at::kBool;
}

// Dims listed outermost first, merged where the outer one continues the inner one and with
// size-1 dims dropped, innermost first: at most kReduceMaxDims (else Declined), at least one.
struct Dims {
  uint32_t n = 0;
  uint32_t size[kReduceMaxDims] = {1, 1, 1, 1};
  uint32_t stride[kReduceMaxDims] = {0, 0, 0, 0};
  uint64_t numel = 1;
};

Dims coalesce(const std::vector<std::pair<int64_t, int64_t>>& dims) {
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
  if (out.size() > static_cast<size_t>(kReduceMaxDims)) throw Declined{};
  Dims d;
  d.n = static_cast<uint32_t>(std::max<size_t>(out.size(), 1));
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].first > UINT32_MAX || out[i].second < 0 || out[i].second > UINT32_MAX) {
      throw Declined{};
    }
    d.size[i] = static_cast<uint32_t>(out[i].first);
    d.stride[i] = static_cast<uint32_t>(out[i].second);
    d.numel *= static_cast<uint64_t>(out[i].first);
  }
  return d;
}

// The reduced dims as a bit mask: None or an empty list reduce every dim (as torch does); a dim
// out of range or named twice declines (the fallback raises torch's error).
uint64_t dim_mask(const c10::IValue& dims, int64_t ndim) {
  const uint64_t all = ndim >= 64 ? ~uint64_t(0) : (uint64_t(1) << ndim) - 1;
  if (dims.isNone()) return all;
  std::vector<int64_t> list;
  if (dims.isInt()) {
    list.push_back(dims.toInt());
  } else {
    list = dims.toIntVector();
    if (list.empty()) return all;
  }
  const int64_t range = std::max<int64_t>(ndim, 1);
  uint64_t mask = 0;
  for (int64_t d : list) {
    if (d < -range || d >= range) throw Declined{};
    if (d < 0) d += range;
    if (ndim == 0) continue;  // a 0-dim tensor takes dim 0 / -1 and reduces nothing
    if (mask & (uint64_t(1) << d)) throw Declined{};
    mask |= uint64_t(1) << d;
  }
  return mask;
}

struct Reduction {
  uint32_t op = kSum;
  uint32_t out_mode = kValue;
  at::ScalarType out_dtype = at::kFloat;
  bool int_math = false;
  float correction = 0.0f;
};

// Runs `r` over self's dims in `mask`; returns the output (and the indices for kBoth).
std::pair<at::Tensor, at::Tensor> reduce(const at::Tensor& self, uint64_t mask, bool keepdim,
                                         const Reduction& r) {
  const int64_t ndim = self.dim();
  if (ndim > 64 || self.numel() == 0) throw Declined{};
  const int dti = kernels::dtype_id(self.scalar_type());
  const int dto = kernels::dtype_id(r.out_dtype);
  std::vector<std::pair<int64_t, int64_t>> kept, red;
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < ndim; ++d) {
    const bool reduced = (mask >> d) & 1;
    (reduced ? red : kept).emplace_back(self.size(d), self.stride(d));
    if (!reduced || keepdim) shape.push_back(reduced ? 1 : self.size(d));
  }
  const Dims o = coalesce(kept), e = coalesce(red);
  // An invocation per row for short rows and for rows whose kept dim is the dense one
  // (column reductions: neighbouring invocations read neighbouring elements); else a workgroup.
  const bool per_thread = e.numel <= 32 || (o.stride[0] == 1 && o.numel >= kReduceLocal &&
                                            e.numel <= static_cast<uint64_t>(kReduceMaxLoop));
  if (!per_thread && e.numel > kReduceLocal * static_cast<uint64_t>(kReduceMaxLoop))
    throw Declined{};
  if (o.numel > UINT32_MAX || e.numel > UINT32_MAX) throw Declined{};

  const at::Tensor out =
      at::empty(shape, self.options().dtype(r.out_mode == kIndex ? at::kLong : r.out_dtype));
  // The second output: max/min's indices, var_mean's / std_mean's mean.
  const bool moments = r.op == kVar || r.op == kStd;
  const at::Tensor indices =
      r.out_mode == kBoth
          ? at::empty(shape, self.options().dtype(moments ? r.out_dtype : at::kLong))
          : at::Tensor();
  Launch l("reduce", self.device().index());
  l.spec(r.op).spec(static_cast<uint32_t>(dti)).spec(static_cast<uint32_t>(dto));
  l.spec(r.int_math ? 1 : 0).spec(per_thread ? 0 : 1).spec(o.n).spec(e.n).spec(r.out_mode);
  l.arg(out, true).arg(self, false);
  if (indices.defined()) {
    l.arg(indices, true);
  } else {
    l.arg(out, false);
  }
  l.push(static_cast<uint32_t>(o.numel)).push(static_cast<uint32_t>(e.numel));
  l.push(o.size).push(o.stride).push(e.size).push(e.stride).push(r.correction);
  if (per_thread) {
    l.grid(o.numel, kReduceLocal);
  } else {
    const uint64_t x = std::min<uint64_t>(o.numel, 65535);
    l.groups(static_cast<uint32_t>(x), static_cast<uint32_t>((o.numel + x - 1) / x));
  }
  l.run();
  return {out, indices};
}

// The math and output dtype of sum / mean (`dtype` the op's dtype argument, maybe None): float
// outputs in float32 math, integer outputs (of integer or bool inputs) in int64.
Reduction sum_like(uint32_t op, const at::Tensor& self, const c10::IValue& dtype) {
  const at::ScalarType in = self.scalar_type();
  if (!reduce_is_float(in) && !reduce_is_int(in)) throw Declined{};
  Reduction r;
  r.op = op;
  r.out_dtype = !dtype.isNone() ? dtype.toScalarType() : reduce_is_int(in) ? at::kLong : in;
  if (reduce_is_int(r.out_dtype) && r.out_dtype != at::kBool && op == kSum && reduce_is_int(in)) {
    r.int_math = true;
  } else if (!reduce_is_float(r.out_dtype)) {
    throw Declined{};  // mean of integers without a float dtype, float sums into integers
  }
  return r;
}

// max / min / argmax / argmin: values in the input's dtype, float or int64 math.
Reduction extreme(uint32_t op, const at::Tensor& self, uint32_t out_mode) {
  const at::ScalarType in = self.scalar_type();
  if (!reduce_is_float(in) && !reduce_is_int(in)) throw Declined{};
  Reduction r;
  r.op = op;
  r.out_mode = out_mode;
  r.out_dtype = out_mode == kIndex ? at::kLong : in;
  r.int_math = reduce_is_int(in);
  return r;
}

// sum.dim_IntList / mean.dim (self, dim?, keepdim, *, dtype?) and sum / mean (self, *, dtype?).
template <uint32_t Op, bool WithDims>
bool sum_mean(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  const c10::IValue none;
  const Reduction r = sum_like(Op, self, arg(op, s, WithDims ? 3 : 1));
  const uint64_t mask = dim_mask(WithDims ? arg(op, s, 1) : none, self.dim());
  finish(op, s, reduce(self, mask, WithDims && arg(op, s, 2).toBool(), r).first);
  return true;
}

// amax / amin (self, dim[], keepdim) and max / min (self): the values.
template <uint32_t Op, bool WithDims>
bool extreme_values(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  const c10::IValue none;
  const uint64_t mask = dim_mask(WithDims ? arg(op, s, 1) : none, self.dim());
  const Reduction r = extreme(Op, self, kValue);
  finish(op, s, reduce(self, mask, WithDims && arg(op, s, 2).toBool(), r).first);
  return true;
}

// argmax / argmin (self, dim?, keepdim): the index along dim, or into the flattened tensor.
template <uint32_t Op>
bool arg_extreme(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  const uint64_t mask = dim_mask(arg(op, s, 1), self.dim());
  finish(op, s, reduce(self, mask, arg(op, s, 2).toBool(), extreme(Op, self, kIndex)).first);
  return true;
}

// max.dim / min.dim (self, dim, keepdim) -> (values, indices).
template <uint32_t Op>
bool extreme_dim(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  const uint64_t mask = dim_mask(arg(op, s, 1), self.dim());
  auto [values, indices] = reduce(self, mask, arg(op, s, 2).toBool(), extreme(Op, self, kBoth));
  torch::jit::drop(s, op.schema().arguments().size());
  s.emplace_back(std::move(values));
  s.emplace_back(std::move(indices));
  return true;
}

// var.correction / std.correction (self, dim?, *, correction?, keepdim) and var_mean /
// std_mean (the same) -> (var or std, mean): float inputs.
template <uint32_t Op, bool WithMean>
bool var_std(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  if (!reduce_is_float(self.scalar_type())) throw Declined{};
  const uint64_t mask = dim_mask(arg(op, s, 1), self.dim());
  Reduction r;
  r.op = Op;
  r.out_mode = WithMean ? kBoth : kValue;
  r.out_dtype = self.scalar_type();
  const c10::IValue& correction = arg(op, s, 2);
  r.correction = correction.isNone() ? 1.0f : correction.toScalar().toFloat();
  auto [v, mean] = reduce(self, mask, arg(op, s, 3).toBool(), r);
  torch::jit::drop(s, op.schema().arguments().size());
  s.emplace_back(std::move(v));
  if (WithMean) s.emplace_back(std::move(mean));
  return true;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  kernels::impl(m, "sum.dim_IntList", &sum_mean<kSum, true>);
  kernels::impl(m, "sum", &sum_mean<kSum, false>);
  kernels::impl(m, "mean.dim", &sum_mean<kMean, true>);
  kernels::impl(m, "mean", &sum_mean<kMean, false>);
  kernels::impl(m, "amax", &extreme_values<kMax, true>);
  kernels::impl(m, "amin", &extreme_values<kMin, true>);
  kernels::impl(m, "max", &extreme_values<kMax, false>);
  kernels::impl(m, "min", &extreme_values<kMin, false>);
  kernels::impl(m, "argmax", &arg_extreme<kMax>);
  kernels::impl(m, "argmin", &arg_extreme<kMin>);
  kernels::impl(m, "max.dim", &extreme_dim<kMax>);
  kernels::impl(m, "min.dim", &extreme_dim<kMin>);
  kernels::impl(m, "var.correction", &var_std<kVar, false>);
  kernels::impl(m, "std.correction", &var_std<kStd, false>);
  kernels::impl(m, "var_mean.correction", &var_std<kVar, true>);
  kernels::impl(m, "std_mean.correction", &var_std<kStd, true>);
}

}  // namespace mpsrt::torch_glue
