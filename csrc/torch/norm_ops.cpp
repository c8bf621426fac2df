// Softmax and layer norm on mpsrt's kernels, forward and backward:
//   _softmax, _log_softmax, _softmax_backward_data, _log_softmax_backward_data on softmax.comp
//   (a row per position of the other dims, along the softmax dim, strided operands);
//   native_layer_norm and native_layer_norm_backward on layer_norm.comp (rows: out, mean, rstd;
//   the input's gradient) and layer_norm_cols.comp (weight's and bias's gradients, column
//   sums over the rows).
// Float32, float16 and bfloat16 operands (float32 math); anything else declines to the fallback.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <array>
#include <vector>

#include "host_access.h"
#include "kernels.h"

namespace mpsrt::torch_glue {
namespace {

using kernels::arg;
using kernels::Declined;
using kernels::finish;
using kernels::Launch;

constexpr uint32_t kLocal = 256;     // the row kernels' workgroup
constexpr int64_t kMaxLoop = 65534;  // llvmpipe ends a loop after 65535 iterations

bool is_float(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}
uint32_t dt(const at::Tensor& t) {
  return static_cast<uint32_t>(kernels::dtype_id(t.scalar_type()));
}

// Dims [lo, hi) but `skip` of up to 3 same-shaped tensors, merged where every tensor's outer
// dim continues its inner one, size-1 dims dropped, innermost first: at most 3 (else Declined).
struct Joint {
  uint32_t n = 1;
  uint32_t size[3] = {1, 1, 1};
  uint32_t stride[3][3] = {};  // [tensor][dim]
  uint64_t numel = 1;
};

Joint joint(const std::vector<at::Tensor>& ts, int64_t lo, int64_t hi, int64_t skip = -1) {
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, 3>> strides;
  for (int64_t d = hi - 1; d >= lo; --d) {
    const int64_t size = ts[0].size(d);
    if (d == skip || size == 1) continue;
    bool merge = !sizes.empty();
    for (size_t i = 0; i < ts.size() && merge; ++i) {
      merge = ts[i].stride(d) == strides.back()[i] * sizes.back();
    }
    if (merge) {
      sizes.back() *= size;
      continue;
    }
    sizes.push_back(size);
    strides.push_back({});
    for (size_t i = 0; i < ts.size(); ++i) strides.back()[i] = ts[i].stride(d);
  }
  if (sizes.size() > 3) throw Declined{};
  Joint j;
  j.n = static_cast<uint32_t>(std::max<size_t>(sizes.size(), 1));
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] > UINT32_MAX) throw Declined{};
    j.size[k] = static_cast<uint32_t>(sizes[k]);
    j.numel *= static_cast<uint64_t>(sizes[k]);
    for (size_t i = 0; i < ts.size(); ++i) {
      if (strides[k][i] < 0 || strides[k][i] > UINT32_MAX) throw Declined{};
      j.stride[i][k] = static_cast<uint32_t>(strides[k][i]);
    }
  }
  return j;
}

// A workgroup per row (x * y groups for `rows`), for the row kernels.
void row_groups(Launch& l, uint64_t rows) {
  const uint64_t x = std::min<uint64_t>(rows, 65535);
  l.groups(static_cast<uint32_t>(x), static_cast<uint32_t>((rows + x - 1) / x));
}

// ---------------------------------------------------------------- softmax

enum SmOp : uint32_t { kSoftmax = 0, kLogSoftmax = 1, kSoftmaxBwd = 2, kLogSoftmaxBwd = 3 };

// softmax.comp's op on out (written), a and b (b: the backward's output, else a) along dim.
void launch_softmax(uint32_t op, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                    int64_t dim) {
  const Joint j = joint({out, a, b}, 0, out.dim(), dim);
  const int64_t len = out.size(dim);
  const uint32_t dstride[3] = {static_cast<uint32_t>(out.stride(dim)),
                               static_cast<uint32_t>(a.stride(dim)),
                               static_cast<uint32_t>(b.stride(dim))};
  if (a.stride(dim) > UINT32_MAX || b.stride(dim) > UINT32_MAX) throw Declined{};
  // An invocation per row for short rows and for rows along a strided dim whose neighbours
  // are dense (neighbouring invocations read neighbouring elements); else a workgroup.
  const bool per_thread =
      len <= 32 || (j.stride[1][0] == 1 && j.numel >= kLocal && len <= kMaxLoop);
  if (!per_thread && len > kLocal * kMaxLoop) throw Declined{};
  Launch l("softmax", out.device().index());
  l.spec(op).spec(dt(out)).spec(dt(a)).spec(dt(b)).spec(per_thread ? 0 : 1).spec(j.n);
  l.arg(out, true).arg(a, false).arg(b, false);
  l.push(static_cast<uint32_t>(j.numel)).push(static_cast<uint32_t>(len));
  l.push(j.size).push(j.stride).push(dstride);
  if (per_thread) {
    l.grid(j.numel, kLocal);
  } else {
    row_groups(l, j.numel);
  }
  l.run();
}

// A softmax dim of `t` in range (wrapped), else Declined.
int64_t softmax_dim(const at::Tensor& t, int64_t dim) {
  if (t.dim() == 0 || t.numel() == 0 || dim < -t.dim() || dim >= t.dim()) throw Declined{};
  return dim < 0 ? dim + t.dim() : dim;
}

// _softmax / _log_softmax (self, dim, half_to_float): half_to_float declines.
template <uint32_t Op>
bool softmax(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  if (!is_float(self.scalar_type()) || arg(op, s, 2).toBool()) throw Declined{};
  const int64_t dim = softmax_dim(self, arg(op, s, 1).toInt());
  const at::Tensor out = at::empty(self.sizes(), self.options());
  launch_softmax(Op, out, self, self, dim);
  finish(op, s, out);
  return true;
}

// _softmax_backward_data / _log_softmax_backward_data (grad_output, output, dim, input_dtype):
// every dtype the same.
template <uint32_t Op>
bool softmax_backward(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor grad = arg(op, s, 0).toTensor();
  const at::Tensor output = arg(op, s, 1).toTensor();
  const at::ScalarType t = grad.scalar_type();
  if (!is_float(t) || output.scalar_type() != t || arg(op, s, 3).toScalarType() != t ||
      !grad.sizes().equals(output.sizes())) {
    throw Declined{};
  }
  const int64_t dim = softmax_dim(grad, arg(op, s, 2).toInt());
  const at::Tensor out = at::empty(grad.sizes(), grad.options());
  launch_softmax(Op, out, grad, output, dim);
  finish(op, s, out);
  return true;
}

// ---------------------------------------------------------------- layer norm

// The rows (dims before `axis`) and normalized dims (from it) of input: its sizes from axis
// equal normalized_shape, else Declined.
int64_t norm_axis(const at::Tensor& input, const c10::IValue& normalized_shape) {
  const std::vector<int64_t> shape = normalized_shape.toIntVector();
  const int64_t axis = input.dim() - static_cast<int64_t>(shape.size());
  if (shape.empty() || axis < 0 || input.numel() == 0) throw Declined{};
  for (size_t i = 0; i < shape.size(); ++i) {
    if (input.size(axis + static_cast<int64_t>(i)) != shape[i]) throw Declined{};
  }
  return axis;
}

// An optional parameter (weight, bias, mean, rstd): undefined, or contiguous with n elements
// of a float dtype; else Declined.
at::Tensor param(const c10::IValue& v, int64_t n) {
  if (v.isNone()) return at::Tensor();
  at::Tensor t = v.toTensor();
  if (!t.defined()) return t;
  if (!is_float(t.scalar_type()) || t.numel() != n || !t.is_contiguous()) throw Declined{};
  return t;
}

// layer_norm.comp's and layer_norm_cols.comp's geometry: rows and normalized dims of x and dy.
struct NormGeometry {
  Joint rows, cols;
};

NormGeometry norm_geometry(const at::Tensor& x, const at::Tensor& dy, int64_t axis) {
  NormGeometry g{joint({x, dy}, 0, axis), joint({x, dy}, axis, x.dim())};
  if (g.cols.numel > kLocal * kMaxLoop) throw Declined{};
  return g;
}

void push_geometry(Launch& l, const NormGeometry& g) {
  l.push(g.rows.size).push(g.rows.stride[0]).push(g.rows.stride[1]);
  l.push(g.cols.size).push(g.cols.stride[0]).push(g.cols.stride[1]);
}

// native_layer_norm (input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd).
bool layer_norm(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor x = arg(op, s, 0).toTensor();
  if (!is_float(x.scalar_type())) throw Declined{};
  const int64_t axis = norm_axis(x, arg(op, s, 1));
  const NormGeometry g = norm_geometry(x, x, axis);
  const at::Tensor w = param(arg(op, s, 2), static_cast<int64_t>(g.cols.numel));
  const at::Tensor b = param(arg(op, s, 3), static_cast<int64_t>(g.cols.numel));
  if (w.defined() && b.defined() && w.scalar_type() != b.scalar_type()) throw Declined{};
  const at::Tensor& wb = w.defined() ? w : b;
  // mean / rstd in float32 where a reduced-precision input has float32 parameters (as torch).
  const bool mixed =
      x.scalar_type() != at::kFloat && wb.defined() && wb.scalar_type() == at::kFloat;
  std::vector<int64_t> stat_shape(x.sizes().begin(), x.sizes().begin() + axis);
  stat_shape.resize(static_cast<size_t>(x.dim()), 1);
  const at::Tensor out = at::empty(x.sizes(), x.options());
  const at::Tensor mean =
      at::empty(stat_shape, x.options().dtype(mixed ? at::kFloat : x.scalar_type()));
  const at::Tensor rstd = at::empty(stat_shape, mean.options());
  Launch l("layer_norm", x.device().index());
  l.spec(0).spec(dt(x)).spec(wb.defined() ? dt(wb) : dt(x)).spec(dt(mean));
  l.spec(w.defined() ? 1 : 0).spec(b.defined() ? 1 : 0).spec(g.rows.n).spec(g.cols.n).spec(dt(x));
  l.arg(out, true).arg(x, false).arg(mean, true).arg(rstd, true);
  l.arg(w.defined() ? w : x, false).arg(b.defined() ? b : x, false);
  l.push(static_cast<uint32_t>(g.rows.numel)).push(static_cast<uint32_t>(g.cols.numel));
  l.push(static_cast<float>(arg(op, s, 4).toDouble()));
  push_geometry(l, g);
  row_groups(l, g.rows.numel);
  l.run();
  torch::jit::drop(s, op.schema().arguments().size());
  s.emplace_back(out);
  s.emplace_back(mean);
  s.emplace_back(rstd);
  return true;
}

// The input's gradient: layer_norm.comp's backward.
void layer_norm_dx(const at::Tensor& dx, const at::Tensor& dy, const at::Tensor& x,
                   const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& w,
                   const NormGeometry& g) {
  Launch l("layer_norm", x.device().index());
  l.spec(1).spec(dt(x)).spec(w.defined() ? dt(w) : dt(x)).spec(dt(mean));
  l.spec(w.defined() ? 1 : 0).spec(0).spec(g.rows.n).spec(g.cols.n).spec(dt(dy));
  l.arg(dx, true).arg(x, false).arg(mean, false).arg(rstd, false);
  l.arg(w.defined() ? w : x, false).arg(dy, false);
  l.push(static_cast<uint32_t>(g.rows.numel)).push(static_cast<uint32_t>(g.cols.numel));
  l.push(0.0f);
  push_geometry(l, g);
  row_groups(l, g.rows.numel);
  l.run();
}

// The weight's and bias's gradients (either may be undefined): layer_norm_cols.comp.
void layer_norm_dwb(const at::Tensor& dw, const at::Tensor& db, const at::Tensor& dy,
                    const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
                    const NormGeometry& g) {
  const at::Tensor& any = dw.defined() ? dw : db;
  Launch l("layer_norm_cols", x.device().index());
  l.spec(dt(x)).spec(dt(dy)).spec(dt(mean)).spec(dt(any));
  l.spec(dw.defined() ? 1 : 0).spec(db.defined() ? 1 : 0).spec(g.rows.n).spec(g.cols.n);
  l.arg(dw.defined() ? dw : db, dw.defined()).arg(db.defined() ? db : dw, db.defined());
  l.arg(x, false).arg(dy, false).arg(mean, false).arg(rstd, false);
  l.push(static_cast<uint32_t>(g.rows.numel)).push(static_cast<uint32_t>(g.cols.numel));
  push_geometry(l, g);
  const uint64_t groups = (g.cols.numel + 31) / 32;
  row_groups(l, groups);
  l.run();
}

// native_layer_norm_backward (grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
// output_mask) -> (grad_input, grad_weight, grad_bias), each undefined where the mask says so.
bool layer_norm_backward(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor dy = arg(op, s, 0).toTensor();
  const at::Tensor x = arg(op, s, 1).toTensor();
  if (!is_float(x.scalar_type()) || !is_float(dy.scalar_type()) || !dy.sizes().equals(x.sizes())) {
    throw Declined{};
  }
  const int64_t axis = norm_axis(x, arg(op, s, 2));
  const NormGeometry g = norm_geometry(x, dy, axis);
  const int64_t rows = static_cast<int64_t>(g.rows.numel);
  const int64_t n = static_cast<int64_t>(g.cols.numel);
  const at::Tensor mean = param(arg(op, s, 3), rows), rstd = param(arg(op, s, 4), rows);
  const at::Tensor w = param(arg(op, s, 5), n), b = param(arg(op, s, 6), n);
  const std::vector<bool> mask = arg(op, s, 7).toBoolList().vec();
  if (!mean.defined() || !rstd.defined() || mean.scalar_type() != rstd.scalar_type() ||
      (mask[1] && !w.defined()) || (mask[2] && !b.defined()) ||
      (mask[1] && mask[2] && w.scalar_type() != b.scalar_type()) ||
      ((mask[1] || mask[2]) && rows > 8 * kMaxLoop)) {
    throw Declined{};
  }
  at::Tensor dx, dw, db;
  if (mask[0]) dx = at::empty(x.sizes(), x.options());
  if (mask[1]) dw = at::empty(w.sizes(), w.options());
  if (mask[2]) db = at::empty(b.sizes(), b.options());
  if (mask[0]) layer_norm_dx(dx, dy, x, mean, rstd, w, g);
  if (mask[1] || mask[2]) layer_norm_dwb(dw, db, dy, x, mean, rstd, g);
  torch::jit::drop(s, op.schema().arguments().size());
  s.emplace_back(dx);
  s.emplace_back(dw);
  s.emplace_back(db);
  return true;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  kernels::impl(m, "_softmax", &softmax<kSoftmax>);
  kernels::impl(m, "_log_softmax", &softmax<kLogSoftmax>);
  kernels::impl(m, "_softmax_backward_data", &softmax_backward<kSoftmaxBwd>);
  kernels::impl(m, "_log_softmax_backward_data", &softmax_backward<kLogSoftmaxBwd>);
  kernels::impl(m, "native_layer_norm", &layer_norm);
  kernels::impl(m, "native_layer_norm_backward", &layer_norm_backward);
}

}  // namespace mpsrt::torch_glue
