// Pooling and resampling on mpsrt's pool kernels (csrc/kernels/pool/), forward and backward:
//   pool.comp: max_pool2d/3d_with_indices (max_pool1d goes through 2-d), avg_pool2d/3d
//   (avg_pool1d through 2-d), _adaptive_avg_pool2d/3d (adaptive_avg_pool1d through 2-d),
//   adaptive_max_pool2d/3d (adaptive_max_pool1d through 2-d) and their backward ops;
//   upsample.comp: upsample_nearest1d/2d/3d, _upsample_nearest_exact1d/2d/3d,
//   upsample_linear1d, upsample_bilinear2d, upsample_trilinear3d, upsample_bicubic2d and their
//   backward ops (F.interpolate's .vec overloads are composites over these).
// Every operand is seen as [N, C, D, H, W] with its own strides (contiguous and channels-last
// alike); outputs take the input's suggested memory format. Float32, float16 and bfloat16
// (float32 math). What a kernel does not take declines to the fallback (torch's CPU kernel,
// which also raises torch's errors for bad arguments): other dtypes, empty tensors, sizes,
// strides or offsets beyond 32 bits, windows longer than kMaxLoop per invocation.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_adaptive_avg_pool2d_backward_ops.h>
#include <ATen/ops/_adaptive_avg_pool2d_ops.h>
#include <ATen/ops/_adaptive_avg_pool3d_backward_ops.h>
#include <ATen/ops/_adaptive_avg_pool3d_ops.h>
#include <ATen/ops/_upsample_nearest_exact1d_backward_ops.h>
#include <ATen/ops/_upsample_nearest_exact1d_ops.h>
#include <ATen/ops/_upsample_nearest_exact2d_backward_ops.h>
#include <ATen/ops/_upsample_nearest_exact2d_ops.h>
#include <ATen/ops/_upsample_nearest_exact3d_backward_ops.h>
#include <ATen/ops/_upsample_nearest_exact3d_ops.h>
#include <ATen/ops/adaptive_max_pool2d_backward_ops.h>
#include <ATen/ops/adaptive_max_pool2d_ops.h>
#include <ATen/ops/adaptive_max_pool3d_backward_ops.h>
#include <ATen/ops/adaptive_max_pool3d_ops.h>
#include <ATen/ops/avg_pool2d_backward_ops.h>
#include <ATen/ops/avg_pool2d_ops.h>
#include <ATen/ops/avg_pool3d_backward_ops.h>
#include <ATen/ops/avg_pool3d_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/max_pool2d_with_indices_backward_ops.h>
#include <ATen/ops/max_pool2d_with_indices_ops.h>
#include <ATen/ops/max_pool3d_with_indices_backward_ops.h>
#include <ATen/ops/max_pool3d_with_indices_ops.h>
#include <ATen/ops/upsample_bicubic2d_backward_ops.h>
#include <ATen/ops/upsample_bicubic2d_ops.h>
#include <ATen/ops/upsample_bilinear2d_backward_ops.h>
#include <ATen/ops/upsample_bilinear2d_ops.h>
#include <ATen/ops/upsample_linear1d_backward_ops.h>
#include <ATen/ops/upsample_linear1d_ops.h>
#include <ATen/ops/upsample_nearest1d_backward_ops.h>
#include <ATen/ops/upsample_nearest1d_ops.h>
#include <ATen/ops/upsample_nearest2d_backward_ops.h>
#include <ATen/ops/upsample_nearest2d_ops.h>
#include <ATen/ops/upsample_nearest3d_backward_ops.h>
#include <ATen/ops/upsample_nearest3d_ops.h>
#include <ATen/ops/upsample_trilinear3d_backward_ops.h>
#include <ATen/ops/upsample_trilinear3d_ops.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <tuple>

#include "ops/common.h"
#include "pool/pool.h"
#include "pool/upsample.h"

namespace mpsrt::torch_glue::ops::pool {
namespace {

namespace pk = ::mpsrt::kernels::pool;
namespace uk = ::mpsrt::kernels::upsample;

// The most loop iterations one invocation's window (or reaching outputs) may take: llvmpipe
// ends an invocation after 65535 in all, and the nested loops add up to a few times this.
constexpr int64_t kMaxLoop = 8192;

using Dims = std::array<int64_t, 3>;  // (D, H, W)
using Tensors = std::tuple<at::Tensor, at::Tensor>;

// A tensor seen as [N, C, D, H, W]: its k spatial dims last, N 1 where it has none.
struct Shape5 {
  std::array<int64_t, 5> size{1, 1, 1, 1, 1};
  std::array<int64_t, 5> stride{0, 0, 0, 0, 0};
  Dims spatial() const { return {size[2], size[3], size[4]}; }
};

// t as a Shape5 with k spatial dims (t has k + 2 dims, or k + 1 where `unbatched`); nothing
// where its rank differs, it is empty, not a kernel float dtype, or a size, stride or its span
// does not fit 32 bits.
std::optional<Shape5> shape5(const at::Tensor& t, int64_t k, bool unbatched) {
  const int64_t d = t.dim();
  if ((d != k + 2 && !(unbatched && d == k + 1)) || t.numel() == 0) return std::nullopt;
  if (!is_float(t.scalar_type())) return std::nullopt;
  Shape5 s;
  const int64_t lead = d - k;
  for (int64_t i = 0; i < lead; ++i) {
    s.size[2 - lead + i] = t.size(i);
    s.stride[2 - lead + i] = t.stride(i);
  }
  for (int64_t i = 0; i < k; ++i) {
    s.size[5 - k + i] = t.size(lead + i);
    s.stride[5 - k + i] = t.stride(lead + i);
  }
  int64_t span = 0;
  for (int i = 0; i < 5; ++i) {
    if (s.stride[i] < 0 || !fits<int32_t>(s.size[i], s.stride[i])) return std::nullopt;
    span += (s.size[i] - 1) * s.stride[i];
  }
  if (!fits<uint32_t>(t.numel(), span + 1)) return std::nullopt;
  return s;
}

// t's sizes with its last k replaced by `spatial`'s last k.
std::vector<int64_t> with_spatial(const at::Tensor& t, int64_t k, const Dims& spatial) {
  std::vector<int64_t> sizes = t.sizes().vec();
  for (int64_t i = 0; i < k; ++i) sizes[sizes.size() - k + i] = spatial[3 - k + i];
  return sizes;
}

// A new tensor of `sizes` in `like`'s suggested memory format (channels-last stays so).
at::Tensor empty_like_format(const at::Tensor& like, at::IntArrayRef sizes, at::ScalarType t) {
  const at::MemoryFormat f = sizes.size() == static_cast<size_t>(like.dim())
                                 ? like.suggest_memory_format()
                                 : at::MemoryFormat::Contiguous;
  return at::empty(sizes, like.options().dtype(t).memory_format(f));
}

// The common push fields: channels, the written element count, sizes and strides.
template <class Push>
void fill_geometry(Push& p, const Shape5& src, const Shape5& dst, const Dims& in, const Dims& out) {
  p.c = static_cast<uint32_t>(dst.size[1]);
  int64_t total = 1;
  for (int i = 0; i < 5; ++i) {
    total *= dst.size[i];
    p.ss[i] = static_cast<uint32_t>(src.stride[i]);
    p.ds[i] = static_cast<uint32_t>(dst.stride[i]);
  }
  p.total = static_cast<uint32_t>(total);
  for (int j = 0; j < 3; ++j) {
    p.in_[j] = static_cast<uint32_t>(in[j]);
    p.out_[j] = static_cast<uint32_t>(out[j]);
  }
}

// ------------------------------------------------------------------ pooling geometry
// A pool's kernel, stride, padding and dilation per (D, H, W); 1-d and 2-d pools have kernel 1
// in the leading dims.
struct Window {
  Dims k{1, 1, 1}, s{1, 1, 1}, p{0, 0, 0}, d{1, 1, 1};
};

// The value for dim i (of k) of an argument given once for all dims or once per dim.
std::optional<int64_t> per_dim(at::IntArrayRef a, int64_t i, int64_t k) {
  if (a.size() == 1) return a[0];
  if (static_cast<int64_t>(a.size()) == k) return a[i];
  return std::nullopt;
}

// The window of a k-d pool from torch's arguments (stride empty: the kernel size); nothing
// where an argument is malformed or out of range (the fallback raises torch's error).
std::optional<Window> window(int64_t k, at::IntArrayRef kernel, at::IntArrayRef stride,
                             at::IntArrayRef padding, at::IntArrayRef dilation) {
  Window w;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t j = 3 - k + i;
    const auto ks = per_dim(kernel, i, k);
    const auto ss = stride.empty() ? ks : per_dim(stride, i, k);
    const auto ps = per_dim(padding, i, k);
    const auto ds = per_dim(dilation, i, k);
    if (!ks || !ss || !ps || !ds) return std::nullopt;
    w.k[j] = *ks;
    w.s[j] = *ss;
    w.p[j] = *ps;
    w.d[j] = *ds;
    if (w.k[j] <= 0 || w.s[j] <= 0 || w.d[j] <= 0 || w.p[j] < 0 || w.p[j] * 2 > w.k[j] ||
        !fits<uint16_t>(w.k[j], w.s[j], w.p[j], w.d[j])) {
      return std::nullopt;
    }
  }
  return w;
}

// torch's pooled size of one dim (floor or ceil mode); 0 or less where it has none.
int64_t pooled(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
  const int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  if (num < 0) return 0;
  int64_t out = num / s + 1;
  if (ceil && (out - 1) * s >= in + p) --out;
  return out;
}

std::optional<Dims> pooled_sizes(const Dims& in, const Window& w, bool ceil) {
  Dims out;
  for (int j = 0; j < 3; ++j) {
    out[j] = pooled(in[j], w.k[j], w.s[j], w.p[j], w.d[j], ceil);
    if (out[j] <= 0) return std::nullopt;
  }
  return out;
}

// The outputs of one dim a window pool's input position can reach, at most.
int64_t reach(const Window& w, int j) {
  return (w.k[j] - 1) * w.d[j] / w.s[j] + 1;
}

// An adaptive pool's longest window over n inputs into m outputs, at most.
int64_t adaptive_reach(int64_t n, int64_t m) {
  return (n + m - 1) / m + 1;
}

bool loop_ok(int64_t a, int64_t b, int64_t c) {
  return a <= kMaxLoop && b <= kMaxLoop && c <= kMaxLoop && a * b * c <= kMaxLoop;
}

// What one pool launch computes.
struct PoolLaunch {
  uint32_t op = pk::OP_MAX;
  Window w;
  bool count_pad = true;
  int64_t divisor = 0;
};

// Launches pool.comp writing dst (and indices) from src; false (nothing launched) where an
// argument is not bindable.
[[nodiscard]] bool launch_pool(const PoolLaunch& k, const at::Tensor& dst, const Shape5& d5,
                               const at::Tensor& idx, const at::Tensor& src, const Shape5& s5,
                               const Dims& in, const Dims& out) {
  pk::Push p{};
  fill_geometry(p, s5, d5, in, out);
  for (int j = 0; j < 3; ++j) {
    p.ks[j] = static_cast<uint32_t>(k.w.k[j] | (k.w.s[j] << 16));
    p.pd[j] = static_cast<uint32_t>(k.w.p[j] | (k.w.d[j] << 16));
  }
  Launch l("pool", dst.device().index());
  l.spec(pk::SPEC_OP, k.op).spec(pk::SPEC_DT, dt(dst));
  l.spec(pk::SPEC_COUNT_PAD, k.count_pad ? 1 : 0);
  l.spec(pk::SPEC_DIVISOR, static_cast<uint32_t>(k.divisor));
  l.arg(dst, true).arg(idx.defined() ? idx : src, idx.defined() && k.op < pk::OP_MAX_BACKWARD);
  l.arg(src, false).push(p).grid(p.total, 256);
  return l.run();
}

// Whether self is a float tensor of k spatial dims a pool takes, with flat indices in 31 bits.
std::optional<Shape5> pool_input(const at::Tensor& self, int64_t k) {
  if (!is_float(self.scalar_type())) return std::nullopt;
  std::optional<Shape5> s = shape5(self, k, true);
  if (!s) return std::nullopt;
  const Dims in = s->spatial();
  if (!fits<int32_t>(in[0] * in[1] * in[2])) return std::nullopt;
  return s;
}

// A pool's forward: the output (and indices for the max ops) of sizes `out`.
std::optional<Tensors> pool_forward(const PoolLaunch& k, const at::Tensor& self, int64_t nd,
                                    const Dims& out) {
  const std::optional<Shape5> s5 = pool_input(self, nd);
  if (!s5) return std::nullopt;
  const std::vector<int64_t> sizes = with_spatial(self, nd, out);
  at::Tensor o = empty_like_format(self, sizes, self.scalar_type());
  const bool max = k.op == pk::OP_MAX || k.op == pk::OP_ADAPTIVE_MAX;
  at::Tensor idx = max ? empty_like_format(self, sizes, at::kLong) : at::Tensor();
  const std::optional<Shape5> o5 = shape5(o, nd, true);
  if (!o5 || (max && o.strides() != idx.strides())) return std::nullopt;
  if (!launch_pool(k, o, *o5, idx, self, *s5, s5->spatial(), out)) return std::nullopt;
  return Tensors(o, idx);
}

// grad_output (and indices) with one layout; nothing where its shape is not `out`'s.
std::optional<at::Tensor> grad_like(const at::Tensor& grad, const at::Tensor& self,
                                    const at::Tensor& indices, int64_t nd, const Dims& out) {
  if (grad.scalar_type() != self.scalar_type() || grad.dim() != self.dim()) return std::nullopt;
  if (grad.sizes() != at::IntArrayRef(with_spatial(self, nd, out))) return std::nullopt;
  if (!indices.defined()) return grad;
  if (indices.sizes() != grad.sizes() || indices.scalar_type() != at::kLong) return std::nullopt;
  if (grad.strides() == indices.strides()) return grad;
  at::Tensor g = at::empty_like(indices, grad.options());
  g.copy_(grad);
  return g;
}

// A pool's backward: grad_input from grad_output (and indices) whose pooled sizes are `out`.
std::optional<at::Tensor> pool_backward(const PoolLaunch& k, const at::Tensor& grad,
                                        const at::Tensor& self, const at::Tensor& indices,
                                        int64_t nd, const Dims& out) {
  const std::optional<Shape5> in5 = pool_input(self, nd);
  const std::optional<at::Tensor> g = grad_like(grad, self, indices, nd, out);
  if (!in5 || !g) return std::nullopt;
  const std::optional<Shape5> g5 = shape5(*g, nd, true);
  at::Tensor gi = empty_like_format(self, self.sizes(), self.scalar_type());
  const std::optional<Shape5> gi5 = shape5(gi, nd, true);
  if (!g5 || !gi5) return std::nullopt;
  if (!launch_pool(k, gi, *gi5, indices, *g, *g5, in5->spatial(), out)) return std::nullopt;
  return gi;
}

// ------------------------------------------------------------------ pooling ops
// The spatial sizes of a pool's input (nothing where pool_input declines).
std::optional<Dims> input_sizes(const at::Tensor& self, int64_t nd) {
  const std::optional<Shape5> s = pool_input(self, nd);
  if (!s) return std::nullopt;
  return s->spatial();
}

template <int64_t ND>
std::optional<Tensors> max_pool(const at::Tensor& self, at::IntArrayRef kernel,
                                at::IntArrayRef stride, at::IntArrayRef padding,
                                at::IntArrayRef dilation, bool ceil_mode) {
  const std::optional<Window> w = window(ND, kernel, stride, padding, dilation);
  const std::optional<Dims> in = input_sizes(self, ND);
  if (!w || !in || !loop_ok(w->k[0], w->k[1], w->k[2])) return std::nullopt;
  const std::optional<Dims> out = pooled_sizes(*in, *w, ceil_mode);
  if (!out) return std::nullopt;
  return pool_forward({pk::OP_MAX, *w}, self, ND, *out);
}

template <int64_t ND>
std::optional<at::Tensor> max_pool_backward(const at::Tensor& grad, const at::Tensor& self,
                                            at::IntArrayRef kernel, at::IntArrayRef stride,
                                            at::IntArrayRef padding, at::IntArrayRef dilation,
                                            bool ceil_mode, const at::Tensor& indices) {
  const std::optional<Window> w = window(ND, kernel, stride, padding, dilation);
  const std::optional<Dims> in = input_sizes(self, ND);
  if (!w || !in || !loop_ok(reach(*w, 0), reach(*w, 1), reach(*w, 2))) return std::nullopt;
  const std::optional<Dims> out = pooled_sizes(*in, *w, ceil_mode);
  if (!out || !indices.defined()) return std::nullopt;
  return pool_backward({pk::OP_MAX_BACKWARD, *w}, grad, self, indices, ND, *out);
}

// An average pool's launch (dilation 1), or nothing where its arguments are out of range.
std::optional<PoolLaunch> avg_launch(uint32_t op, int64_t nd, at::IntArrayRef kernel,
                                     at::IntArrayRef stride, at::IntArrayRef padding,
                                     bool count_include_pad, std::optional<int64_t> divisor) {
  const std::array<int64_t, 1> one{1};
  const std::optional<Window> w = window(nd, kernel, stride, padding, one);
  if (!w || (divisor && (*divisor <= 0 || !fits<int32_t>(*divisor)))) return std::nullopt;
  return PoolLaunch{op, *w, count_include_pad, divisor.value_or(0)};
}

template <int64_t ND>
std::optional<at::Tensor> avg_pool(const at::Tensor& self, at::IntArrayRef kernel,
                                   at::IntArrayRef stride, at::IntArrayRef padding, bool ceil_mode,
                                   bool count_include_pad, std::optional<int64_t> divisor) {
  const auto k = avg_launch(pk::OP_AVG, ND, kernel, stride, padding, count_include_pad, divisor);
  const std::optional<Dims> in = input_sizes(self, ND);
  if (!k || !in || !loop_ok(k->w.k[0], k->w.k[1], k->w.k[2])) return std::nullopt;
  const std::optional<Dims> out = pooled_sizes(*in, k->w, ceil_mode);
  if (!out) return std::nullopt;
  const std::optional<Tensors> r = pool_forward(*k, self, ND, *out);
  if (!r) return std::nullopt;
  return std::get<0>(*r);
}

template <int64_t ND>
std::optional<at::Tensor> avg_pool_backward(const at::Tensor& grad, const at::Tensor& self,
                                            at::IntArrayRef kernel, at::IntArrayRef stride,
                                            at::IntArrayRef padding, bool ceil_mode,
                                            bool count_include_pad,
                                            std::optional<int64_t> divisor) {
  const auto k =
      avg_launch(pk::OP_AVG_BACKWARD, ND, kernel, stride, padding, count_include_pad, divisor);
  const std::optional<Dims> in = input_sizes(self, ND);
  if (!k || !in || !loop_ok(reach(k->w, 0), reach(k->w, 1), reach(k->w, 2))) return std::nullopt;
  const std::optional<Dims> out = pooled_sizes(*in, k->w, ceil_mode);
  if (!out) return std::nullopt;
  return pool_backward(*k, grad, self, at::Tensor(), ND, *out);
}

// An adaptive pool's output sizes (torch's output_size, ND values), where its windows (or,
// `backward`, the outputs reaching an input) fit the loop limit and its index math 31 bits.
std::optional<Dims> adaptive_sizes(const Dims& in, at::IntArrayRef size, int64_t nd,
                                   bool backward) {
  if (static_cast<int64_t>(size.size()) != nd) return std::nullopt;
  Dims out{1, 1, 1}, r{1, 1, 1};
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t j = 3 - nd + i;
    out[j] = size[i];
    if (out[j] <= 0 || !fits<int32_t>((in[j] + 1) * (out[j] + 1))) return std::nullopt;
  }
  for (int j = 0; j < 3; ++j)
    r[j] = backward ? adaptive_reach(out[j], in[j]) : adaptive_reach(in[j], out[j]);
  if (!loop_ok(r[0], r[1], r[2])) return std::nullopt;
  return out;
}

// The pooled sizes of a backward's grad_output (its last nd sizes).
std::vector<int64_t> last_sizes(const at::Tensor& grad, int64_t nd) {
  const std::vector<int64_t> s = grad.sizes().vec();
  return std::vector<int64_t>(s.end() - std::min<int64_t>(nd, grad.dim()), s.end());
}

template <int64_t ND>
std::optional<at::Tensor> adaptive_avg(const at::Tensor& self, at::IntArrayRef output_size) {
  const std::optional<Dims> in = input_sizes(self, ND);
  if (!in) return std::nullopt;
  const std::optional<Dims> out = adaptive_sizes(*in, output_size, ND, false);
  if (!out) return std::nullopt;
  const std::optional<Tensors> r = pool_forward({pk::OP_ADAPTIVE_AVG}, self, ND, *out);
  if (!r) return std::nullopt;
  return std::get<0>(*r);
}

template <int64_t ND>
std::optional<at::Tensor> adaptive_avg_backward(const at::Tensor& grad, const at::Tensor& self) {
  const std::optional<Dims> in = input_sizes(self, ND);
  if (!in || grad.dim() != self.dim()) return std::nullopt;
  const std::optional<Dims> out = adaptive_sizes(*in, last_sizes(grad, ND), ND, true);
  if (!out) return std::nullopt;
  return pool_backward({pk::OP_ADAPTIVE_AVG_BACKWARD}, grad, self, at::Tensor(), ND, *out);
}

template <int64_t ND>
std::optional<Tensors> adaptive_max(const at::Tensor& self, at::IntArrayRef output_size) {
  const std::optional<Dims> in = input_sizes(self, ND);
  if (!in) return std::nullopt;
  const std::optional<Dims> out = adaptive_sizes(*in, output_size, ND, false);
  if (!out) return std::nullopt;
  return pool_forward({pk::OP_ADAPTIVE_MAX}, self, ND, *out);
}

template <int64_t ND>
std::optional<at::Tensor> adaptive_max_backward(const at::Tensor& grad, const at::Tensor& self,
                                                const at::Tensor& indices) {
  const std::optional<Dims> in = input_sizes(self, ND);
  if (!in || grad.dim() != self.dim()) return std::nullopt;
  const std::optional<Dims> out = adaptive_sizes(*in, last_sizes(grad, ND), ND, true);
  if (!out) return std::nullopt;
  return pool_backward({pk::OP_ADAPTIVE_MAX_BACKWARD}, grad, self, indices, ND, *out);
}

// ------------------------------------------------------------------ resampling
using Scales = std::array<std::optional<double>, 3>;  // torch's scales per (D, H, W)

struct Resample {
  uint32_t mode = uk::MODE_NEAREST;
  bool align = false;
};

// The scale dim j's kernel steps by, as torch's CPU kernels compute it (float math).
float scale_of(const Resample& r, int64_t in, int64_t out, std::optional<double> s) {
  if (r.mode == uk::MODE_NEAREST && out == in) return 1.0f;
  if (r.mode == uk::MODE_NEAREST && out == 2 * in) return 0.5f;
  if (r.align && (r.mode == uk::MODE_LINEAR || r.mode == uk::MODE_CUBIC)) {
    return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  }
  if (s && *s > 0.) return static_cast<float>(1.0 / *s);
  return static_cast<float>(in) / static_cast<float>(out);
}

// The outputs of one dim that can reach an input position backward, at most.
int64_t resample_reach(const Resample& r, int64_t in, int64_t out) {
  const int64_t taps = r.mode == uk::MODE_CUBIC ? 4 : (r.mode == uk::MODE_LINEAR ? 2 : 1);
  return ((out + in - 1) / in + 1) * (taps + 1);
}

[[nodiscard]] bool launch_resample(const Resample& r, bool backward, const at::Tensor& dst,
                                   const Shape5& d5, const at::Tensor& src, const Shape5& s5,
                                   const Dims& in, const Dims& out, const Scales& sc) {
  uk::Push p{};
  fill_geometry(p, s5, d5, in, out);
  for (int j = 0; j < 3; ++j) p.scale[j] = scale_of(r, in[j], out[j], sc[j]);
  Launch l("upsample", dst.device().index());
  l.spec(uk::SPEC_MODE, r.mode).spec(uk::SPEC_DT, dt(dst)).spec(uk::SPEC_ALIGN, r.align ? 1 : 0);
  l.spec(uk::SPEC_BACKWARD, backward ? 1 : 0);
  l.arg(dst, true).arg(src, false).push(p).grid(p.total, 256);
  return l.run();
}

// torch's output_size (nd values) as (D, H, W); nothing where malformed.
std::optional<Dims> resampled_sizes(at::IntArrayRef size, int64_t nd) {
  if (static_cast<int64_t>(size.size()) != nd) return std::nullopt;
  Dims out{1, 1, 1};
  for (int64_t i = 0; i < nd; ++i) {
    out[3 - nd + i] = size[i];
    if (size[i] <= 0 || !fits<int32_t>(size[i])) return std::nullopt;
  }
  return out;
}

std::optional<at::Tensor> resample(const Resample& r, const at::Tensor& self,
                                   at::IntArrayRef output_size, int64_t nd, const Scales& sc) {
  const std::optional<Shape5> s5 = shape5(self, nd, false);
  const std::optional<Dims> out = resampled_sizes(output_size, nd);
  if (!is_float(self.scalar_type()) || !s5 || !out) return std::nullopt;
  at::Tensor o = empty_like_format(self, with_spatial(self, nd, *out), self.scalar_type());
  const std::optional<Shape5> o5 = shape5(o, nd, false);
  if (!o5 || !launch_resample(r, false, o, *o5, self, *s5, s5->spatial(), *out, sc)) {
    return std::nullopt;
  }
  return o;
}

std::optional<at::Tensor> resample_backward(const Resample& r, const at::Tensor& grad,
                                            at::IntArrayRef output_size, at::IntArrayRef input_size,
                                            int64_t nd, const Scales& sc) {
  const std::optional<Shape5> g5 = shape5(grad, nd, false);
  const std::optional<Dims> out = resampled_sizes(output_size, nd);
  if (!is_float(grad.scalar_type()) || !g5 || !out || g5->spatial() != *out) return std::nullopt;
  if (static_cast<int64_t>(input_size.size()) != nd + 2 || input_size[0] != grad.size(0) ||
      input_size[1] != grad.size(1) ||
      std::any_of(input_size.begin(), input_size.end(), [](int64_t v) { return v <= 0; })) {
    return std::nullopt;
  }
  at::Tensor gi = empty_like_format(grad, input_size, grad.scalar_type());
  const std::optional<Shape5> gi5 = shape5(gi, nd, false);
  if (!gi5) return std::nullopt;
  const Dims in = gi5->spatial();
  Dims reach{1, 1, 1};
  for (int j = 0; j < 3; ++j) reach[j] = resample_reach(r, in[j], (*out)[j]);
  if (!loop_ok(reach[0], reach[1], reach[2])) return std::nullopt;
  if (!launch_resample(r, true, gi, *gi5, grad, *g5, in, *out, sc)) return std::nullopt;
  return gi;
}

// torch's scales (one per spatial dim, innermost last) as (D, H, W).
template <class... S>
Scales scales_of(S... s) {
  const std::array<std::optional<double>, sizeof...(S)> a{s...};
  Scales r;
  for (size_t i = 0; i < a.size(); ++i) r[3 - a.size() + i] = a[i];
  return r;
}

// The ops' forms: nearest (self, output_size, scales...), interpolating (self, output_size,
// align_corners, scales...) and their backward ops (grad_output, output_size, input_size, ...).
template <int64_t ND, uint32_t MODE>
struct Nearest {
  template <class... S>
  static std::optional<at::Tensor> run(const at::Tensor& self, at::IntArrayRef size, S... s) {
    return resample({MODE, false}, self, size, ND, scales_of(s...));
  }
};

template <int64_t ND, uint32_t MODE>
struct NearestBackward {
  template <class... S>
  static std::optional<at::Tensor> run(const at::Tensor& grad, at::IntArrayRef out,
                                       at::IntArrayRef in, S... s) {
    return resample_backward({MODE, false}, grad, out, in, ND, scales_of(s...));
  }
};

template <int64_t ND, uint32_t MODE>
struct Interpolate {
  template <class... S>
  static std::optional<at::Tensor> run(const at::Tensor& self, at::IntArrayRef size, bool align,
                                       S... s) {
    return resample({MODE, align}, self, size, ND, scales_of(s...));
  }
};

template <int64_t ND, uint32_t MODE>
struct InterpolateBackward {
  template <class... S>
  static std::optional<at::Tensor> run(const at::Tensor& grad, at::IntArrayRef out,
                                       at::IntArrayRef in, bool align, S... s) {
    return resample_backward({MODE, align}, grad, out, in, ND, scales_of(s...));
  }
};

void register_pools(torch::Library& m) {
  namespace A = at::_ops;
  reg<A::max_pool2d_with_indices, &max_pool<2>, HostPath::kTyped>(m);
  reg<A::max_pool3d_with_indices, &max_pool<3>>(m);
  reg<A::max_pool2d_with_indices_backward, &max_pool_backward<2>, HostPath::kTyped>(m);
  reg<A::max_pool3d_with_indices_backward, &max_pool_backward<3>>(m);
  reg<A::avg_pool2d, &avg_pool<2>, HostPath::kTyped>(m);
  reg<A::avg_pool3d, &avg_pool<3>>(m);
  reg<A::avg_pool2d_backward, &avg_pool_backward<2>>(m);
  reg<A::avg_pool3d_backward, &avg_pool_backward<3>>(m);
  reg<A::_adaptive_avg_pool2d, &adaptive_avg<2>, HostPath::kTyped>(m);
  reg<A::_adaptive_avg_pool3d, &adaptive_avg<3>>(m);
  reg<A::_adaptive_avg_pool2d_backward, &adaptive_avg_backward<2>, HostPath::kTyped>(m);
  reg<A::_adaptive_avg_pool3d_backward, &adaptive_avg_backward<3>>(m);
  reg<A::adaptive_max_pool2d, &adaptive_max<2>>(m);
  reg<A::adaptive_max_pool3d, &adaptive_max<3>>(m);
  reg<A::adaptive_max_pool2d_backward, &adaptive_max_backward<2>>(m);
  reg<A::adaptive_max_pool3d_backward, &adaptive_max_backward<3>>(m);
}

void register_resampling(torch::Library& m) {
  namespace A = at::_ops;
  constexpr uint32_t kNear = uk::MODE_NEAREST, kExact = uk::MODE_NEAREST_EXACT;
  constexpr uint32_t kLinear = uk::MODE_LINEAR, kCubic = uk::MODE_CUBIC;
  reg<A::upsample_nearest1d, Nearest<1, kNear>>(m);
  reg<A::upsample_nearest2d, Nearest<2, kNear>, HostPath::kTyped>(m);
  reg<A::upsample_nearest3d, Nearest<3, kNear>>(m);
  reg<A::_upsample_nearest_exact1d, Nearest<1, kExact>>(m);
  reg<A::_upsample_nearest_exact2d, Nearest<2, kExact>>(m);
  reg<A::_upsample_nearest_exact3d, Nearest<3, kExact>>(m);
  reg<A::upsample_nearest1d_backward, NearestBackward<1, kNear>>(m);
  reg<A::upsample_nearest2d_backward, NearestBackward<2, kNear>>(m);
  reg<A::upsample_nearest3d_backward, NearestBackward<3, kNear>>(m);
  reg<A::_upsample_nearest_exact1d_backward, NearestBackward<1, kExact>>(m);
  reg<A::_upsample_nearest_exact2d_backward, NearestBackward<2, kExact>>(m);
  reg<A::_upsample_nearest_exact3d_backward, NearestBackward<3, kExact>>(m);
  reg<A::upsample_linear1d, Interpolate<1, kLinear>>(m);
  reg<A::upsample_bilinear2d, Interpolate<2, kLinear>, HostPath::kTyped>(m);
  reg<A::upsample_trilinear3d, Interpolate<3, kLinear>>(m);
  reg<A::upsample_bicubic2d, Interpolate<2, kCubic>>(m);
  reg<A::upsample_linear1d_backward, InterpolateBackward<1, kLinear>>(m);
  reg<A::upsample_bilinear2d_backward, InterpolateBackward<2, kLinear>>(m);
  reg<A::upsample_trilinear3d_backward, InterpolateBackward<3, kLinear>>(m);
  reg<A::upsample_bicubic2d_backward, InterpolateBackward<2, kCubic>>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::pool

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::pool::register_pools(m);
  mpsrt::torch_glue::ops::pool::register_resampling(m);
}
