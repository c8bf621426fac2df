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
// kernels its math path (matmuls, softmax: the device's kernels); where the device's ops run as
// CPU kernels on host-visible memory, the choice torch makes for the same tensors on the CPU,
// so that the fallback runs torch's fused CPU flash-attention kernel instead of the math
// path's separate batched matmuls and softmax over the whole score matrix.
//
// The fused-attention pair torch leaves to out-of-tree devices (..._overrideable and its
// backward): the CPU's flash attention ops, through the fallback (see fused_attention below).
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/ops/_native_multi_head_attention_ops.h>
#include <ATen/ops/_scaled_dot_product_fused_attention_overrideable_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_fused_attention_overrideable_ops.h>
#include <ATen/ops/_transformer_encoder_layer_fwd_ops.h>

#include <array>
#include <cmath>
#include <optional>
#include <tuple>

#include "device/host_access.h"
#include "ops/common.h"

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
at::Tensor cpu_stand_in(const at::Tensor& t) {
  if (!is_mpsrt(t)) return t;
  if (t.has_storage() && t.storage().data() != nullptr) {
    return host_visible(t.storage()) ? cpu_alias(t) : at::Tensor();
  }
  if (!api().host_visible(t.device().index()) ||
      t.unsafeGetTensorImpl()->has_symbolic_sizes_strides())
    return at::Tensor();
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU));
}

// The CPU's choice where the inputs are host-visible mpsrt memory the fallback runs CPU kernels
// on, else the math path. Called by scaled_dot_product_attention for mpsrt tensors only.
int64_t sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                   std::optional<double> scale, bool enable_gqa) {
  constexpr auto kMath = static_cast<int64_t>(at::SDPBackend::math);
  if (enabled(q.device().index())) return kMath;
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

AttentionOut fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& bias, double dropout_p,
                             bool is_causal, bool return_debug_mask, std::optional<double> scale) {
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

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& bias, std::array<bool, 4> mask, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& /*cum_seq_q*/, const at::Tensor& /*cum_seq_k*/, int64_t /*max_q*/,
    int64_t /*max_k*/, double dropout_p, bool is_causal, const at::Tensor& /*philox_seed*/,
    const at::Tensor& /*philox_offset*/, std::optional<double> scale) {
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

namespace A = at::_ops;

void register_attention(torch::Library& m) {
  reg<A::_transformer_encoder_layer_fwd, &encoder_layer>(m);
  reg<A::_native_multi_head_attention, &multi_head_attention>(m);
  // The op too (scaled_dot_product_attention asks the stub; callers of torch._fused_sdp_choice
  // get the same answer instead of the CPU's through the fallback). It and the fused-attention
  // pair never decline: they always run here.
  reg<A::_fused_sdp_choice, &sdp_choice>(m);
  reg<A::_scaled_dot_product_fused_attention_overrideable, &fused_attention>(m);
  reg<A::_scaled_dot_product_fused_attention_overrideable_backward, &fused_attention_backward>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::attention

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::attention::register_attention(m);
}

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub,
                              &mpsrt::torch_glue::ops::attention::sdp_choice)
}  // namespace at::native
