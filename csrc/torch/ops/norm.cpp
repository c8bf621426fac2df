// Softmax and layer norm on mpsrt's kernels (csrc/kernels/norm/), forward and backward:
//   _softmax, _log_softmax, _softmax_backward_data, _log_softmax_backward_data on softmax.comp
//   (a row per position of the other dims, along the softmax dim, strided operands);
//   native_layer_norm and native_layer_norm_backward on layer_norm.comp (rows: out, mean, rstd;
//   the input's gradient) and layer_norm_cols.comp (weight's and bias's gradients, column
//   sums over the rows).
// Float32, float16 and bfloat16 operands (float32 math); anything else declines to the fallback.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/native_layer_norm_backward_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>

#include <algorithm>
#include <array>
#include <optional>
#include <tuple>
#include <vector>

#include "norm/layer_norm.h"
#include "norm/layer_norm_cols.h"
#include "norm/softmax.h"
#include "ops/common.h"

namespace mpsrt::torch_glue::ops::norm {
namespace {

// The kernels' interfaces (one header each: their names overlap).
namespace sm = ::mpsrt::kernels::norm::softmax;
namespace ln = ::mpsrt::kernels::norm::layer_norm;
namespace lc = ::mpsrt::kernels::norm::layer_norm_cols;

constexpr int64_t kMaxLoop = 65534;  // llvmpipe ends a loop after 65535 iterations

// Dims [lo, hi) but `skip` of up to 3 same-shaped tensors, merged where every tensor's outer
// dim continues its inner one, size-1 dims dropped, innermost first: at most 3 (else nothing).
struct Joint {
  uint32_t n = 1;
  uint32_t size[3] = {1, 1, 1};
  uint32_t stride[3][3] = {};  // [tensor][dim]
  uint64_t numel = 1;
};

std::optional<Joint> joint(const std::vector<at::Tensor>& ts, int64_t lo, int64_t hi,
                           int64_t skip = -1) {
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
  if (sizes.size() > 3) return std::nullopt;
  Joint j;
  j.n = static_cast<uint32_t>(std::max<size_t>(sizes.size(), 1));
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (!fits<uint32_t>(sizes[k])) return std::nullopt;
    j.size[k] = static_cast<uint32_t>(sizes[k]);
    j.numel *= static_cast<uint64_t>(sizes[k]);
    for (size_t i = 0; i < ts.size(); ++i) {
      const std::optional<uint32_t> stride = narrow<uint32_t>(strides[k][i]);
      if (!stride) return std::nullopt;
      j.stride[i][k] = *stride;
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

// softmax.comp's push constants for rows j of `len` elements, strided `dstride` along the dim.
sm::Push softmax_push(const Joint& j, int64_t len, const uint32_t (&dstride)[3]) {
  sm::Push push{};
  push.rows = static_cast<uint32_t>(j.numel);
  push.len = static_cast<uint32_t>(len);
  std::copy_n(j.size, 3, push.osize);
  std::copy_n(&j.stride[0][0], 9, push.ostride);
  std::copy_n(dstride, 3, push.dstride);
  return push;
}

// softmax.comp's op on out (written), a and b (b: the backward's output, else a) along dim;
// false (nothing launched) where it declines.
[[nodiscard]] bool launch_softmax(uint32_t op, const at::Tensor& out, const at::Tensor& a,
                                  const at::Tensor& b, int64_t dim) {
  const std::optional<Joint> j = joint({out, a, b}, 0, out.dim(), dim);
  if (!j || !fits<uint32_t>(out.stride(dim), a.stride(dim), b.stride(dim))) return false;
  const int64_t len = out.size(dim);
  const uint32_t dstride[3] = {static_cast<uint32_t>(out.stride(dim)),
                               static_cast<uint32_t>(a.stride(dim)),
                               static_cast<uint32_t>(b.stride(dim))};
  // An invocation per row for short rows and for rows along a strided dim whose neighbours
  // are dense (neighbouring invocations read neighbouring elements); else a workgroup.
  const bool per_thread =
      len <= 32 || (j->stride[1][0] == 1 && j->numel >= sm::LOCAL && len <= kMaxLoop);
  if (!per_thread && len > sm::LOCAL * kMaxLoop) return false;
  Launch l("softmax", out.device().index());
  l.spec(sm::SPEC_OP, op).spec(sm::SPEC_DT0, dt(out)).spec(sm::SPEC_DT1, dt(a));
  l.spec(sm::SPEC_DT2, dt(b)).spec(sm::SPEC_PER_GROUP, per_thread ? 0 : 1);
  l.spec(sm::SPEC_ONDIM, j->n);
  l.arg(out, true).arg(a, false).arg(b, false);
  l.push(softmax_push(*j, len, dstride));
  if (per_thread) {
    l.grid(j->numel, sm::LOCAL);
  } else {
    row_groups(l, j->numel);
  }
  return l.run();
}

// A softmax dim of `t` in range (wrapped), else nothing.
std::optional<int64_t> softmax_dim(const at::Tensor& t, int64_t dim) {
  if (t.dim() == 0 || t.numel() == 0 || dim < -t.dim() || dim >= t.dim()) return std::nullopt;
  return dim < 0 ? dim + t.dim() : dim;
}

// _softmax / _log_softmax (self, dim, half_to_float): half_to_float declines.
template <uint32_t Op>
std::optional<at::Tensor> softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  if (!is_float(self.scalar_type()) || half_to_float) return std::nullopt;
  const std::optional<int64_t> d = softmax_dim(self, dim);
  if (!d) return std::nullopt;
  const at::Tensor out = at::empty(self.sizes(), self.options());
  if (!launch_softmax(Op, out, self, self, *d)) return std::nullopt;
  return out;
}

// _softmax_backward_data / _log_softmax_backward_data (grad_output, output, dim, input_dtype):
// every dtype the same.
template <uint32_t Op>
std::optional<at::Tensor> softmax_backward(const at::Tensor& grad, const at::Tensor& output,
                                           int64_t dim, at::ScalarType input_dtype) {
  const at::ScalarType t = grad.scalar_type();
  if (!is_float(t) || output.scalar_type() != t || input_dtype != t ||
      !grad.sizes().equals(output.sizes())) {
    return std::nullopt;
  }
  const std::optional<int64_t> d = softmax_dim(grad, dim);
  if (!d) return std::nullopt;
  const at::Tensor out = at::empty(grad.sizes(), grad.options());
  if (!launch_softmax(Op, out, grad, output, *d)) return std::nullopt;
  return out;
}

// ---------------------------------------------------------------- layer norm

// The rows (dims before `axis`) and normalized dims (from it) of input: its sizes from axis
// equal normalized_shape, else nothing.
std::optional<int64_t> norm_axis(const at::Tensor& input, at::IntArrayRef normalized_shape) {
  const int64_t axis = input.dim() - static_cast<int64_t>(normalized_shape.size());
  if (normalized_shape.empty() || axis < 0 || input.numel() == 0) return std::nullopt;
  for (size_t i = 0; i < normalized_shape.size(); ++i) {
    if (input.size(axis + static_cast<int64_t>(i)) != normalized_shape[i]) return std::nullopt;
  }
  return axis;
}

// A parameter (weight, bias, mean, rstd): undefined (absent), or contiguous with n elements of
// a float dtype; else nothing (declines).
std::optional<at::Tensor> param(const at::Tensor& t, int64_t n) {
  if (!t.defined()) return t;
  if (!is_float(t.scalar_type()) || t.numel() != n || !t.is_contiguous()) return std::nullopt;
  return t;
}
std::optional<at::Tensor> param(const std::optional<at::Tensor>& t, int64_t n) {
  return t ? param(*t, n) : at::Tensor();
}

// layer_norm.comp's and layer_norm_cols.comp's geometry: rows and normalized dims of x and dy.
struct NormGeometry {
  Joint rows, cols;
};

std::optional<NormGeometry> norm_geometry(const at::Tensor& x, const at::Tensor& dy, int64_t axis) {
  const std::optional<Joint> rows = joint({x, dy}, 0, axis);
  const std::optional<Joint> cols = joint({x, dy}, axis, x.dim());
  if (!rows || !cols || cols->numel > ln::LOCAL * kMaxLoop) return std::nullopt;
  return NormGeometry{*rows, *cols};
}

// The push constants both kernels share (a layer_norm.h or layer_norm_cols.h Push).
template <class P>
P norm_push(const NormGeometry& g) {
  P push{};
  push.rows = static_cast<uint32_t>(g.rows.numel);
  push.len = static_cast<uint32_t>(g.cols.numel);
  std::copy_n(g.rows.size, 3, push.osize);
  std::copy_n(&g.rows.stride[0][0], 6, push.ostride);  // x's strides, then dy's
  std::copy_n(g.cols.size, 3, push.isize);
  std::copy_n(&g.cols.stride[0][0], 6, push.istride);
  return push;
}

// layer_norm.comp's forward: out, mean and rstd of x (w, b: undefined where absent).
[[nodiscard]] bool layer_norm_forward(const at::Tensor& out, const at::Tensor& mean,
                                      const at::Tensor& rstd, const at::Tensor& x,
                                      const at::Tensor& w, const at::Tensor& b, double eps,
                                      const NormGeometry& g) {
  const at::Tensor& wb = w.defined() ? w : b;
  Launch l("layer_norm", x.device().index());
  l.spec(ln::SPEC_OP, ln::OP_FORWARD).spec(ln::SPEC_DTX, dt(x));
  l.spec(ln::SPEC_DTW, wb.defined() ? dt(wb) : dt(x)).spec(ln::SPEC_DTS, dt(mean));
  l.spec(ln::SPEC_HAS_W, w.defined() ? 1 : 0).spec(ln::SPEC_HAS_B, b.defined() ? 1 : 0);
  l.spec(ln::SPEC_ONDIM, g.rows.n).spec(ln::SPEC_INDIM, g.cols.n).spec(ln::SPEC_DTG, dt(x));
  l.arg(out, true).arg(x, false).arg(mean, true).arg(rstd, true);
  l.arg(w.defined() ? w : x, false).arg(b.defined() ? b : x, false);
  ln::Push push = norm_push<ln::Push>(g);
  push.eps = static_cast<float>(eps);
  l.push(push);
  row_groups(l, g.rows.numel);
  return l.run();
}

// native_layer_norm (input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd).
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> layer_norm(
    const at::Tensor& x, at::IntArrayRef normalized_shape, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps) {
  if (!is_float(x.scalar_type())) return std::nullopt;
  const std::optional<int64_t> axis = norm_axis(x, normalized_shape);
  if (!axis) return std::nullopt;
  const std::optional<NormGeometry> g = norm_geometry(x, x, *axis);
  if (!g) return std::nullopt;
  const std::optional<at::Tensor> w = param(weight, static_cast<int64_t>(g->cols.numel));
  const std::optional<at::Tensor> b = param(bias, static_cast<int64_t>(g->cols.numel));
  if (!w || !b) return std::nullopt;
  if (w->defined() && b->defined() && w->scalar_type() != b->scalar_type()) return std::nullopt;
  const at::Tensor& wb = w->defined() ? *w : *b;
  // mean / rstd in float32 where a reduced-precision input has float32 parameters (as torch).
  const bool mixed =
      x.scalar_type() != at::kFloat && wb.defined() && wb.scalar_type() == at::kFloat;
  std::vector<int64_t> stat_shape(x.sizes().begin(), x.sizes().begin() + *axis);
  stat_shape.resize(static_cast<size_t>(x.dim()), 1);
  const at::Tensor out = at::empty(x.sizes(), x.options());
  const at::Tensor mean =
      at::empty(stat_shape, x.options().dtype(mixed ? at::kFloat : x.scalar_type()));
  const at::Tensor rstd = at::empty(stat_shape, mean.options());
  if (!layer_norm_forward(out, mean, rstd, x, *w, *b, eps, *g)) return std::nullopt;
  return std::make_tuple(out, mean, rstd);
}

// The input's gradient: layer_norm.comp's backward.
[[nodiscard]] bool layer_norm_dx(const at::Tensor& dx, const at::Tensor& dy, const at::Tensor& x,
                                 const at::Tensor& mean, const at::Tensor& rstd,
                                 const at::Tensor& w, const NormGeometry& g) {
  Launch l("layer_norm", x.device().index());
  l.spec(ln::SPEC_OP, ln::OP_BACKWARD).spec(ln::SPEC_DTX, dt(x));
  l.spec(ln::SPEC_DTW, w.defined() ? dt(w) : dt(x)).spec(ln::SPEC_DTS, dt(mean));
  l.spec(ln::SPEC_HAS_W, w.defined() ? 1 : 0).spec(ln::SPEC_HAS_B, 0);
  l.spec(ln::SPEC_ONDIM, g.rows.n).spec(ln::SPEC_INDIM, g.cols.n).spec(ln::SPEC_DTG, dt(dy));
  l.arg(dx, true).arg(x, false).arg(mean, false).arg(rstd, false);
  l.arg(w.defined() ? w : x, false).arg(dy, false);
  ln::Push push = norm_push<ln::Push>(g);
  push.eps = 0.0f;
  l.push(push);
  row_groups(l, g.rows.numel);
  return l.run();
}

// The weight's and bias's gradients (either may be undefined): layer_norm_cols.comp.
[[nodiscard]] bool layer_norm_dwb(const at::Tensor& dw, const at::Tensor& db, const at::Tensor& dy,
                                  const at::Tensor& x, const at::Tensor& mean,
                                  const at::Tensor& rstd, const NormGeometry& g) {
  const at::Tensor& any = dw.defined() ? dw : db;
  Launch l("layer_norm_cols", x.device().index());
  l.spec(lc::SPEC_DTX, dt(x)).spec(lc::SPEC_DTG, dt(dy)).spec(lc::SPEC_DTS, dt(mean));
  l.spec(lc::SPEC_DTW, dt(any)).spec(lc::SPEC_WANT_W, dw.defined() ? 1 : 0);
  l.spec(lc::SPEC_WANT_B, db.defined() ? 1 : 0);
  l.spec(lc::SPEC_ONDIM, g.rows.n).spec(lc::SPEC_INDIM, g.cols.n);
  l.arg(dw.defined() ? dw : db, dw.defined()).arg(db.defined() ? db : dw, db.defined());
  l.arg(x, false).arg(dy, false).arg(mean, false).arg(rstd, false);
  l.push(norm_push<lc::Push>(g));
  row_groups(l, (g.cols.numel + lc::COLS - 1) / lc::COLS);
  return l.run();
}

// native_layer_norm_backward's parameters: mean, rstd (per row), weight, bias (per column),
// each checked by param(); nothing where one declines or they do not suit output_mask.
std::optional<std::array<at::Tensor, 4>> backward_params(
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::array<bool, 3>& mask, const NormGeometry& g) {
  const int64_t rows = static_cast<int64_t>(g.rows.numel);
  const int64_t n = static_cast<int64_t>(g.cols.numel);
  const std::optional<at::Tensor> m = param(mean, rows), r = param(rstd, rows);
  const std::optional<at::Tensor> w = param(weight, n), b = param(bias, n);
  if (!m || !r || !w || !b) return std::nullopt;
  if (!m->defined() || !r->defined() || m->scalar_type() != r->scalar_type() ||
      (mask[1] && !w->defined()) || (mask[2] && !b->defined()) ||
      (mask[1] && mask[2] && w->scalar_type() != b->scalar_type()) ||
      ((mask[1] || mask[2]) && rows > lc::SLICES * kMaxLoop)) {
    return std::nullopt;
  }
  return std::array<at::Tensor, 4>{*m, *r, *w, *b};
}

// native_layer_norm_backward (grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
// output_mask) -> (grad_input, grad_weight, grad_bias), each undefined where the mask says so.
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> layer_norm_backward(
    const at::Tensor& dy, const at::Tensor& x, at::IntArrayRef normalized_shape,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> mask) {
  if (!is_float(x.scalar_type()) || !is_float(dy.scalar_type()) || !dy.sizes().equals(x.sizes())) {
    return std::nullopt;
  }
  const std::optional<int64_t> axis = norm_axis(x, normalized_shape);
  if (!axis) return std::nullopt;
  const std::optional<NormGeometry> g = norm_geometry(x, dy, *axis);
  if (!g) return std::nullopt;
  const auto p = backward_params(mean, rstd, weight, bias, mask, *g);
  if (!p) return std::nullopt;
  const auto& [m, r, w, b] = *p;
  at::Tensor dx, dw, db;
  if (mask[0]) dx = at::empty(x.sizes(), x.options());
  if (mask[1]) dw = at::empty(w.sizes(), w.options());
  if (mask[2]) db = at::empty(b.sizes(), b.options());
  if (mask[0] && !layer_norm_dx(dx, dy, x, m, r, w, *g)) return std::nullopt;
  if ((mask[1] || mask[2]) && !layer_norm_dwb(dw, db, dy, x, m, r, *g)) return std::nullopt;
  return std::make_tuple(dx, dw, db);
}

namespace A = at::_ops;

void register_ops(torch::Library& m) {
  reg<A::_softmax, &softmax<sm::OP_SOFTMAX>, HostPath::kTyped>(m);
  reg<A::_log_softmax, &softmax<sm::OP_LOG_SOFTMAX>, HostPath::kTyped>(m);
  reg<A::_softmax_backward_data, &softmax_backward<sm::OP_SOFTMAX_BWD>, HostPath::kTyped>(m);
  reg<A::_log_softmax_backward_data, &softmax_backward<sm::OP_LOG_BWD>, HostPath::kTyped>(m);
  reg<A::native_layer_norm, &layer_norm, HostPath::kTyped>(m);
  reg<A::native_layer_norm_backward, &layer_norm_backward, HostPath::kTyped>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::norm

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::norm::register_ops(m);
}
