// The fused transformer ops torch's nn.TransformerEncoderLayer and nn.MultiheadAttention call
// in inference on a device of the "fast path" list (PrivateUse1 among them):
// _transformer_encoder_layer_fwd and _native_multi_head_attention. They have CPU and CUDA
// kernels only; where the device runs mpsrt's kernels (launch.h: enabled), they run here as
// their composition of aten ops (linear, scaled_dot_product_attention, layer_norm, relu / gelu,
// add), each of which dispatches to the device again, so the whole layer runs on the device's
// kernels. Elsewhere (the cpu backend, CPU-type devices) the fallback runs torch's fused CPU
// kernel, which is faster there. Masks other than none decline (the fallback takes them).
//
// The attention backend of scaled_dot_product_attention (_fused_sdp_choice_stub): on mpsrt's
// kernels the fused-attention pair below where its kernels take the inputs, else the math path
// (matmuls, softmax: the device's kernels); where the device's ops run as CPU kernels on
// host-visible memory, the choice torch makes for the same tensors on the CPU, so that the
// fallback runs torch's fused CPU flash-attention kernel instead of the math path's separate
// batched matmuls and softmax over the whole score matrix.
//
// The fused-attention pair torch leaves to out-of-tree devices (..._overrideable and its
// backward): on mpsrt's kernels csrc/kernels/attention/flash.comp (see "fused kernels" below);
// where they decline, the CPU's flash attention ops through the fallback (composite_attention).
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_ops.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/ops/_native_multi_head_attention_ops.h>
#include <ATen/ops/_scaled_dot_product_fused_attention_overrideable_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_fused_attention_overrideable_ops.h>
#include <ATen/ops/_transformer_encoder_layer_fwd_ops.h>
#include <ATen/ops/scaled_dot_product_attention_native.h>
#include <ATen/ops/scaled_dot_product_attention_ops.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "attention/flash.h"
#include "device/generator.h"
#include "device/host_access.h"
#include "ops/common.h"
#include "ops/storage.h"

namespace mpsrt::torch_glue::ops::attention {
namespace {

// Whether the attention below takes `heads` heads of an embedding of e (they divide it).
bool heads_divide(int64_t e, int64_t heads) {
  return heads > 0 && e % heads == 0;
}

// The attention of the fused ops: x [B, T, E] -> (out [B, T, E], weights [B, T, T] averaged
// over heads, or [B, H, T, T], when asked). Query, key and value are the one input x here
// (self-attention) or three inputs (_native_multi_head_attention), projected by one packed
// weight [3E, E]. `heads` divides E (heads_divide).
std::tuple<at::Tensor, at::Tensor> attention(const at::Tensor& q_in, const at::Tensor& k_in,
                                             const at::Tensor& v_in, int64_t heads,
                                             const at::Tensor& qkv_w, const at::Tensor& qkv_b,
                                             const at::Tensor& proj_w, const at::Tensor& proj_b,
                                             bool need_weights, bool average) {
  const int64_t b = q_in.size(0), t = q_in.size(1), e = q_in.size(2);
  const int64_t s = k_in.size(1);
  const int64_t d = e / heads;
  const auto w = qkv_w.chunk(3, 0);
  const auto bias = qkv_b.chunk(3, 0);
  const auto split = [&](const at::Tensor& x, int i, int64_t len) {
    return at::linear(x, w[i], bias[i]).view({b, len, heads, d}).transpose(1, 2);
  };
  const at::Tensor q = split(q_in, 0, t), k = split(k_in, 1, s), v = split(v_in, 2, s);
  at::Tensor out, weights;
  if (need_weights) {
    const at::Tensor scores =
        at::mul(at::matmul(q, k.transpose(-2, -1)), 1.0 / std::sqrt(double(d)));
    const at::Tensor p = at::softmax(scores, -1);
    out = at::matmul(p, v);
    weights = average ? p.mean(1) : p;
  } else {
    out = at::scaled_dot_product_attention(q, k, v);
  }
  out = out.transpose(1, 2).reshape({b, t, e});
  return {at::linear(out, proj_w, proj_b), weights};
}

// The parameters of one encoder layer (_transformer_encoder_layer_fwd's arguments).
struct EncoderLayer {
  int64_t e, heads;
  const at::Tensor &qkv_w, &qkv_b, &proj_w, &proj_b;
  bool gelu;
  double eps;
  const at::Tensor &norm1_w, &norm1_b, &norm2_w, &norm2_b;
  const at::Tensor &ffn1_w, &ffn1_b, &ffn2_w, &ffn2_b;

  at::Tensor mha(const at::Tensor& x) const {
    return std::get<0>(attention(x, x, x, heads, qkv_w, qkv_b, proj_w, proj_b, false, false));
  }
  at::Tensor ffn(const at::Tensor& x) const {
    at::Tensor h = at::linear(x, ffn1_w, ffn1_b);
    h = gelu ? at::gelu(h) : at::relu(h);
    return at::linear(h, ffn2_w, ffn2_b);
  }
  at::Tensor norm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) const {
    return at::layer_norm(x, {e}, w, b, eps);
  }
  // One layer (post-norm or pre-norm), batch first.
  at::Tensor run(const at::Tensor& src, bool norm_first) const {
    at::Tensor x = src;
    if (norm_first) {
      x = at::add(x, mha(norm(x, norm1_w, norm1_b)));
      x = at::add(x, ffn(norm(x, norm2_w, norm2_b)));
    } else {
      x = norm(at::add(x, mha(x)), norm1_w, norm1_b);
      x = norm(at::add(x, ffn(x)), norm2_w, norm2_b);
    }
    return x;
  }
};

// _transformer_encoder_layer_fwd: one encoder layer, batch first; a mask declines.
std::optional<at::Tensor> encoder_layer(
    const at::Tensor& src, int64_t e, int64_t heads, const at::Tensor& qkv_w,
    const at::Tensor& qkv_b, const at::Tensor& proj_w, const at::Tensor& proj_b, bool use_gelu,
    bool norm_first, double eps, const at::Tensor& norm1_w, const at::Tensor& norm1_b,
    const at::Tensor& norm2_w, const at::Tensor& norm2_b, const at::Tensor& ffn1_w,
    const at::Tensor& ffn1_b, const at::Tensor& ffn2_w, const at::Tensor& ffn2_b,
    const std::optional<at::Tensor>& mask, std::optional<int64_t> /*mask_type*/) {
  if (mask.has_value() || src.dim() != 3 || src.size(2) != e || src.is_nested() ||
      !heads_divide(e, heads)) {
    return std::nullopt;
  }
  const EncoderLayer layer{e,       heads,   qkv_w,   qkv_b,   proj_w, proj_b, use_gelu, eps,
                           norm1_w, norm1_b, norm2_w, norm2_b, ffn1_w, ffn1_b, ffn2_w,   ffn2_b};
  return layer.run(src, norm_first);
}

// _native_multi_head_attention: nn.MultiheadAttention's inference path (batch first); a mask
// declines. The weights where asked, else an empty tensor.
std::optional<std::tuple<at::Tensor, at::Tensor>> multi_head_attention(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t e, int64_t heads,
    const at::Tensor& qkv_w, const at::Tensor& qkv_b, const at::Tensor& proj_w,
    const at::Tensor& proj_b, const std::optional<at::Tensor>& mask, bool need_weights,
    bool average, std::optional<int64_t> /*mask_type*/) {
  if (mask.has_value() || q.dim() != 3 || k.dim() != 3 || v.dim() != 3 || q.size(2) != e ||
      k.sizes() != v.sizes() || q.is_nested() || !heads_divide(q.size(2), heads)) {
    return std::nullopt;
  }
  auto [out, weights] =
      attention(q, k, v, heads, qkv_w, qkv_b, proj_w, proj_b, need_weights, average);
  return std::make_tuple(out, weights.defined() ? weights : at::empty({0}, q.options()));
}

// A CPU tensor standing for t in the CPU's choice: t itself (a CPU tensor), its alias on
// host-visible mpsrt memory, or, for a tensor without memory (torch.compile traces with fake
// tensors), an uninitialized CPU tensor of its geometry (the choice reads only sizes, strides
// and dtype). Undefined where no CPU tensor can stand for it: discrete memory, or symbolic
// sizes.
at::Tensor cpu_geometry(const at::Tensor& t) {
  if (t.has_storage() && t.storage().data() != nullptr) {
    return host_visible(t.storage()) ? cpu_alias(t) : at::Tensor();
  }
  if (!api().host_visible(t.device().index()) ||
      t.unsafeGetTensorImpl()->has_symbolic_sizes_strides())
    return at::Tensor();
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
}

// The stand-in also requires grad where t does: the CPU's choice depends on it (its flash
// kernel has no gradient for a mask, so a mask that requires grad takes the math path). One
// that does not is t's kept stand-in (host_access.h) where t has one.
at::Tensor cpu_stand_in(const at::Tensor& t) {
  if (!is_mpsrt(t)) return t;
  if (!t.requires_grad() && t.has_storage() && t.storage().data() != nullptr &&
      host_visible(t.storage())) {
    return *kept_stand_in(t, api().runtime_generation());  // no new alias per call
  }
  at::Tensor s = cpu_geometry(t);
  if (s.defined() && t.requires_grad()) s.set_requires_grad(true);
  return s;
}

// The CPU's choice where the inputs are host-visible mpsrt memory the fallback runs CPU kernels
// on (the math path where they are not). Called by scaled_dot_product_attention for mpsrt
// tensors only.
int64_t cpu_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                   std::optional<double> scale, bool enable_gqa) {
  constexpr auto kMath = static_cast<int64_t>(at::SDPBackend::math);
  const at::Tensor cq = cpu_stand_in(q), ck = cpu_stand_in(k), cv = cpu_stand_in(v);
  std::optional<at::Tensor> cmask;
  if (mask.has_value() && mask->defined()) {
    cmask = cpu_stand_in(*mask);
    if (!cmask->defined()) return kMath;
  }
  if (!cq.defined() || !ck.defined() || !cv.defined()) return kMath;
  // Straight to the CPU's kernel: under torch.compile's tracing (a Python dispatch mode,
  // functionalization) the op call, even on the CPU stand-ins, would be recorded in the graph
  // (an int-valued node its partitioner refuses); the choice is made now, as torch's own
  // devices make it, outside the dispatcher.
  c10::impl::ExcludeDispatchKeyGuard not_traced(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot,
                           c10::DispatchKey::PreDispatch, c10::DispatchKey::Functionalize}));
  return at::_fused_sdp_choice(cq, ck, cv, cmask, dropout_p, is_causal, scale, enable_gqa);
}

// The fused-attention pair torch leaves to out-of-tree devices
// (_scaled_dot_product_fused_attention_overrideable and its backward; scaled_dot_product_attention
// reaches them where the backend choice says "overrideable", and callers may call them). They
// run as the CPU's flash attention ops (_scaled_dot_product_flash_attention_for_cpu and its
// backward), which dispatch to the device again: through the fallback (CPU kernels on
// host-visible memory, staged copies on discrete memory). The CPU's logsumexp has the fused
// op's layout ([B, H, L], float). The fields only a GPU kernel fills (cumulative sequence
// lengths, philox seed and offset, the debug mask) are empty; max_q / max_k are the lengths.
using AttentionOut = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt,
                                c10::SymInt, at::Tensor, at::Tensor, at::Tensor>;

AttentionOut composite_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::optional<at::Tensor>& bias, double dropout_p,
                                 bool is_causal, bool return_debug_mask,
                                 std::optional<double> scale) {
  TORCH_CHECK(!return_debug_mask,
              "[torch] _scaled_dot_product_fused_attention_overrideable on mpsrt: "
              "return_debug_mask=True is not supported (the CPU's flash attention keeps no "
              "attention matrix); pass False");
  auto [out, lse] =
      at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, bias, scale);
  const at::Tensor none = at::empty({0}, q.options().dtype(at::kLong));
  return {out,
          lse,
          none,
          none,
          q.sym_size(-2),
          k.sym_size(-2),
          none,
          none,
          at::empty({0}, q.options())};
}

// The gradient of the additive bias, which the CPU's flash backward does not compute:
// dS = P * (dP - rowsum(dO * O)), P = exp(S - lse), S = q k^T scale + bias, dP = dO v^T,
// summed to the bias's (broadcast) shape.
at::Tensor bias_gradient(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                         const at::Tensor& v, const at::Tensor& bias, const at::Tensor& out,
                         const at::Tensor& lse, double scale) {
  const at::Tensor scores = at::add(at::mul(at::matmul(q, k.transpose(-2, -1)), scale), bias);
  const at::Tensor p = at::exp(at::sub(scores, lse.unsqueeze(-1)));
  const at::Tensor dp = at::matmul(grad_out, v.transpose(-2, -1));
  const at::Tensor row = at::sum(at::mul(grad_out, out), {-1}, /*keepdim=*/true);
  return at::mul(p, at::sub(dp, row)).sum_to_size(bias.sizes());
}

using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

Grads composite_backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                         const at::Tensor& v, const at::Tensor& bias, std::array<bool, 4> mask,
                         const at::Tensor& out, const at::Tensor& lse,
                         const at::Tensor& /*cum_seq_q*/, const at::Tensor& /*cum_seq_k*/,
                         int64_t /*max_q*/, int64_t /*max_k*/, double dropout_p, bool is_causal,
                         const at::Tensor& /*philox_seed*/, const at::Tensor& /*philox_offset*/,
                         std::optional<double> scale) {
  const std::optional<at::Tensor> attn_mask =
      bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt;
  auto [gq, gk, gv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
      grad_out, q, k, v, out, lse, dropout_p, is_causal, attn_mask, scale);
  at::Tensor gbias;
  if (mask[3] && bias.defined()) {
    TORCH_CHECK(dropout_p == 0.0 && !is_causal,
                "[torch] _scaled_dot_product_fused_attention_overrideable_backward on mpsrt: "
                "the bias gradient is computed without dropout or a causal mask; got dropout_p=",
                dropout_p, ", is_causal=", is_causal);
    const double s = scale.value_or(1.0 / std::sqrt(double(q.size(-1))));
    gbias = bias_gradient(grad_out, q, k, v, bias, out, lse, s);
  }
  return {mask[0] ? gq : at::Tensor(), mask[1] ? gk : at::Tensor(), mask[2] ? gv : at::Tensor(),
          gbias};
}

// ---------------------------------------------------------------- fused kernels (flash.comp)
// scaled_dot_product_attention on csrc/kernels/attention/flash.comp: the forward (out and the
// logsumexp, with an online softmax over key tiles), and the backward as three dispatches
// (per-row statistics, dq over key tiles, dk / dv over query tiles): no score matrix in memory.
// What they decline (the composite paths above run it): dtypes other than float32 / float16 /
// bfloat16 (all three inputs alike), head dims over 256, differing q / k head dims, lengths or
// heads over 65535, more than 65535 (batch, head) pairs or query / key blocks, masks that do
// not broadcast to [B, Hq, Lq, Lk] (or other dtypes than bool and the inputs'), dropout_p >= 1,
// spans over 2^32 elements, and work an invocation could not finish within the loop limit of
// software Vulkan (kMaxSteps: about Lk <= 7000 at D = 64 for the forward, Lq * group as much for
// the dk / dv kernel).
namespace fl = ::mpsrt::kernels::attention::flash;

constexpr int64_t kMaxSteps = 60000;  // llvmpipe ends an invocation after 65535 loop iterations

// The inputs' geometry: [B, Hq, Lq, D] queries, [B, Hkv, Lk, D] keys, [B, Hkv, Lk, Dv] values.
struct Geometry {
  int64_t b, hq, hkv, lq, lk, d, dv;
  uint32_t split, d4;  // invocations per row; the tiles' width in vec4s (a multiple of split)
  int64_t rows() const { return fl::LOCAL / split; }
  int64_t group() const { return hq / hkv; }
};

// A 3-D input (heads, length, dim) as one batch.
at::Tensor as4(const at::Tensor& t) {
  return t.dim() == 3 ? t.unsqueeze(0) : t;
}

// Whether the elements t addresses lie within 2^32 of its first (the kernel's 32-bit offsets)
// and its strides are non-negative with the last dim dense.
bool addressable(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.stride(i) < 0) return false;
    last += (t.size(i) - 1) * t.stride(i);
  }
  return t.numel() > 0 && t.stride(-1) == 1 && fits<uint32_t>(last);
}

// The loop iterations an invocation runs (an estimate from above) for `tiles` tiles.
int64_t steps(const Geometry& g, int64_t tiles, bool dropout) {
  const int64_t rows = g.rows(), acc = g.d4 / g.split;
  const int64_t load = 2 * (rows * g.d4 + fl::LOCAL - 1) / fl::LOCAL;
  const int64_t per =
      load + rows / g.split * (2 * g.d4 + (dropout ? 10 : 0)) + rows * (2 + 2 * acc);
  return tiles * per + 4 * g.d4;
}

std::optional<Geometry> geometry(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 bool dropout) {
  if (q.is_nested() || k.is_nested() || v.is_nested() || q.dim() < 3 || q.dim() > 4 ||
      k.dim() != q.dim() || v.dim() != q.dim()) {
    return std::nullopt;
  }
  const at::ScalarType t = q.scalar_type();
  if (!is_float(t) || k.scalar_type() != t || v.scalar_type() != t) return std::nullopt;
  const at::Tensor q4 = as4(q), k4 = as4(k), v4 = as4(v);
  Geometry g{q4.size(0), q4.size(1), k4.size(1), q4.size(2), k4.size(2),
             q4.size(3), v4.size(3), 4,          0};
  if (k4.size(0) != g.b || v4.size(0) != g.b || v4.size(1) != g.hkv || v4.size(2) != g.lk ||
      k4.size(3) != g.d || g.hkv == 0 || g.hq % g.hkv != 0 || g.d > 256 || g.dv > 256 ||
      !fits<uint16_t>(g.lq, g.lk, g.hq) || g.b * g.hq > 65535) {
    return std::nullopt;
  }
  if (!addressable(q4) || !addressable(k4) || !addressable(v4)) return std::nullopt;
  const int64_t d4 = (std::max(g.d, g.dv) + 3) / 4;
  g.split = d4 > 28 ? 8 : 4;
  g.d4 = static_cast<uint32_t>((d4 + g.split - 1) / g.split * g.split);
  // The kernel's shared memory (flash.comp: four rows x d4 vec4 tiles, 2.5 KiB more) within
  // 32 KiB, what every GPU mpsrt runs on offers (lavapipe and Apple's 32, NVIDIA's 48): head
  // dims up to 112 take 16 rows a workgroup, up to 224 eight; wider ones take the math path.
  if (4 * g.rows() * g.d4 * 16 + 2560 > 32768) return std::nullopt;
  const int64_t blocks = (std::max(g.lq, g.lk) + g.rows() - 1) / g.rows();
  if (blocks > 65535 || steps(g, blocks, dropout) > kMaxSteps ||
      steps(g, blocks * g.group(), dropout) > kMaxSteps) {
    return std::nullopt;
  }
  return g;
}

// Whether the kernel takes the mask (absent, or bool / the inputs' dtype, broadcasting to
// [B, Hq, Lq, Lk]).
bool mask_ok(const std::optional<at::Tensor>& mask, const Geometry& g, at::ScalarType t) {
  if (!mask.has_value() || !mask->defined()) return true;
  const at::Tensor& m = *mask;
  const std::vector<int64_t> full{g.b, g.hq, g.lq, g.lk};
  return (m.scalar_type() == at::kBool || m.scalar_type() == t) && m.dim() >= 1 && m.dim() <= 4 &&
         at::is_expandable_to(m.sizes(), full);
}

// The mask as a [B, Hq, Lq, Lk] view with its last dim dense (a mask broadcast over the keys
// is materialised over them); undefined without a mask; nothing where the kernel does not take
// it.
std::optional<at::Tensor> mask_view(const std::optional<at::Tensor>& mask, const Geometry& g,
                                    at::ScalarType t) {
  if (!mask_ok(mask, g, t)) return std::nullopt;
  if (!mask.has_value() || !mask->defined()) return at::Tensor();
  at::Tensor m = *mask;
  if (m.size(-1) != g.lk) {
    std::vector<int64_t> sizes(m.sizes().begin(), m.sizes().end());
    sizes.back() = g.lk;
    m = m.expand(sizes).contiguous();
  } else if (m.stride(-1) != 1) {
    m = m.contiguous();
  }
  m = m.expand({g.b, g.hq, g.lq, g.lk});
  if (!addressable(m)) return std::nullopt;
  return m;
}

// The push constants for the inputs (4-D views), the mask (or undefined), out's strides
// (the forward's output; unused by the backward) and the scale.
fl::Push flash_push(const Geometry& g, const at::Tensor& q, const at::Tensor& k,
                    const at::Tensor& v, const at::Tensor& mask, const at::Tensor& out,
                    double scale) {
  fl::Push p{};
  p.lens = static_cast<uint32_t>(g.lq | g.lk << 16);
  p.dims = static_cast<uint32_t>(g.d | g.dv << 16);
  p.heads = static_cast<uint32_t>(g.hq | g.group() << 16);
  const auto strides = [](uint32_t* dst, const at::Tensor& t) {
    for (int i = 0; i < 3; ++i) dst[i] = t.defined() ? static_cast<uint32_t>(t.stride(i)) : 0;
  };
  strides(p.qs, q);
  strides(p.ks, k);
  strides(p.vs, v);
  strides(p.os, out);
  strides(p.ms, mask);
  p.scale = static_cast<float>(scale);
  return p;
}

// Dropout's Philox stream: the device's default generator reserves a word per attention weight
// ([B, Hq, Lq, Lk]); returns (seed, offset), which the backward gets back.
std::pair<uint64_t, uint64_t> reserve_dropout(const Geometry& g, c10::Device device) {
  MpsrtGeneratorImpl* gen = generator_for(std::nullopt, device);
  const uint64_t words = static_cast<uint64_t>(g.b * g.hq * g.lq * g.lk);
  uint64_t seed = 0, offset = 0;
  {
    std::lock_guard<std::mutex> lock(gen->mutex_);
    seed = gen->current_seed();
    offset = gen->get_offset();
    gen->set_offset(offset + (words + 3) / 4);
  }
  return {seed, offset};
}

// Dropout's push constants: the keep threshold (a Philox word below it keeps) and the stream.
void set_dropout(fl::Push& p, double dropout_p, uint64_t seed, uint64_t offset) {
  const double keep = std::floor((1.0 - dropout_p) * 4294967296.0);
  p.keep = static_cast<uint32_t>(std::min(keep, 4294967295.0));
  p.seed[0] = static_cast<uint32_t>(seed);
  p.seed[1] = static_cast<uint32_t>(seed >> 32);
  p.offset[0] = static_cast<uint32_t>(offset);
  p.offset[1] = static_cast<uint32_t>(offset >> 32);
}

// A launch of flash.comp's op for g on q's device, with its specialisation constants.
Launch flash_launch(uint32_t op, const Geometry& g, const at::Tensor& q, const at::Tensor& mask,
                    bool causal, bool dropout) {
  Launch l("flash", q.device().index());
  l.spec(fl::SPEC_OP, op).spec(fl::SPEC_DT, dt(q)).spec(fl::SPEC_SPLIT, g.split);
  l.spec(fl::SPEC_D4, g.d4).spec(fl::SPEC_CAUSAL, causal ? 1 : 0);
  l.spec(fl::SPEC_DROPOUT, dropout ? 1 : 0).spec(fl::SPEC_HAS_MASK, mask.defined() ? 1 : 0);
  if (mask.defined()) l.spec(fl::SPEC_DTM, dt(mask));
  return l;
}

double scale_of(std::optional<double> scale, int64_t d) {
  return scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
}

// A 0-dim int64 CPU tensor holding v (made without the dispatcher: no fill op).
at::Tensor cpu_long(int64_t v) {
  at::Tensor t = at::detail::empty_cpu({}, at::kLong, /*pin_memory=*/false, std::nullopt);
  *t.mutable_data_ptr<int64_t>() = v;
  return t;
}

// The forward kernel's results: the output (in q's rank), the rows' log-sum-exp, and dropout's
// stream (seed, offset) where it drew.
struct Forward {
  at::Tensor out, lse;
  uint64_t seed = 0, offset = 0;
};

// The forward on the kernel, or nothing (declined).
std::optional<Forward> kernel_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const std::optional<at::Tensor>& bias, double dropout_p,
                                      bool is_causal, std::optional<double> scale) {
  const bool dropout = dropout_p > 0.0;
  if (!enabled(q.device().index()) || dropout_p >= 1.0 || dropout_p < 0.0) return std::nullopt;
  const std::optional<Geometry> g = geometry(q, k, v, dropout);
  if (!g) return std::nullopt;
  const std::optional<at::Tensor> mask = mask_view(bias, *g, q.scalar_type());
  if (!mask) return std::nullopt;
  const at::Tensor q4 = as4(q), k4 = as4(k), v4 = as4(v);
  const c10::Device dev = q.device();
  const std::array<int64_t, 4> out_shape{g->b, g->hq, g->lq, g->dv};
  at::Tensor out = g->dv == g->d && !q4.is_contiguous() ? at::empty_like(q4) : at::Tensor();
  if (!out.defined() || !addressable(out)) out = new_empty(out_shape, q.scalar_type(), dev);
  const at::Tensor lse = new_empty({g->b, g->hq, g->lq}, at::kFloat, dev);
  fl::Push p = flash_push(*g, q4, k4, v4, *mask, out, scale_of(scale, g->d));
  Forward r;
  if (dropout) {
    std::tie(r.seed, r.offset) = reserve_dropout(*g, q.device());
    set_dropout(p, dropout_p, r.seed, r.offset);
  }
  Launch l = flash_launch(fl::OP_FORWARD, *g, q, *mask, is_causal, dropout);
  l.arg(out, true).arg(q4, false).arg(k4, false).arg(v4, false);
  l.arg(mask->defined() ? *mask : q4, false).arg(lse, true).fill_args(1);
  l.push(p).groups(static_cast<uint32_t>((g->lq + g->rows() - 1) / g->rows()),
                   static_cast<uint32_t>(g->b * g->hq));
  if (!l.run()) return std::nullopt;
  r.out = q.dim() == 3 ? out.squeeze(0) : out;
  r.lse = lse;
  return r;
}

// _scaled_dot_product_fused_attention_overrideable on the kernel, or nothing (declined).
std::optional<AttentionOut> kernel_attention(const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v,
                                             const std::optional<at::Tensor>& bias,
                                             double dropout_p, bool is_causal,
                                             std::optional<double> scale) {
  std::optional<Forward> r = kernel_forward(q, k, v, bias, dropout_p, is_causal, scale);
  if (!r) return std::nullopt;
  // Dropout's seed and offset: 0-dim int64 CPU tensors (torch's meta function's shapes).
  at::Tensor seed_t = cpu_long(static_cast<int64_t>(r->seed)), offset_t = seed_t;
  if (dropout_p > 0.0) offset_t = cpu_long(static_cast<int64_t>(r->offset));
  const c10::Device dev = q.device();
  const at::Tensor none = new_empty({0}, at::kLong, dev);
  return AttentionOut{std::move(r->out),
                      std::move(r->lse),
                      none,
                      none,
                      q.sym_size(-2),
                      k.sym_size(-2),
                      seed_t,
                      offset_t,
                      new_empty({0}, q.scalar_type(), dev)};
}

AttentionOut fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& bias, double dropout_p,
                             bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  if (!return_debug_mask) {
    if (auto r = kernel_attention(q, k, v, bias, dropout_p, is_causal, scale)) return *r;
  }
  return composite_attention(q, k, v, bias, dropout_p, is_causal, return_debug_mask, scale);
}

// The backward's dispatches after the forward's kernel ran: stats, dq (and dS), then dk / dv.
struct Backward {
  const Geometry& g;
  at::Tensor q4, k4, v4, mask, dout, out, lse;
  fl::Push p;
  bool causal, dropout;

  bool stats(const at::Tensor& st) const {
    Launch l = flash_launch(fl::OP_PRE, g, q4, mask, causal, dropout);
    l.arg(st, true).arg(lse, false).arg(out, false).arg(dout, false).fill_args(1).push(p);
    l.groups(static_cast<uint32_t>((g.lq + fl::LOCAL - 1) / fl::LOCAL),
             static_cast<uint32_t>(g.b * g.hq));
    return l.run();
  }
  bool dq(const at::Tensor& st, const at::Tensor& gq, const at::Tensor& ds) const {
    Launch l = flash_launch(fl::OP_DQ, g, q4, mask, causal, dropout);
    l.spec(fl::SPEC_BIAS_GRAD, ds.defined() ? 1 : 0);
    l.arg(gq, true).arg(q4, false).arg(k4, false).arg(v4, false);
    l.arg(mask.defined() ? mask : q4, false).arg(st, false).arg(dout, false);
    l.arg(ds.defined() ? ds : st, ds.defined()).push(p);
    l.groups(static_cast<uint32_t>((g.lq + g.rows() - 1) / g.rows()),
             static_cast<uint32_t>(g.b * g.hq));
    return l.run();
  }
  bool dkv(const at::Tensor& st, const at::Tensor& gk, const at::Tensor& gv) const {
    Launch l = flash_launch(fl::OP_DKV, g, q4, mask, causal, dropout);
    l.arg(gk, true).arg(q4, false).arg(k4, false).arg(v4, false);
    l.arg(mask.defined() ? mask : q4, false).arg(st, false).arg(dout, false).arg(gv, true);
    l.push(p).groups(static_cast<uint32_t>((g.lk + g.rows() - 1) / g.rows()),
                     static_cast<uint32_t>(g.b * g.hkv));
    return l.run();
  }
};

// A gradient of a 4-D view back in its input's rank.
at::Tensor rank_of(const at::Tensor& grad, const at::Tensor& input) {
  return input.dim() == 3 ? grad.squeeze(0) : grad;
}

// The backward on the kernels, or nothing (declined). `seed` / `offset`: dropout's stream, as
// the forward's kernel returned it.
std::optional<Grads> kernel_backward(const at::Tensor& grad_out, const at::Tensor& q,
                                     const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& bias, std::array<bool, 4> need,
                                     const at::Tensor& out, const at::Tensor& lse, double dropout_p,
                                     bool is_causal, const at::Tensor& seed,
                                     const at::Tensor& offset, std::optional<double> scale) {
  const bool dropout = dropout_p > 0.0;
  if (!enabled(q.device().index()) || dropout_p >= 1.0) return std::nullopt;
  const std::optional<Geometry> g = geometry(q, k, v, dropout);
  if (!g || grad_out.scalar_type() != q.scalar_type() || out.scalar_type() != q.scalar_type() ||
      lse.scalar_type() != at::kFloat || lse.numel() != g->b * g->hq * g->lq ||
      (dropout && (seed.numel() != 1 || offset.numel() != 1))) {
    return std::nullopt;
  }
  const std::optional<at::Tensor> mask = mask_view(
      bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt, *g, q.scalar_type());
  if (!mask) return std::nullopt;
  const at::Tensor q4 = as4(q), k4 = as4(k), v4 = as4(v);
  const at::Tensor dout = as4(grad_out).contiguous(), o = as4(out).contiguous();
  Backward bw{*g, q4, k4, v4, *mask, dout, o, lse.contiguous(), {}, is_causal, dropout};
  bw.p = flash_push(*g, q4, k4, v4, *mask, at::Tensor(), scale_of(scale, g->d));
  if (dropout) {
    set_dropout(bw.p, dropout_p, static_cast<uint64_t>(seed.item<int64_t>()),
                static_cast<uint64_t>(offset.item<int64_t>()));
  }
  const at::TensorOptions f32 = q.options().dtype(at::kFloat);
  const at::Tensor st = at::empty({g->b * g->hq * g->lq * 2}, f32);
  const at::Tensor gq = at::empty({g->b, g->hq, g->lq, g->d}, q.options());
  const at::Tensor gk = at::empty({g->b, g->hkv, g->lk, g->d}, q.options());
  const at::Tensor gv = at::empty({g->b, g->hkv, g->lk, g->dv}, q.options());
  const bool bias_grad = need[3] && bias.defined() && bias.scalar_type() != at::kBool;
  const at::Tensor ds = bias_grad ? at::zeros({g->b, g->hq, g->lq, g->lk}, f32) : at::Tensor();
  if (!bw.stats(st) || !bw.dq(st, gq, ds) || !bw.dkv(st, gk, gv)) {
    TORCH_CHECK(!dropout, "[torch] fused attention backward on mpsrt: a kernel declined after ",
                "the forward's kernel ran with dropout; its mask cannot be recomputed elsewhere");
    return std::nullopt;
  }
  at::Tensor gbias;
  if (bias_grad) gbias = ds.sum_to_size(bias.sizes()).to(bias.scalar_type());
  return Grads{need[0] ? rank_of(gq, q) : at::Tensor(), need[1] ? rank_of(gk, k) : at::Tensor(),
               need[2] ? rank_of(gv, v) : at::Tensor(), gbias};
}

Grads fused_attention_backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const at::Tensor& bias,
                               std::array<bool, 4> mask, const at::Tensor& out,
                               const at::Tensor& lse, const at::Tensor& cum_seq_q,
                               const at::Tensor& cum_seq_k, int64_t max_q, int64_t max_k,
                               double dropout_p, bool is_causal, const at::Tensor& philox_seed,
                               const at::Tensor& philox_offset, std::optional<double> scale) {
  if (auto r = kernel_backward(grad_out, q, k, v, bias, mask, out, lse, dropout_p, is_causal,
                               philox_seed, philox_offset, scale)) {
    return *r;
  }
  return composite_backward(grad_out, q, k, v, bias, mask, out, lse, cum_seq_q, cum_seq_k, max_q,
                            max_k, dropout_p, is_causal, philox_seed, philox_offset, scale);
}

// Whether q, k, v are what the fused kernel's choice starts from: dense (not nested), with
// concrete sizes, 3-d or more, one head count for all but under grouped-query attention.
bool plain(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool enable_gqa) {
  for (const at::Tensor* t : {&q, &k, &v}) {
    const bool symbolic = t->unsafeGetTensorImpl()->has_symbolic_sizes_strides();
    if (t->is_nested() || symbolic || t->dim() < 3) return false;
  }
  return enable_gqa || q.size(-3) == k.size(-3);
}

// The backend for scaled_dot_product_attention: the fused kernels where the device runs them
// and they take the inputs (the overrideable pair below), else the math path (the device's
// kernels); where the device's ops run as CPU kernels, the CPU's choice.
int64_t sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                   std::optional<double> scale, bool enable_gqa) {
  if (!enabled(q.device().index())) {
    return cpu_choice(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa);
  }
  constexpr auto kMath = static_cast<int64_t>(at::SDPBackend::math);
  if (!plain(q, k, v, enable_gqa) || dropout_p >= 1.0) return kMath;
  const std::optional<Geometry> g = geometry(q, k, v, dropout_p > 0.0);
  if (!g || !mask_ok(mask, *g, q.scalar_type())) return kMath;
  return static_cast<int64_t>(at::SDPBackend::overrideable);
}

// aten::scaled_dot_product_attention, registered above autograd (AutogradPrivateUse1) and below
// it (PrivateUse1, for inference mode). torch's composition of it (its checks, the backend
// choice, the fused op through autograd) cost the host more than the kernel's own enqueueing;
// the common call that the entry may make itself (direct_call: autograd has nothing to do, no
// Python dispatch) with no mask, no dropout, q / k / v of one dtype on one device, what the fused
// kernel's choice takes, runs the forward kernel directly,
// making only its output and log-sum-exp. Everything else (and what the kernel declines) is
// torch's composition (at::native's), raising torch's errors.
at::Tensor sdpa_entry(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                      std::optional<double> scale, bool enable_gqa) {
  if (is_mpsrt(q) && !attn_mask && dropout_p == 0.0 && k.scalar_type() == q.scalar_type() &&
      v.scalar_type() == q.scalar_type() && k.device() == q.device() && v.device() == q.device() &&
      plain(q, k, v, enable_gqa) && enabled(q.device().index()) && direct_call({&q, &k, &v})) {
    if (std::optional<Forward> r = kernel_forward(q, k, v, std::nullopt, 0.0, is_causal, scale)) {
      return r->out;
    }
  }
  return at::native::scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale,
                                                  enable_gqa);
}

namespace A = at::_ops;

void register_entry(torch::Library& m) {
  reg<A::scaled_dot_product_attention, &sdpa_entry>(m);
}

void register_attention(torch::Library& m) {
  reg<A::_transformer_encoder_layer_fwd, &encoder_layer>(m);
  reg<A::_native_multi_head_attention, &multi_head_attention, HostPath::kTyped>(m);
  // The op too (scaled_dot_product_attention asks the stub; callers of torch._fused_sdp_choice
  // get the same answer instead of the CPU's through the fallback). It and the fused-attention
  // pair never decline: they always run here.
  reg<A::_fused_sdp_choice, &sdp_choice>(m);
  reg_listed<A::_scaled_dot_product_fused_attention_overrideable, &fused_attention>(m);
  reg_listed<A::_scaled_dot_product_fused_attention_overrideable_backward,
             &fused_attention_backward>(m);
  // The CPU's flash attention pair (the CPU's choice on host memory, and the fused pair's CPU
  // path above): no device kernel, the typed host path.
  reg<A::_scaled_dot_product_flash_attention_for_cpu, NoKernel, HostPath::kTyped>(m);
  reg<A::_scaled_dot_product_flash_attention_for_cpu_backward, NoKernel, HostPath::kTyped>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::attention

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::attention::register_attention(m);
  mpsrt::torch_glue::ops::attention::register_entry(m);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  mpsrt::torch_glue::ops::attention::register_entry(m);
}

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub,
                              &mpsrt::torch_glue::ops::attention::sdp_choice)
}  // namespace at::native
