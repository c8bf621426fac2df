// Convolutions on the mpsrt device. torch sends every convolution of an out-of-tree device
// (Conv1d/2d/3d, transposed, grouped, dilated) to convolution_overrideable and its gradient to
// convolution_backward_overrideable: the generic convolution ops under other names (the same
// arguments as aten::convolution, and as aten::convolution_backward less its bias_sizes).
//
// They run on the conv kernel (csrc/kernels/conv/: one implicit GEMM in three modes, conv.h;
// depthwise ones on conv_direct, one invocation per output) where the device runs kernels: a
// convolution in MODE_FORWARD; its input gradient, and a transposed convolution's forward, in
// MODE_GATHER; a transposed convolution's input gradient in MODE_FORWARD; every weight gradient in
// MODE_WEIGHT (split-K float32 partials, then summed by at::sum, the reduce family); the bias
// gradient is at::sum of the output gradient. Operands are read where they lie (any strides: a
// channels-last input is read in place). What the kernel does not take (other dtypes, mixed dtypes,
// kernel sizes / strides / dilations / paddings past 255, sizes past its 32-bit indexing, more than
// 65535 groups) runs as the generic op's CPU kernel: where the device runs no kernels and the
// operands are host-visible, called typed on their stand-ins (the host path below), else through
// the fallback (which stages discrete memory); counted as the fallback counts under the generic
// op's name. The CPU kernel raises torch's errors for bad arguments.
//
// The kernel also sits at aten::convolution and aten::convolution_backward themselves: torch's
// generic path to the overrideable ops (building and checking its ConvParams, choosing a backend)
// cost more host time than the kernel's own enqueueing; and at conv1d / conv2d / conv3d, above
// autograd, where autograd has nothing to do (conv_nd). There the kernel takes only what torch's
// checks would pass (its geometry declines the rest), and everything else goes down torch's own
// path (at::native's convolution ops), which raises torch's errors and ends in the overrideable ops
// above.
//
// Memory format: torch decides an out-of-tree device's convolution outputs are contiguous
// (_conv_determine_backend_memory_format for its Overrideable backend; torch.compile's fake
// tensors say so), while the CPU's kernels keep a channels-last input's format. The outputs
// here follow torch's rule (the kernel writes contiguous outputs; the fallback's results are
// made contiguous), so eager and compiled code see the same strides.
#include <ATen/core/Tensor.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/conv1d_native.h>
#include <ATen/ops/conv1d_ops.h>
#include <ATen/ops/conv2d_native.h>
#include <ATen/ops/conv2d_ops.h>
#include <ATen/ops/conv3d_native.h>
#include <ATen/ops/conv3d_ops.h>
#include <ATen/ops/convolution_backward_native.h>
#include <ATen/ops/convolution_backward_ops.h>
#include <ATen/ops/convolution_backward_overrideable_ops.h>
#include <ATen/ops/convolution_native.h>
#include <ATen/ops/convolution_ops.h>
#include <ATen/ops/convolution_overrideable_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <optional>
#include <tuple>
#include <vector>

#include "conv/conv.h"
#include "fallback/fallback.h"
#include "ops/common.h"
#include "ops/storage.h"

namespace mpsrt::torch_glue::ops::conv {
namespace {

using namespace mpsrt::kernels::conv;  // NOLINT: the kernel's interface

using Dims = std::array<int64_t, 3>;  // per spatial dim (d, h, w); 1-d and 2-d lead with 1s

// ------------------------------------------------------------------ the fallback
// A result made contiguous where the CPU kernel kept another format.
at::Tensor contiguous(const at::Tensor& t) {
  return t.defined() && !t.is_contiguous() ? t.contiguous() : t;
}

// The generic op a convolution runs as on the CPU (aten::convolution, aten::convolution_backward),
// found once, with its entry among the fallback's counts.
struct GenericOp {
  explicit GenericOp(const char* name)
      : handle(c10::Dispatcher::singleton().findSchemaOrThrow(name, "")),
        count(op_count_of(handle)) {}
  const c10::OperatorHandle handle;
  OpCount& count;
};
const GenericOp& forward_op() {
  static const GenericOp op("aten::convolution");
  return op;
}
const GenericOp& backward_op() {
  static const GenericOp op("aten::convolution_backward");
  return op;
}

at::Tensor forward_fallback(const at::Tensor& input, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                            c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                            c10::IntArrayRef output_padding, int64_t groups) {
  torch::jit::Stack s = c10::impl::boxArgs(input, weight, bias, stride, padding, dilation,
                                           transposed, output_padding, groups);
  cpu_fallback(forward_op().handle, &s);
  return contiguous(s.back().toTensor());
}

using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// ------------------------------------------------------------------ the host path
// Where the device runs no kernels and the operands are host-visible memory of one device: the
// CPU's generic op itself on the operands' stand-ins (host_access.h: kept_stand_in), called
// typed (no boxing, none of torch's per-device convolution layers run twice), its results made
// contiguous while the CPU kernel's allocations are still device memory. nullopt where that does
// not hold (the fallback then stages or raises).
struct HostConv {
  c10::DeviceIndex device = -1;
  uint64_t generation = 0;
};

std::optional<HostConv> host_conv(std::initializer_list<const at::Tensor*> ts) {
  detail::Scan scan;
  for (const at::Tensor* t : ts) scan(*t);
  if (scan.device < 0 || !scan.host) return std::nullopt;
  const DeviceMode mode = device_mode(scan.device);
  if (mode.kernels) return std::nullopt;
  if (!mode.unified) {
    for (const at::Tensor* t : ts)
      if (!detail::visible(*t)) return std::nullopt;
  }
  return HostConv{scan.device, mode.generation};
}

std::optional<at::Tensor> forward_host(const at::Tensor& input, const at::Tensor& weight,
                                       const std::optional<at::Tensor>& bias,
                                       c10::IntArrayRef stride, c10::IntArrayRef padding,
                                       c10::IntArrayRef dilation, bool transposed,
                                       c10::IntArrayRef output_padding, int64_t groups) {
  const at::Tensor b = bias ? *bias : at::Tensor();
  const std::optional<HostConv> h = host_conv({&input, &weight, &b});
  if (!h) return std::nullopt;
  const auto x = detail::stand_in(input, h->generation);
  const auto w = detail::stand_in(weight, h->generation);
  const std::optional<at::Tensor> cb = detail::stand_in(bias, h->generation);
  HostRun run(h->device);
  at::Tensor r = at::_ops::convolution::redispatch(
      c10::DispatchKeySet(c10::DispatchKey::CPU), *x, *w, cb, c10::fromIntArrayRefSlow(stride),
      c10::fromIntArrayRefSlow(padding), c10::fromIntArrayRefSlow(dilation), transposed,
      c10::fromIntArrayRefSlow(output_padding), groups);
  r = contiguous(r);
  run.done(forward_op().handle, forward_op().count);
  return host_output(r, h->device);
}

std::optional<Grads> backward_host(const at::Tensor& grad_output, const at::Tensor& input,
                                   const at::Tensor& weight, at::OptionalIntArrayRef bias_sizes,
                                   c10::IntArrayRef stride, c10::IntArrayRef padding,
                                   c10::IntArrayRef dilation, bool transposed,
                                   c10::IntArrayRef output_padding, int64_t groups,
                                   std::array<bool, 3> output_mask) {
  const std::optional<HostConv> h = host_conv({&grad_output, &input, &weight});
  if (!h) return std::nullopt;
  const auto dy = detail::stand_in(grad_output, h->generation);
  const auto x = detail::stand_in(input, h->generation);
  const auto w = detail::stand_in(weight, h->generation);
  at::OptionalSymIntArrayRef sizes;
  if (bias_sizes) sizes = c10::fromIntArrayRefSlow(*bias_sizes);
  HostRun run(h->device);
  Grads r = at::_ops::convolution_backward::redispatch(
      c10::DispatchKeySet(c10::DispatchKey::CPU), *dy, *x, *w, sizes,
      c10::fromIntArrayRefSlow(stride), c10::fromIntArrayRefSlow(padding),
      c10::fromIntArrayRefSlow(dilation), transposed, c10::fromIntArrayRefSlow(output_padding),
      groups, output_mask);
  for (at::Tensor* t : {&std::get<0>(r), &std::get<1>(r), &std::get<2>(r)}) *t = contiguous(*t);
  run.done(backward_op().handle, backward_op().count);
  return Grads{host_output(std::get<0>(r), h->device), host_output(std::get<1>(r), h->device),
               host_output(std::get<2>(r), h->device)};
}

Grads backward_fallback(const at::Tensor& grad_output, const at::Tensor& input,
                        const at::Tensor& weight, c10::IntArrayRef bias_sizes,
                        c10::IntArrayRef stride, c10::IntArrayRef padding,
                        c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
                        int64_t groups, std::array<bool, 3> output_mask) {
  torch::jit::Stack s =
      c10::impl::boxArgs(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                         transposed, output_padding, groups, output_mask);
  cpu_fallback(backward_op().handle, &s);
  return {contiguous(s[0].toTensor()), contiguous(s[1].toTensor()), contiguous(s[2].toTensor())};
}

// ------------------------------------------------------------------ geometry
// An ordinary (not transposed) convolution Y = conv(X, W): a transposed convolution is the
// gradient of one whose X is its output and whose Y is its input, with the same weight
// [cy, cx / groups, k...].
struct Conv {
  int64_t batch = 0, groups = 1, cx = 0, cy = 0;  // X's and Y's channels
  Dims k{1, 1, 1}, s{1, 1, 1}, p{0, 0, 0}, d{1, 1, 1}, xs{1, 1, 1}, ys{1, 1, 1};
  int64_t kvol() const { return k[0] * k[1] * k[2]; }
};

// An argument list of the spatial dims (stride, padding, ...) as 3-d, leading dims `fill`;
// false where its length is not `dims` (1 expands to every dim, as torch's expand_param).
[[nodiscard]] bool dims_of(c10::IntArrayRef a, size_t dims, int64_t fill, Dims* out) {
  if (a.size() != dims && a.size() != 1) return false;
  *out = {fill, fill, fill};
  for (size_t i = 0; i < dims; ++i) (*out)[3 - dims + i] = a.size() == 1 ? a[0] : a[i];
  return true;
}

// A tensor's spatial sizes (dims 2..) as 3-d.
Dims spatial(const at::Tensor& t) {
  Dims r{1, 1, 1};
  for (int64_t i = 2; i < t.dim(); ++i) r[3 - (t.dim() - 2) + (i - 2)] = t.size(i);
  return r;
}

// A tensor's strides as 5-d (batch or dim 0, channel or dim 1, d, h, w; inserted dims 0).
std::array<int64_t, 5> strides5(const at::Tensor& t) {
  std::array<int64_t, 5> r{t.stride(0), t.stride(1), 0, 0, 0};
  for (int64_t i = 2; i < t.dim(); ++i) r[5 - (t.dim() - 2) + (i - 2)] = t.stride(i);
  return r;
}

// Whether every packed geometry value fits its byte (conv.h: geo) and the sizes are sane.
bool geometry_ok(const Conv& c) {
  for (int i = 0; i < 3; ++i) {
    if (c.k[i] < 1 || c.k[i] > 255 || c.s[i] < 1 || c.s[i] > 255) return false;
    if (c.d[i] < 1 || c.d[i] > 255 || c.p[i] < 0 || c.p[i] > 255) return false;
    if (c.xs[i] < 1 || c.ys[i] < 1) return false;
  }
  return c.groups >= 1 && c.groups <= 65535 && c.cx > 0 && c.cy > 0 && c.cx % c.groups == 0 &&
         c.cy % c.groups == 0;
}

// The geometry of convolution_overrideable's arguments (transposed: of the ordinary convolution
// whose gradient it is) into c; false where the kernel does not take it.
[[nodiscard]] bool geometry(const at::Tensor& input, const at::Tensor& weight,
                            c10::IntArrayRef stride, c10::IntArrayRef padding,
                            c10::IntArrayRef dilation, bool transposed,
                            c10::IntArrayRef output_padding, int64_t groups, Conv* c) {
  const int64_t nd = input.dim();
  if (nd < 3 || nd > 5 || weight.dim() != nd || groups < 1) return false;
  const size_t sd = static_cast<size_t>(nd - 2);
  Dims op{0, 0, 0};
  if (!dims_of(stride, sd, 1, &c->s) || !dims_of(padding, sd, 0, &c->p) ||
      !dims_of(dilation, sd, 1, &c->d)) {
    return false;
  }
  if (transposed && !dims_of(output_padding, sd, 0, &op)) return false;
  c->batch = input.size(0);
  c->groups = groups;
  c->k = spatial(weight);
  c->cy = weight.size(0);
  c->cx = weight.size(1) * groups;
  if (input.size(1) != (transposed ? c->cy : c->cx)) return false;
  const Dims in = spatial(input);
  for (int i = 0; i < 3; ++i) {
    const int64_t span = c->d[i] * (c->k[i] - 1) + 1;
    // torch's check of a transposed convolution's output padding (also one of the direct
    // entries' checks: they take what torch's checks pass).
    if (transposed && (op[i] < 0 || (op[i] >= c->s[i] && op[i] >= c->d[i]))) return false;
    if (transposed) {
      c->ys[i] = in[i];
      c->xs[i] = (in[i] - 1) * c->s[i] - 2 * c->p[i] + span + op[i];
    } else {
      c->xs[i] = in[i];
      c->ys[i] = (in[i] + 2 * c->p[i] - span) / c->s[i] + 1;
      if (in[i] + 2 * c->p[i] < span) return false;
    }
  }
  return geometry_ok(*c);
}

// A result's shape: batch, channels, the spatial dims of a `dims`-d convolution.
std::vector<int64_t> shape_of(const Conv& c, int64_t channels, const Dims& sp, int64_t dims) {
  std::vector<int64_t> r{c.batch, channels};
  for (int64_t i = 3 - (dims - 2); i < 3; ++i) r.push_back(sp[i]);
  return r;
}

// ------------------------------------------------------------------ the kernel
// conv.comp's tilings (specialisation constants as gemm's): BM x BN output tiles per workgroup of
// (BM / TM) * (BN / TN) invocations, K in chunks of BK. The shape follows the GEMM's M (output
// channels per group), after the rule of picking the tile by the matrix's rows: few rows
// (depthwise and narrow groups) take short wide tiles rather than idle most of a 64-row one.
struct Tiles {
  uint32_t bm, bn, bk, tm, tn;
  uint32_t invocations() const { return (bm / tm) * (bn / tn); }
};

Tiles tiles_for(int64_t m) {
  if (m <= 16) return {16, 128, 16, 1, 8};
  if (m <= 32) return {32, 64, 16, 2, 4};
  return {64, 64, 16, 4, 4};
}

constexpr int64_t kMaxGroups = 65535;  // per grid dimension
// llvmpipe ends an invocation's loops once they ran 65535 iterations in all: tile.glsl unrolls
// its fixed loops, so an invocation runs (K chunks of its split + a few) per output tile.
constexpr int64_t kLoopBudget = 65000;
// MODE_WEIGHT's K (batch x positions) per split: enough splits to spread a weight gradient's
// few output tiles over the device, and a bounded loop per invocation.
constexpr int64_t kSplitK = 4096;

// One launch of conv.comp: the GEMM's sizes, the split of K (MODE_WEIGHT), the positions and
// x's sizes, the operands and their 5-d strides.
struct Gemm {
  uint32_t mode = MODE_FORWARD;
  int64_t m = 0, n = 0, k = 0, kchunk = 0, splits = 1;
  Dims osize{}, xsize{};
  std::array<int64_t, 5> sx{}, sa{};
  at::Tensor out, a, x, bias;
};

// Whether every element t addresses lies below 2^32 elements from its first (the kernel's
// offsets are 32-bit).
bool offsets_fit(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t i = 0; i < t.dim(); ++i) last += (t.size(i) - 1) * t.stride(i);
  return t.numel() == 0 || (last >= 0 && fits<uint32_t>(last, t.numel()));
}

// g's push constants; false where a value does not fit the kernel's 32-bit fields.
[[nodiscard]] bool fill_push(const Gemm& g, const Conv& c, Push* p) {
  if (!fits<uint32_t>(g.m, g.n, g.k, g.kchunk)) return false;
  p->M = static_cast<uint32_t>(g.m);
  p->N = static_cast<uint32_t>(g.n);
  p->K = static_cast<uint32_t>(g.k);
  p->kchunk = static_cast<uint32_t>(g.kchunk);
  for (int i = 0; i < 3; ++i) {
    if (!fits<uint32_t>(g.osize[i], g.xsize[i])) return false;
    p->osize[i] = static_cast<uint32_t>(g.osize[i]);
    p->xsize[i] = static_cast<uint32_t>(g.xsize[i]);
    p->geo[i] = static_cast<uint32_t>(c.k[i] | c.s[i] << 8 | c.d[i] << 16 | c.p[i] << 24);
  }
  for (int i = 0; i < 5; ++i) {
    if (!fits<uint32_t>(g.sx[i], g.sa[i])) return false;
    p->sx[i] = static_cast<uint32_t>(g.sx[i]);
    p->sa[i] = static_cast<uint32_t>(g.sa[i]);
  }
  return true;
}

// The workgroups of g's grid (x: N tiles, y: M tiles, z: splits x groups); nothing where an
// invocation would loop past llvmpipe's budget or the grid past its limits.
std::optional<std::array<uint32_t, 3>> grid_of(const Gemm& g, const Conv& c, const Tiles& t) {
  const int64_t tiles_n = (g.n + t.bn - 1) / t.bn, tiles_m = (g.m + t.bm - 1) / t.bm;
  const int64_t x = std::clamp<int64_t>(tiles_n, 1, kMaxGroups);
  const int64_t y = std::clamp<int64_t>(tiles_m, 1, kMaxGroups);
  const int64_t z = g.splits * c.groups;
  const int64_t per_group = ((tiles_n + x - 1) / x) * ((tiles_m + y - 1) / y);
  if (z > kMaxGroups || per_group * ((g.kchunk + t.bk - 1) / t.bk + 4) > kLoopBudget) {
    return std::nullopt;
  }
  return std::array<uint32_t, 3>{static_cast<uint32_t>(x), static_cast<uint32_t>(y),
                                 static_cast<uint32_t>(z)};
}

// conv_direct.comp's workgroup, and where it runs instead of conv.comp: depthwise convolutions
// (groups == input channels) forward and their input gradients, whose GEMMs have a few rows
// (the channel multiplier) and a K of one window (times the multiplier), too small for tiles.
constexpr uint32_t kDirectLocal = 256;
constexpr int64_t kDirectMaxK = 1024;

bool direct(const Gemm& g, const Conv& c) {
  return g.mode != MODE_WEIGHT && c.groups > 1 && c.groups == c.cx && g.k <= kDirectMaxK;
}

// conv_direct.comp's grid (x / y: the elements of a group, z: the groups); nothing where an
// invocation would loop past llvmpipe's budget.
std::optional<std::array<uint32_t, 3>> direct_grid(const Gemm& g, const Conv& c) {
  const int64_t items = g.m * g.n,
                wgs = std::max<int64_t>(1, (items + kDirectLocal - 1) / kDirectLocal);
  const int64_t x = std::min(wgs, kMaxGroups), y = std::min((wgs + x - 1) / x, kMaxGroups);
  const int64_t per_invocation = (items + x * y * kDirectLocal - 1) / (x * y * kDirectLocal);
  if (c.groups > kMaxGroups || per_invocation * (g.k + 1) > kLoopBudget) return std::nullopt;
  return std::array<uint32_t, 3>{static_cast<uint32_t>(x), static_cast<uint32_t>(y),
                                 static_cast<uint32_t>(c.groups)};
}

std::optional<std::array<uint32_t, 3>> grid_for(const Gemm& g, const Conv& c) {
  return direct(g, c) ? direct_grid(g, c) : grid_of(g, c, tiles_for(g.m));
}

// Whether the kernel takes g (nothing launched): its fields fit, its grid and its operands.
[[nodiscard]] bool takes(const Gemm& g, const Conv& c) {
  Push p{};
  if (!fill_push(g, c, &p) || !grid_for(g, c)) return false;
  // The output's elements (MODE_WEIGHT: the partial sums), indexed with 32 bits.
  if (!fits<uint32_t>(g.splits * c.groups * g.m * g.n)) return false;
  for (const at::Tensor* t : {&g.a, &g.x, &g.bias}) {
    if (t->defined() && !offsets_fit(*t)) return false;
  }
  return true;
}

// Runs g on conv.comp or conv_direct.comp (g.out allocated; nothing to do without outputs);
// false where it declines.
[[nodiscard]] bool launch(const Gemm& g, const Conv& c) {
  if (g.m == 0 || g.n == 0) return true;
  const bool is_direct = direct(g, c);
  const Tiles t = tiles_for(g.m);
  const std::optional<std::array<uint32_t, 3>> groups = grid_for(g, c);
  Push push{};
  if (!groups || !fill_push(g, c, &push)) return false;
  const bool has_bias = g.bias.defined();
  Launch l(is_direct ? "conv_direct" : "conv", g.out.device().index());
  l.spec(SPEC_DT, dt(g.a)).spec(SPEC_MODE, g.mode).spec(SPEC_HAS_BIAS, has_bias ? 1 : 0);
  if (is_direct) {
    l.spec(SPEC_WG, kDirectLocal);
  } else {
    l.spec(SPEC_BM, t.bm).spec(SPEC_BN, t.bn).spec(SPEC_BK, t.bk);
    l.spec(SPEC_TM, t.tm).spec(SPEC_TN, t.tn).spec(SPEC_WG, t.invocations());
  }
  l.arg(g.out, true).arg(g.a, false).arg(g.x, false).arg(has_bias ? g.bias : g.out, false);
  return l.push(push).groups((*groups)[0], (*groups)[1], (*groups)[2]).run();
}

// ------------------------------------------------------------------ the three products
int64_t volume(const Dims& s) {
  return s[0] * s[1] * s[2];
}

// Y = conv(X, W) (+ bias) in MODE_FORWARD, into out [batch, cy, ys].
Gemm forward_gemm(const Conv& c, const at::Tensor& x, const at::Tensor& w) {
  Gemm g;
  g.mode = MODE_FORWARD;
  g.m = c.cy / c.groups;
  g.n = c.batch * volume(c.ys);
  g.k = g.kchunk = c.cx / c.groups * c.kvol();
  g.osize = c.ys;
  g.xsize = c.xs;
  g.sx = strides5(x);
  g.sa = strides5(w);
  g.a = w;
  g.x = x;
  return g;
}

// dX = the gradient of conv(X, W) for dY (+ bias: a transposed convolution's) in MODE_GATHER,
// into out [batch, cx, xs]: A is W read along its input channels.
Gemm gather_gemm(const Conv& c, const at::Tensor& dy, const at::Tensor& w) {
  Gemm g;
  g.mode = MODE_GATHER;
  g.m = c.cx / c.groups;
  g.n = c.batch * volume(c.xs);
  g.k = g.kchunk = c.cy / c.groups * c.kvol();
  g.osize = c.xs;
  g.xsize = c.ys;
  g.sx = strides5(dy);
  g.sa = strides5(w);
  std::swap(g.sa[0], g.sa[1]);
  g.a = w;
  g.x = dy;
  return g;
}

// dW's float32 partial sums [splits, cy, cx / groups * kernel] in MODE_WEIGHT.
Gemm weight_gemm(const Conv& c, const at::Tensor& dy, const at::Tensor& x) {
  Gemm g;
  g.mode = MODE_WEIGHT;
  g.m = c.cy / c.groups;
  g.n = c.cx / c.groups * c.kvol();
  g.k = c.batch * volume(c.ys);
  g.splits = std::max<int64_t>(1, std::min((g.k + kSplitK - 1) / kSplitK, kMaxGroups / c.groups));
  const int64_t bk = tiles_for(g.m).bk;
  g.kchunk = std::max<int64_t>(bk, ((g.k + g.splits - 1) / g.splits + bk - 1) / bk * bk);
  g.splits = std::max<int64_t>(1, (g.k + g.kchunk - 1) / g.kchunk);
  g.osize = c.ys;
  g.xsize = c.xs;
  g.sx = strides5(x);
  g.sa = strides5(dy);
  g.a = dy;
  g.x = x;
  return g;
}

// ------------------------------------------------------------------ the ops
// Whether the kernel takes these operands: one float dtype (float32, float16, bfloat16), all on
// the first one's mpsrt device, no lazy negation or conjugation.
bool operands_ok(std::initializer_list<const at::Tensor*> ts) {
  const at::Tensor& first = **ts.begin();
  for (const at::Tensor* t : ts) {
    if (!t->defined()) continue;
    if (t->scalar_type() != first.scalar_type() || t->device() != first.device()) return false;
    if (!is_float(t->scalar_type()) || t->is_neg() || t->is_conj()) return false;
  }
  return first.device().type() == c10::DeviceType::PrivateUse1;
}

std::optional<at::Tensor> forward_kernel(const at::Tensor& input, const at::Tensor& weight,
                                         const std::optional<at::Tensor>& bias,
                                         c10::IntArrayRef stride, c10::IntArrayRef padding,
                                         c10::IntArrayRef dilation, bool transposed,
                                         c10::IntArrayRef output_padding, int64_t groups) {
  const at::Tensor b = bias ? *bias : at::Tensor();
  Conv c;
  if (!operands_ok({&input, &weight, &b}) ||
      !geometry(input, weight, stride, padding, dilation, transposed, output_padding, groups, &c)) {
    return std::nullopt;
  }
  const int64_t channels = transposed ? c.cx : c.cy;
  if (b.defined() && (b.dim() != 1 || b.size(0) != channels)) return std::nullopt;
  Gemm g = transposed ? gather_gemm(c, input, weight) : forward_gemm(c, input, weight);
  if (b.defined()) g.bias = b.contiguous();
  if (!takes(g, c)) return std::nullopt;
  g.out = new_empty(shape_of(c, channels, transposed ? c.xs : c.ys, input.dim()),
                    input.scalar_type(), input.device());
  if (!launch(g, c)) return std::nullopt;
  return g.out;
}

// Whether the direct entries may run the kernel: on the mpsrt device, kernels on, an input with
// elements (torch's path answers an empty one with no kernel to run).
bool direct_ok(const at::Tensor& input) {
  return input.device().type() == c10::DeviceType::PrivateUse1 && enabled(input.device().index()) &&
         input.numel() > 0;
}

// convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
// output_padding, groups) -> Tensor: aten::convolution's arguments exactly.
at::Tensor forward(const at::Tensor& input, const at::Tensor& weight,
                   const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                   c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                   c10::IntArrayRef output_padding, int64_t groups) {
  if (input.device().type() == c10::DeviceType::PrivateUse1 && enabled(input.device().index())) {
    if (std::optional<at::Tensor> r = forward_kernel(input, weight, bias, stride, padding, dilation,
                                                     transposed, output_padding, groups)) {
      return *r;
    }
  }
  if (std::optional<at::Tensor> r = forward_host(input, weight, bias, stride, padding, dilation,
                                                 transposed, output_padding, groups)) {
    return *r;
  }
  return forward_fallback(input, weight, bias, stride, padding, dilation, transposed,
                          output_padding, groups);
}

// The weight gradient from its float32 partial sums (g planned by weight_gemm); nothing where
// the kernel declines.
std::optional<at::Tensor> weight_grad(Gemm g, const Conv& c, const at::Tensor& weight) {
  if (c.batch == 0) return at::zeros(weight.sizes(), weight.options());
  g.out = new_empty({g.splits, c.cy, g.n}, at::kFloat, weight.device());
  if (!launch(g, c)) return std::nullopt;
  const at::Tensor sum = g.splits == 1 ? g.out.select(0, 0) : g.out.sum(0);
  return sum.reshape(weight.sizes()).to(weight.scalar_type());
}

// The sum over every dim but the channels (dim 1).
at::Tensor bias_grad(const at::Tensor& grad_output) {
  std::vector<int64_t> dims{0};
  for (int64_t i = 2; i < grad_output.dim(); ++i) dims.push_back(i);
  return grad_output.sum(dims);
}

// The gradients output_mask asks for; nothing (no launch) where the kernel does not take them.
std::optional<Grads> backward_kernel(const at::Tensor& grad_output, const at::Tensor& input,
                                     const at::Tensor& weight, const Conv& c, bool transposed,
                                     std::array<bool, 3> mask) {
  // The ordinary convolution's X and dY (conv.h): a transposed one's input is dY.
  const at::Tensor& x = transposed ? grad_output : input;
  const at::Tensor& dy = transposed ? input : grad_output;
  const Gemm gi =
      transposed ? forward_gemm(c, grad_output, weight) : gather_gemm(c, grad_output, weight);
  const Gemm gw = weight_gemm(c, dy, x);
  if ((mask[0] && !takes(gi, c)) || (mask[1] && c.batch > 0 && !takes(gw, c))) {
    return std::nullopt;
  }
  Grads r;
  if (mask[0]) {
    Gemm g = gi;
    g.out = new_empty(input.sizes(), input.scalar_type(), input.device());
    if (!launch(g, c)) return std::nullopt;
    std::get<0>(r) = g.out;
  }
  if (mask[1]) {
    std::optional<at::Tensor> w = weight_grad(gw, c, weight);
    if (!w) return std::nullopt;
    std::get<1>(r) = *w;
  }
  if (mask[2]) std::get<2>(r) = bias_grad(grad_output);
  return r;
}

// convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
// transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias).
Grads backward(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
               c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
               bool transposed, c10::IntArrayRef output_padding, int64_t groups,
               std::array<bool, 3> output_mask) {
  Conv c;
  if (operands_ok({&input, &grad_output, &weight}) && enabled(input.device().index()) &&
      geometry(input, weight, stride, padding, dilation, transposed, output_padding, groups, &c) &&
      grad_output.sizes() == c10::IntArrayRef(shape_of(c, transposed ? c.cx : c.cy,
                                                       transposed ? c.xs : c.ys, input.dim()))) {
    if (std::optional<Grads> r =
            backward_kernel(grad_output, input, weight, c, transposed, output_mask)) {
      return *r;
    }
  }
  // bias_sizes (aten::convolution_backward's argument after weight) only says whether and how
  // big a bias gradient to make: the output channels, as output_mask[2] asks.
  const std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
  if (std::optional<Grads> r =
          backward_host(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                        transposed, output_padding, groups, output_mask)) {
    return *r;
  }
  return backward_fallback(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                           transposed, output_padding, groups, output_mask);
}

// aten::convolution: the kernel, or torch's own path.
at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                       c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  if (direct_ok(input)) {
    if (std::optional<at::Tensor> r = forward_kernel(input, weight, bias, stride, padding, dilation,
                                                     transposed, output_padding, groups)) {
      return *r;
    }
  }
  if (std::optional<at::Tensor> r = forward_host(input, weight, bias, stride, padding, dilation,
                                                 transposed, output_padding, groups)) {
    return *r;
  }
  return at::native::convolution(input, weight, bias, stride, padding, dilation, transposed,
                                 output_padding, groups);
}

// aten::convolution_backward (bias_sizes only says whether a bias has a gradient: output_mask[2]
// asks for it): the kernel, or torch's own path.
Grads convolution_backward(const at::Tensor& grad_output, const at::Tensor& input,
                           const at::Tensor& weight, at::OptionalIntArrayRef bias_sizes,
                           c10::IntArrayRef stride, c10::IntArrayRef padding,
                           c10::IntArrayRef dilation, bool transposed,
                           c10::IntArrayRef output_padding, int64_t groups,
                           std::array<bool, 3> output_mask) {
  Conv c;
  if (direct_ok(input) && operands_ok({&input, &grad_output, &weight}) &&
      geometry(input, weight, stride, padding, dilation, transposed, output_padding, groups, &c) &&
      grad_output.sizes() == c10::IntArrayRef(shape_of(c, transposed ? c.cx : c.cy,
                                                       transposed ? c.xs : c.ys, input.dim()))) {
    if (std::optional<Grads> r =
            backward_kernel(grad_output, input, weight, c, transposed, output_mask)) {
      return *r;
    }
  }
  if (std::optional<Grads> r =
          backward_host(grad_output, input, weight, bias_sizes, stride, padding, dilation,
                        transposed, output_padding, groups, output_mask)) {
    return *r;
  }
  return at::native::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
                                          dilation, transposed, output_padding, groups,
                                          output_mask);
}

// aten::conv1d / conv2d / conv3d (torch's composite ops over N spatial dims, `Native` their
// composition), registered above autograd (AutogradPrivateUse1) and below it (PrivateUse1, for
// inference mode): where the entry may run the kernel itself (direct_call: autograd has nothing
// to do, no Python dispatch) on a batched input, the kernel runs directly; everything else (and
// what the kernel declines) is torch's composition, which ends in aten::convolution above.
template <int64_t N, auto Native>
at::Tensor conv_nd(const at::Tensor& input, const at::Tensor& weight,
                   const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                   c10::IntArrayRef padding, c10::IntArrayRef dilation, int64_t groups) {
  const at::Tensor b = bias ? *bias : at::Tensor();
  if (input.dim() == N + 2 && input.device().type() == c10::DeviceType::PrivateUse1 &&
      direct_call({&input, &weight, &b})) {
    std::optional<at::Tensor> r = direct_ok(input)
                                      ? forward_kernel(input, weight, bias, stride, padding,
                                                       dilation, false, c10::IntArrayRef(), groups)
                                      : forward_host(input, weight, bias, stride, padding, dilation,
                                                     false, std::array<int64_t, N>{}, groups);
    if (r) return *r;
  }
  return Native(input, weight, bias, c10::fromIntArrayRefSlow(stride),
                c10::fromIntArrayRefSlow(padding), c10::fromIntArrayRefSlow(dilation),
                c10::SymInt(groups));
}

void register_conv_nd(torch::Library& m) {
  namespace A = at::_ops;
  reg<A::conv1d, &conv_nd<1, &at::native::conv1d_symint>>(m);
  reg<A::conv2d, &conv_nd<2, &at::native::conv2d_symint>>(m);
  reg<A::conv3d, &conv_nd<3, &at::native::conv3d_symint>>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::conv

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  namespace c = mpsrt::torch_glue::ops::conv;
  using mpsrt::torch_glue::ops::reg_listed;
  reg_listed<at::_ops::convolution_overrideable, &c::forward>(m);
  reg_listed<at::_ops::convolution_backward_overrideable, &c::backward>(m);
  reg_listed<at::_ops::convolution, &c::convolution>(m);
  reg_listed<at::_ops::convolution_backward, &c::convolution_backward>(m);
  c::register_conv_nd(m);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  mpsrt::torch_glue::ops::conv::register_conv_nd(m);
}
