// Batch norm and group norm on mpsrt's batch_norm kernel (csrc/kernels/norm/batch_norm.comp),
// forward and backward:
//   native_batch_norm, _native_batch_norm_legit (+ .no_stats, _no_training),
//   _batch_norm_with_update / _batch_norm_no_update (their reserve empty): training takes
//   Welford partials per (channel, chunk), a merge that writes save_mean / save_invstd and
//   updates the running statistics in place, then the elementwise apply; eval applies the
//   running statistics. Any layout (strided: channels-last too).
//   native_batch_norm_backward (and batch_norm_backward, `update` as train): per-channel sums of dy
//   and dy * (x - mean) in two passes, then the elementwise dx; dweight, dbias from the sums.
//   native_group_norm (+ backward): the same ops over the (sample, group) rows of a contiguous
//   input; the weight's and bias's gradients over (hw, sample) per channel.
//   batch_norm itself (torch's composite op, above autograd): where nothing needs a gradient,
//   straight to the kernels above; else torch's composition (see batch_norm_entry).
// Float32, float16 and bfloat16 inputs (float32 math and statistics); parameters and running
// statistics of a float dtype (float32 beside a reduced input, as torch's mixed type). What a
// kernel does not take (other dtypes, 2^32 elements or more, a layout
// whose reduction dims do not coalesce to 3) declines to the fallback.
#include <ATen/core/Tensor.h>
#include <ATen/ops/batch_norm_native.h>
#include <ATen/ops/batch_norm_ops.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <ATen/ops/_batch_norm_no_update_ops.h>
#include <ATen/ops/_batch_norm_with_update_ops.h>
#include <ATen/ops/_native_batch_norm_legit_no_training_ops.h>
#include <ATen/ops/_native_batch_norm_legit_ops.h>
#include <ATen/ops/batch_norm_backward_ops.h>
#include <ATen/ops/native_batch_norm_backward_ops.h>
#include <ATen/ops/native_batch_norm_ops.h>
#include <ATen/ops/native_group_norm_backward_ops.h>
#include <ATen/ops/native_group_norm_ops.h>

#include <algorithm>
#include <array>
#include <optional>
#include <tuple>
#include <vector>

#include "device/host_access.h"
#include "norm/batch_norm.h"
#include "ops/common.h"
#include "ops/launch.h"
#include "ops/storage.h"

namespace mpsrt::torch_glue::ops::batch_norm {
namespace {

namespace bn = ::mpsrt::kernels::norm::batch_norm;

using Tensors3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

constexpr uint64_t kMaxChunks = 4096;  // partials per channel (the merges loop over them)

// The kernel's view of up to three same-shaped operands (x, dy, out): channels along
// `cdim`'s stride, the other dims (size-1 dims dropped, merged where every operand's outer dim
// continues its inner one, innermost first) as up to 3 reduction dims; and the chunks the
// per-chunk ops cut each channel into.
struct Geometry {
  bn::Push push{};
  uint32_t rdim = 1;
};

// Whether every element of t lies within 2^32 elements of its first (32-bit offsets).
bool span_fits(const at::Tensor& t) {
  uint64_t span = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) < 0) return false;
    span += static_cast<uint64_t>(t.size(d) - 1) * static_cast<uint64_t>(t.stride(d));
  }
  return span <= UINT32_MAX;
}

// The chunks: LOCAL invocations each take up to PER_INVOCATION elements of a chunk, and a
// channel has at most kMaxChunks of them.
void set_chunks(bn::Push& p) {
  const uint64_t count = p.count;
  const uint64_t each =
      std::max<uint64_t>((count + bn::LOCAL * kMaxChunks - 1) / (bn::LOCAL * kMaxChunks),
                         std::min<uint64_t>(64, (count + bn::LOCAL - 1) / bn::LOCAL));
  p.chunk = static_cast<uint32_t>(bn::LOCAL * std::max<uint64_t>(each, 1));
  p.chunks = static_cast<uint32_t>((count + p.chunk - 1) / p.chunk);
}

std::optional<Geometry> geometry(const std::array<at::Tensor, 3>& ts, int64_t cdim) {
  const at::Tensor& x = ts[0];
  const int64_t channels = x.size(cdim);
  if (x.numel() == 0 || !fits<uint32_t>(x.numel())) return std::nullopt;
  // The reduced dims, innermost first, merged where every tensor's strides allow: at most 3.
  std::array<int64_t, 3> sizes{};
  std::array<std::array<int64_t, 3>, 3> strides{};
  size_t n = 0;
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    if (d == cdim || x.size(d) == 1) continue;
    bool merge = n > 0;
    for (size_t i = 0; i < 3 && merge; ++i)
      merge = ts[i].stride(d) == strides[n - 1][i] * sizes[n - 1];
    if (merge) {
      sizes[n - 1] *= x.size(d);
      continue;
    }
    if (n == 3) return std::nullopt;
    sizes[n] = x.size(d);
    strides[n++] = {ts[0].stride(d), ts[1].stride(d), ts[2].stride(d)};
  }
  Geometry g;
  g.rdim = static_cast<uint32_t>(std::max<size_t>(n, 1));
  g.push.channels = static_cast<uint32_t>(channels);
  g.push.count = static_cast<uint32_t>(x.numel() / channels);
  std::fill_n(g.push.rsize, 3, 1u);
  for (size_t k = 0; k < n; ++k) {
    g.push.rsize[k] = static_cast<uint32_t>(sizes[k]);
    for (size_t i = 0; i < 3; ++i) g.push.rstride[i * 3 + k] = static_cast<uint32_t>(strides[k][i]);
  }
  for (size_t i = 0; i < 3; ++i) {
    if (!span_fits(ts[i])) return std::nullopt;
    g.push.cstride[i] = static_cast<uint32_t>(ts[i].stride(cdim));
  }
  set_chunks(g.push);
  return g;
}

// A launch of the kernel's op `op` on g with x's dtype, reduction dims and push constants.
Launch launch(uint32_t op, const Geometry& g, const at::Tensor& x, uint32_t gn = 0) {
  Launch l("batch_norm", x.device().index());
  l.spec(bn::SPEC_OP, op).spec(bn::SPEC_DTX, dt(x)).spec(bn::SPEC_RDIM, g.rdim);
  l.spec(bn::SPEC_GN, gn).push(g.push);
  return l;
}

// The per-chunk ops' workgroups: x the chunk, y and z the channel (z * y's count + y).
void chunk_groups(Launch& l, const Geometry& g) {
  const uint32_t y = std::min<uint32_t>(g.push.channels, 65535);
  l.groups(g.push.chunks, y, (g.push.channels + y - 1) / y);
}

// The statistics' arguments (2, 3) and dtype: mean and invstd, or mean and variance (var).
void stats(Launch& l, const at::Tensor& mean, const at::Tensor& s, bool var) {
  l.spec(bn::SPEC_DTS, dt(mean)).spec(bn::SPEC_VAR, var ? 1 : 0);
  l.arg(mean, false).arg(s, false);
}

// The weight's and bias's arguments (4, 5; absent ones bind `other`, unused).
void params(Launch& l, const at::Tensor& w, const at::Tensor& b, const at::Tensor& other,
            bool written) {
  const at::Tensor& any = w.defined() ? w : b;
  l.spec(bn::SPEC_DTW, any.defined() ? dt(any) : dt(other));
  l.spec(bn::SPEC_HAS_W, w.defined() ? 1 : 0).spec(bn::SPEC_HAS_B, b.defined() ? 1 : 0);
  l.arg(w.defined() ? w : other, written && w.defined());
  l.arg(b.defined() ? b : other, written && b.defined());
}

// STATS then MERGE: mean and invstd per channel of x; the running statistics (rm, rv: both or
// neither defined) updated.
[[nodiscard]] bool channel_stats(const Geometry& g, const at::Tensor& x, const at::Tensor& mean,
                                 const at::Tensor& invstd, const at::Tensor& rm,
                                 const at::Tensor& rv, uint32_t gn = 0) {
  // MERGE's specialisations and its arguments 2-5 (the statistics written, the running ones
  // updated where given).
  const auto merging = [&](Launch& m) {
    m.spec(bn::SPEC_DTS, dt(mean)).spec(bn::SPEC_HAS_RUN, rm.defined() ? 1 : 0);
    m.spec(bn::SPEC_DTR, rm.defined() ? dt(rm) : dt(mean));
    m.arg(mean, true).arg(invstd, true);
    m.arg(rm.defined() ? rm : mean, rm.defined()).arg(rv.defined() ? rv : mean, rv.defined());
  };
  if (g.push.chunks == 1) {  // one launch, no partials
    Launch sm = launch(bn::OP_STATS_MERGE, g, x, gn);
    sm.arg(x, false).arg(x, false);
    merging(sm);
    sm.arg(x, false).arg(x, false);
    chunk_groups(sm, g);
    return sm.run();
  }
  const at::Tensor part =
      new_empty({int64_t(g.push.channels) * g.push.chunks * 3}, at::kFloat, x.device());
  Launch s = launch(bn::OP_STATS, g, x, gn);
  s.arg(part, true).arg(x, false).fill_args(1);
  chunk_groups(s, g);
  if (!s.run()) return false;
  Launch m = launch(bn::OP_MERGE, g, x, gn);
  m.arg(part, false).arg(part, false);
  merging(m);
  m.arg(part, false).arg(part, false);
  return m.grid(g.push.channels, bn::LOCAL).run();
}

// APPLY: out from x and the statistics (s: invstd, or the variance where var).
[[nodiscard]] bool apply(const Geometry& g, const at::Tensor& out, const at::Tensor& x,
                         const at::Tensor& mean, const at::Tensor& s, bool var, const at::Tensor& w,
                         const at::Tensor& b, uint32_t gn = 0) {
  Launch l = launch(bn::OP_APPLY, g, x, gn);
  l.arg(out, true).arg(x, false);
  stats(l, mean, s, var);
  params(l, w, b, x, false);
  l.arg(x, false).arg(x, false);
  return l.grid(uint64_t(g.push.channels) * g.push.count, bn::LOCAL).run();
}

// GRAD_SUMS then GRAD_MERGE: sums [channels][2] (float32) of dy and dy * (x - mean) (see the
// kernel for group norm's), and dw / db where defined.
[[nodiscard]] bool grad_sums(const Geometry& g, const at::Tensor& sums, const at::Tensor& x,
                             const at::Tensor& dy, const at::Tensor& mean, const at::Tensor& s,
                             bool var, const at::Tensor& w, const at::Tensor& dw,
                             const at::Tensor& db, uint32_t gn = 0) {
  const at::Tensor part =
      new_empty({int64_t(g.push.channels) * g.push.chunks * 2}, at::kFloat, x.device());
  Launch p = launch(bn::OP_GRAD_SUMS, g, x, gn);
  p.spec(bn::SPEC_DTG, dt(dy)).arg(part, true).arg(x, false);
  stats(p, mean, s, var);
  params(p, w, at::Tensor(), x, false);
  p.arg(dy, false).arg(x, false);
  chunk_groups(p, g);
  if (!p.run()) return false;
  Launch m = launch(bn::OP_GRAD_MERGE, g, x, gn);
  m.arg(part, false).arg(part, false);
  stats(m, mean, s, var);
  params(m, dw, db, part, true);
  m.arg(part, false).arg(sums, true);
  return m.grid(g.push.channels, bn::LOCAL).run();
}

// GRAD_APPLY: dx (train: with the sums; else dy * invstd * w).
[[nodiscard]] bool grad_apply(const Geometry& g, const at::Tensor& dx, const at::Tensor& x,
                              const at::Tensor& dy, const at::Tensor& mean, const at::Tensor& s,
                              bool var, const at::Tensor& w, const at::Tensor& sums, bool train,
                              uint32_t gn = 0) {
  Launch l = launch(bn::OP_GRAD_APPLY, g, x, gn);
  l.spec(bn::SPEC_DTG, dt(dy)).spec(bn::SPEC_TRAIN, train ? 1 : 0);
  l.arg(dx, true).arg(x, false);
  stats(l, mean, s, var);
  params(l, w, at::Tensor(), x, false);
  l.arg(dy, false).arg(sums.defined() ? sums : x, false);
  return l.grid(uint64_t(g.push.channels) * g.push.count, bn::LOCAL).run();
}

// ---------------------------------------------------------------- arguments

// A per-channel tensor: undefined, or contiguous with n elements of a float dtype.
bool per_channel(const at::Tensor& t, int64_t n) {
  return !t.defined() || (is_float(t.scalar_type()) && t.numel() == n && t.is_contiguous());
}
at::Tensor value(const std::optional<at::Tensor>& t) {
  return t ? *t : at::Tensor();
}

// Whether a reduced-precision x meets a float32 parameter (its statistics then float32).
bool mixed(const at::Tensor& x, std::initializer_list<at::Tensor> ps) {
  if (x.scalar_type() == at::kFloat) return false;
  return std::any_of(ps.begin(), ps.end(), [](const at::Tensor& p) {
    return p.defined() && p.scalar_type() == at::kFloat;
  });
}

// A new tensor shaped and laid out as x (its memory format).
at::Tensor like(const at::Tensor& x) {
  return new_empty(x.sizes(), x.scalar_type(), x.device(), x.suggest_memory_format());
}

// Whether w / b, rm / rv suit x's channels (pairs of one dtype where both defined).
bool params_ok(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& rm,
               const at::Tensor& rv) {
  const int64_t c = x.size(1);
  if (!per_channel(w, c) || !per_channel(b, c) || !per_channel(rm, c) || !per_channel(rv, c)) {
    return false;
  }
  if (w.defined() && b.defined() && w.scalar_type() != b.scalar_type()) return false;
  if (rm.defined() != rv.defined()) return false;
  return !rm.defined() || rm.scalar_type() == rv.scalar_type();
}

// ---------------------------------------------------------------- batch norm

// native_batch_norm (input, weight?, bias?, running_mean?, running_var?, training, momentum,
// eps) -> (out, save_mean, save_invstd); eval returns empty statistics (as torch).
std::optional<Tensors3> batch_norm(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                   const std::optional<at::Tensor>& bias,
                                   const std::optional<at::Tensor>& running_mean,
                                   const std::optional<at::Tensor>& running_var, bool training,
                                   double momentum, double eps) {
  const at::Tensor w = value(weight), b = value(bias);
  const at::Tensor rm = value(running_mean), rv = value(running_var);
  if (!is_float(x.scalar_type()) || x.dim() < 2 || !params_ok(x, w, b, rm, rv)) return std::nullopt;
  if (!training && !rm.defined()) return std::nullopt;  // torch's error, from the fallback
  const at::Tensor out = like(x);
  std::optional<Geometry> g = geometry({x, x, out}, 1);
  if (!g) return std::nullopt;
  g->push.eps = static_cast<float>(eps);
  g->push.momentum = static_cast<float>(momentum);
  const auto sdt = mixed(x, {w, b, rm, rv}) ? at::kFloat : x.scalar_type();
  if (!training) {
    if (!apply(*g, out, x, rm, rv, true, w, b)) return std::nullopt;
    return std::make_tuple(out, new_empty({0}, sdt, x.device()), new_empty({0}, sdt, x.device()));
  }
  const at::Tensor mean = new_empty({x.size(1)}, sdt, x.device());
  const at::Tensor invstd = new_empty({x.size(1)}, sdt, x.device());
  if (!channel_stats(*g, x, mean, invstd, rm, rv) ||
      !apply(*g, out, x, mean, invstd, false, w, b)) {
    return std::nullopt;
  }
  return std::make_tuple(out, mean, invstd);
}

std::optional<Tensors3> legit(const at::Tensor& x, const std::optional<at::Tensor>& w,
                              const std::optional<at::Tensor>& b, const at::Tensor& rm,
                              const at::Tensor& rv, bool training, double momentum, double eps) {
  return batch_norm(x, w, b, rm, rv, training, momentum, eps);
}

std::optional<Tensors3> legit_no_stats(const at::Tensor& x, const std::optional<at::Tensor>& w,
                                       const std::optional<at::Tensor>& b, bool training,
                                       double momentum, double eps) {
  return batch_norm(x, w, b, std::nullopt, std::nullopt, training, momentum, eps);
}

std::optional<Tensors3> legit_no_training(const at::Tensor& x, const std::optional<at::Tensor>& w,
                                          const std::optional<at::Tensor>& b, const at::Tensor& rm,
                                          const at::Tensor& rv, double momentum, double eps) {
  return batch_norm(x, w, b, rm, rv, false, momentum, eps);
}

// native_batch_norm_backward (grad_out, input, weight?, running_mean?, running_var?,
// save_mean?, save_invstd?, train, eps, output_mask) -> (dx, dweight, dbias).
std::optional<Tensors3> batch_norm_backward(const at::Tensor& dy, const at::Tensor& x,
                                            const std::optional<at::Tensor>& weight,
                                            const std::optional<at::Tensor>& running_mean,
                                            const std::optional<at::Tensor>& running_var,
                                            const std::optional<at::Tensor>& save_mean,
                                            const std::optional<at::Tensor>& save_invstd,
                                            bool train, double eps, std::array<bool, 3> mask) {
  const at::Tensor w = value(weight);
  const at::Tensor mean = value(train ? save_mean : running_mean);
  const at::Tensor s = value(train ? save_invstd : running_var);
  if (!is_float(x.scalar_type()) || !is_float(dy.scalar_type()) || x.dim() < 2 ||
      !dy.sizes().equals(x.sizes()) || !mean.defined() || !params_ok(x, w, at::Tensor(), mean, s) ||
      ((mask[1] || mask[2]) && !w.defined())) {
    return std::nullopt;
  }
  at::Tensor dx, dw, db, sums;
  if (mask[0]) dx = like(x);
  std::optional<Geometry> g = geometry({x, dy, mask[0] ? dx : x}, 1);
  if (!g) return std::nullopt;
  g->push.eps = static_cast<float>(eps);
  if (mask[1]) dw = new_empty({x.size(1)}, w.scalar_type(), w.device());
  if (mask[2]) db = new_empty({x.size(1)}, w.scalar_type(), w.device());
  if (train || mask[1] || mask[2]) {
    sums = new_empty({x.size(1), 2}, at::kFloat, x.device());
    if (!grad_sums(*g, sums, x, dy, mean, s, !train, w, dw, db)) return std::nullopt;
  }
  if (mask[0] && !grad_apply(*g, dx, x, dy, mean, s, !train, w, sums, train)) return std::nullopt;
  return std::make_tuple(dx, dw, db);
}

using Tensors4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The forms with a reserve (empty: no library keeps state between forward and backward).
std::optional<Tensors4> with_reserve(const std::optional<Tensors3>& r, const at::Tensor& x) {
  if (!r) return std::nullopt;
  const auto& [out, mean, invstd] = *r;
  return std::make_tuple(out, mean, invstd, new_empty({0}, at::kByte, x.device()));
}

std::optional<Tensors4> with_update(const at::Tensor& x, const std::optional<at::Tensor>& w,
                                    const std::optional<at::Tensor>& b, const at::Tensor& rm,
                                    const at::Tensor& rv, double momentum, double eps) {
  return with_reserve(batch_norm(x, w, b, rm, rv, true, momentum, eps), x);
}

std::optional<Tensors4> no_update(const at::Tensor& x, const std::optional<at::Tensor>& w,
                                  const std::optional<at::Tensor>& b,
                                  const std::optional<at::Tensor>& rm,
                                  const std::optional<at::Tensor>& rv, double momentum,
                                  double eps) {
  return with_reserve(batch_norm(x, w, b, rm, rv, false, momentum, eps), x);
}

// batch_norm_backward (grad_out, input, weight, running_mean?, running_var?, save_mean?,
// save_var?, update, eps, output_mask, reserve): native_batch_norm_backward with train = update.
std::optional<Tensors3> reserve_backward(const at::Tensor& dy, const at::Tensor& x,
                                         const at::Tensor& w, const std::optional<at::Tensor>& rm,
                                         const std::optional<at::Tensor>& rv,
                                         const std::optional<at::Tensor>& sm,
                                         const std::optional<at::Tensor>& sv, bool update,
                                         double eps, std::array<bool, 3> mask,
                                         const at::Tensor& /*reserve*/) {
  return batch_norm_backward(dy, x, w, rm, rv, sm, sv, update, eps, mask);
}

// ---------------------------------------------------------------- group norm

// The (sample, group) rows of a contiguous [N, C, HW] x: N * G channels of D * HW elements.
std::optional<Geometry> group_rows(const at::Tensor& x, int64_t n, int64_t c, int64_t hw,
                                   int64_t group, double eps) {
  if (!is_float(x.scalar_type()) || !x.is_contiguous() || group <= 0 || c % group != 0 ||
      x.numel() != n * c * hw || x.numel() == 0) {
    return std::nullopt;
  }
  const at::Tensor rows = x.view({n * group, c / group * hw});
  std::optional<Geometry> g = geometry({rows, rows, rows}, 0);
  if (!g) return std::nullopt;
  g->push.eps = static_cast<float>(eps);
  g->push.groups = static_cast<uint32_t>(group);
  g->push.group_channels = static_cast<uint32_t>(c / group);
  g->push.hw = static_cast<uint32_t>(hw);
  return g;
}

// native_group_norm (input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean, rstd).
std::optional<Tensors3> group_norm(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                   const std::optional<at::Tensor>& bias, int64_t n, int64_t c,
                                   int64_t hw, int64_t group, double eps) {
  const at::Tensor w = value(weight), b = value(bias);
  std::optional<Geometry> g = group_rows(x, n, c, hw, group, eps);
  if (!g || !per_channel(w, c) || !per_channel(b, c) ||
      (w.defined() && b.defined() && w.scalar_type() != b.scalar_type())) {
    return std::nullopt;
  }
  const auto sdt = mixed(x, {w, b}) ? at::kFloat : x.scalar_type();
  const at::Tensor out = new_empty(x.sizes(), x.scalar_type(), x.device());
  const at::Tensor mean = new_empty({n, group}, sdt, x.device());
  const at::Tensor rstd = new_empty({n, group}, mean.scalar_type(), mean.device());
  if (!channel_stats(*g, x, mean, rstd, at::Tensor(), at::Tensor(), bn::GN_ROWS) ||
      !apply(*g, out, x, mean, rstd, false, w, b, bn::GN_ROWS)) {
    return std::nullopt;
  }
  return std::make_tuple(out, mean, rstd);
}

// Group norm's channels c of a contiguous [N, C, HW] x, reduced over (hw, n).
std::optional<Geometry> group_cols(const at::Tensor& x, const Geometry& rows, int64_t n, int64_t c,
                                   int64_t hw) {
  const at::Tensor cols = x.view({n, c, hw});
  std::optional<Geometry> g = geometry({cols, cols, cols}, 1);
  if (!g) return std::nullopt;
  g->push.groups = rows.push.groups;
  g->push.group_channels = rows.push.group_channels;
  g->push.hw = rows.push.hw;
  if (n == 1 || hw == 1) g->push.hw = n == 1 ? UINT32_MAX : 1;  // n = i / hw (size-1 dims dropped)
  return g;
}

// native_group_norm_backward (grad_out, input, mean, rstd, weight?, N, C, HxW, group,
// output_mask) -> (dx, dweight, dbias).
std::optional<Tensors3> group_norm_backward(const at::Tensor& dy, const at::Tensor& x,
                                            const at::Tensor& mean, const at::Tensor& rstd,
                                            const std::optional<at::Tensor>& weight, int64_t n,
                                            int64_t c, int64_t hw, int64_t group,
                                            std::array<bool, 3> mask) {
  const at::Tensor w = value(weight);
  std::optional<Geometry> g = group_rows(x, n, c, hw, group, 0.0);
  if (!g || !is_float(dy.scalar_type()) || !dy.is_contiguous() || !dy.sizes().equals(x.sizes()) ||
      !per_channel(w, c) || !per_channel(mean, n * group) || !per_channel(rstd, n * group) ||
      !mean.defined() || !rstd.defined() || ((mask[1] || mask[2]) && !w.defined())) {
    return std::nullopt;
  }
  at::Tensor dx, dw, db;
  if (mask[0]) {
    dx = new_empty(x.sizes(), x.scalar_type(), x.device());
    const at::Tensor sums = new_empty({n * group, 2}, at::kFloat, x.device());
    if (!grad_sums(*g, sums, x, dy, mean, rstd, false, w, at::Tensor(), at::Tensor(),
                   bn::GN_ROWS) ||
        !grad_apply(*g, dx, x, dy, mean, rstd, false, w, sums, true, bn::GN_ROWS)) {
      return std::nullopt;
    }
  }
  if (mask[1] || mask[2]) {
    const std::optional<Geometry> gc = group_cols(x, *g, n, c, hw);
    if (!gc) return std::nullopt;
    if (mask[1]) dw = new_empty({c}, w.scalar_type(), w.device());
    if (mask[2]) db = new_empty({c}, w.scalar_type(), w.device());
    const at::Tensor sums = new_empty({c, 2}, at::kFloat, x.device());
    if (!grad_sums(*gc, sums, x, dy, mean, rstd, false, at::Tensor(), dw, db, bn::GN_COLS)) {
      return std::nullopt;
    }
  }
  return std::make_tuple(dx, dw, db);
}

// aten::batch_norm, registered above autograd (AutogradPrivateUse1) and below it (PrivateUse1,
// for inference mode). torch's composition of it (at::native::batch_norm: its checks, the choice
// of a backend, _batch_norm_impl_index, native_batch_norm through autograd) cost the host more
// than the kernels' own enqueueing. Where the entry may call the kernels itself (direct_call:
// autograd has nothing to do, no Python dispatch) and the operands are what the kernels take
// (which torch's checks pass: one value per channel, running statistics in eval), the kernels run
// directly (the running statistics updated in place, their versions left as torch's CPU kernels
// leave them). Everything else (a gradient wanted, an empty input, what the kernels decline, a
// dispatch mode, fake tensors) is torch's composition, raising torch's errors.
at::Tensor batch_norm_entry(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias,
                            const std::optional<at::Tensor>& running_mean,
                            const std::optional<at::Tensor>& running_var, bool training,
                            double momentum, double eps, bool cudnn_enabled) {
  const at::Tensor w = value(weight), b = value(bias);
  const at::Tensor rm = value(running_mean), rv = value(running_var);
  if (is_mpsrt(input) && input.numel() > 0 && enabled(input.device().index()) &&
      direct_call({&input, &w, &b, &rm, &rv})) {
    if (std::optional<Tensors3> r =
            batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)) {
      return std::get<0>(*r);
    }
  }
  return at::native::batch_norm(input, weight, bias, running_mean, running_var, training, momentum,
                                eps, cudnn_enabled);
}

namespace A = at::_ops;

void register_entry(torch::Library& m) {
  reg<A::batch_norm, &batch_norm_entry>(m);
}

void register_ops(torch::Library& m) {
  reg<A::native_batch_norm, &batch_norm, HostPath::kTyped>(m);
  reg<A::_native_batch_norm_legit, &legit>(m);
  reg<A::_native_batch_norm_legit_no_stats, &legit_no_stats>(m);
  reg<A::_native_batch_norm_legit_no_training, &legit_no_training>(m);
  reg<A::native_batch_norm_backward, &batch_norm_backward>(m);
  reg<A::_batch_norm_with_update, &with_update>(m);
  reg<A::_batch_norm_no_update, &no_update>(m);
  reg<A::batch_norm_backward, &reserve_backward>(m);
  reg<A::native_group_norm, &group_norm, HostPath::kTyped>(m);
  reg<A::native_group_norm_backward, &group_norm_backward>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::batch_norm

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::batch_norm::register_ops(m);
  mpsrt::torch_glue::ops::batch_norm::register_entry(m);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  mpsrt::torch_glue::ops::batch_norm::register_entry(m);
}
