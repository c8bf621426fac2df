// torch's fused RNN cells on the mpsrt device: ops torch dispatches to a device only (nn.LSTM,
// nn.GRU, LSTMCell and GRUCell call them for CUDA, XPU and PrivateUse1 tensors; the CPU has no
// kernel for them, so the fallback cannot run them). Each is the composition of aten ops that
// torch's CUDA kernels compute element by element (aten/src/ATen/native/cuda/RNN.cu), with the
// same workspace layouts, so that torch's autograd formulas (which call the backward ops with
// these workspaces) work unchanged:
//   _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, b_ih?, b_hh?) -> (hy, cy, workspace):
//     gates = input_gates + hidden_gates (+ b_ih + b_hh), chunks i, f, g, o along dim 1;
//     i, f, o sigmoid, g tanh; cy = f * cx + i * g; hy = o * tanh(cy);
//     workspace [B, 4H] = (i, f, g, o) after their activations.
//   _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
//     -> (grad_gates [B, 4H], grad_cx, grad_bias = grad_gates.sum(0) when has_bias).
//   _thnn_fused_gru_cell(input_gates, hidden_gates, hx, b_ih?, b_hh?) -> (hy, workspace):
//     chunks r, z, n; r = sigmoid(i_r + h_r), z = sigmoid(i_z + h_z) (biases added),
//     n = tanh(i_n + b_in + r * (h_n + b_hn)); hy = n + z * (hx - n);
//     workspace [B, 5H] = (r, z, n, hx, h_n + b_hn).
//   _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)
//     -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_b_ih?, grad_b_hh?).
// Half and bfloat16 compute in float, as the CUDA kernels do (their accumulate type), and give
// their results in the input's dtype. The aten ops run on the device's kernels or through the
// fallback, as every other op.
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/core/stack.h>
#include <ATen/ops/add.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/rnn_relu_native.h>
#include <ATen/ops/rnn_tanh_native.h>
#include <ATen/ops/rsub.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/ops/_thnn_fused_gru_cell_backward_ops.h>
#include <ATen/ops/_thnn_fused_gru_cell_ops.h>
#include <ATen/ops/_thnn_fused_lstm_cell_backward_impl_ops.h>
#include <ATen/ops/_thnn_fused_lstm_cell_ops.h>
#include <ATen/ops/gru_ops.h>
#include <ATen/ops/lstm_ops.h>
#include <ATen/ops/rnn_relu_ops.h>
#include <ATen/ops/rnn_tanh_ops.h>

#include "device/host_access.h"
#include "fallback/fallback.h"
#include "ops/common.h"

// A packed sequence's batch sizes are a CPU tensor (torch.cuda's recurrent nets take them so).
namespace mpsrt::torch_glue::ops::detail {
template <>
struct TakesCpuTensors<at::_ops::lstm_data> : std::true_type {};
template <>
struct TakesCpuTensors<at::_ops::gru_data> : std::true_type {};
template <>
struct TakesCpuTensors<at::_ops::rnn_tanh_data> : std::true_type {};
template <>
struct TakesCpuTensors<at::_ops::rnn_relu_data> : std::true_type {};
}  // namespace mpsrt::torch_glue::ops::detail

namespace mpsrt::torch_glue::ops::rnn {
namespace {

using OptTensor = std::optional<at::Tensor>;

at::ScalarType math_type(const at::Tensor& t) {
  return at::toOpMathType(t.scalar_type());
}

// t in the computation's dtype (float for half and bfloat16); undefined stays undefined.
at::Tensor in_math(const at::Tensor& t, at::ScalarType math) {
  return t.defined() && t.scalar_type() != math ? t.to(math) : t;
}

at::Tensor in_math(const OptTensor& t, at::ScalarType math) {
  return t && t->defined() ? in_math(*t, math) : at::Tensor();
}

// A result back in the inputs' dtype.
at::Tensor out_as(const at::Tensor& t, at::ScalarType dtype) {
  return t.defined() && t.scalar_type() != dtype ? t.to(dtype) : t;
}

// The checks of torch's CUDA kernels (checkSizes), with what was expected: gates [B, factor*H]
// of one size, biases 1-D of factor*H elements (both or neither), the previous state [B, H].
void check_cell(const char* op, const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                const OptTensor& input_bias, const OptTensor& hidden_bias, int64_t factor,
                const at::Tensor& prev) {
  TORCH_CHECK(input_gates.dim() == 2, op, ": input_gates must be 2-D [batch, ", factor,
              " * hidden_size], got ", input_gates.sizes());
  TORCH_CHECK(hidden_gates.sizes() == input_gates.sizes(), op,
              ": hidden_gates must have input_gates' size ", input_gates.sizes(), ", got ",
              hidden_gates.sizes());
  const int64_t gates = input_gates.size(1);
  const bool ib = input_bias && input_bias->defined(), hb = hidden_bias && hidden_bias->defined();
  TORCH_CHECK(ib == hb, op, ": input_bias and hidden_bias must be given together");
  if (ib) {
    TORCH_CHECK(input_bias->dim() == 1 && input_bias->numel() == gates, op,
                ": input_bias must be 1-D of ", gates, " elements, got ", input_bias->sizes());
    TORCH_CHECK(hidden_bias->sizes() == input_bias->sizes(), op,
                ": hidden_bias must have input_bias' size ", input_bias->sizes(), ", got ",
                hidden_bias->sizes());
  }
  TORCH_CHECK(prev.dim() == 2 && prev.numel() * factor == input_gates.size(0) * gates, op,
              ": the previous state must be 2-D [batch, hidden_size] with ",
              input_gates.size(0) * gates / factor, " elements, got ", prev.sizes());
  TORCH_CHECK(
      input_gates.device() == hidden_gates.device() && prev.device() == input_gates.device(), op,
      ": every tensor must be on one device");
}

// gates + bias (an undefined bias adds nothing).
at::Tensor plus_bias(const at::Tensor& gates, const at::Tensor& bias) {
  return bias.defined() ? at::add(gates, bias) : gates;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates,
                                                         const at::Tensor& hidden_gates,
                                                         const at::Tensor& cx,
                                                         const OptTensor& input_bias,
                                                         const OptTensor& hidden_bias) {
  check_cell("_thnn_fused_lstm_cell", input_gates, hidden_gates, input_bias, hidden_bias, 4, cx);
  const auto dtype = input_gates.scalar_type();
  const auto math = math_type(input_gates);
  // In CUDA's order: input + hidden + input bias + hidden bias.
  at::Tensor gates = at::add(in_math(input_gates, math), in_math(hidden_gates, math));
  gates = plus_bias(plus_bias(gates, in_math(input_bias, math)), in_math(hidden_bias, math));
  const int64_t h = cx.size(1);
  // The workspace: every gate's sigmoid, then the cell gate's tanh in its place.
  at::Tensor workspace = at::sigmoid(gates);
  workspace.narrow(1, 2 * h, h).copy_(at::tanh(gates.narrow(1, 2 * h, h)));
  const at::Tensor ig = workspace.narrow(1, 0, h), fg = workspace.narrow(1, h, h);
  const at::Tensor cg = workspace.narrow(1, 2 * h, h), og = workspace.narrow(1, 3 * h, h);
  at::Tensor cy = at::mul(fg, in_math(cx, math)).add_(at::mul(ig, cg));
  at::Tensor hy = at::mul(og, at::tanh(cy));
  return {out_as(hy, dtype), out_as(cy, dtype), out_as(workspace, dtype)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(
    const OptTensor& grad_hy_opt, const OptTensor& grad_cy_opt, const at::Tensor& cx_in,
    const at::Tensor& cy_in, const at::Tensor& workspace_in, bool has_bias) {
  const bool has_hy = grad_hy_opt && grad_hy_opt->defined();
  const bool has_cy = grad_cy_opt && grad_cy_opt->defined();
  if (!has_hy && !has_cy) return {};
  const char* op = "_thnn_fused_lstm_cell_backward_impl";
  const at::Tensor& defined = has_hy ? *grad_hy_opt : *grad_cy_opt;
  TORCH_CHECK(defined.dim() == 2, op, ": the gradients must be 2-D [batch, hidden_size], got ",
              defined.sizes());
  TORCH_CHECK(!has_hy || !has_cy || grad_hy_opt->sizes() == grad_cy_opt->sizes(), op,
              ": grad_hy and grad_cy must have one size");
  TORCH_CHECK(cx_in.sizes() == defined.sizes() && cy_in.sizes() == defined.sizes(), op,
              ": cx and cy must have the gradients' size ", defined.sizes());
  TORCH_CHECK(workspace_in.dim() == 2 && workspace_in.numel() == defined.numel() * 4, op,
              ": workspace must be 2-D [batch, 4 * hidden_size], got ", workspace_in.sizes());
  const auto dtype = workspace_in.scalar_type();
  const auto math = math_type(workspace_in);
  const at::Tensor ws = in_math(workspace_in, math), cx = in_math(cx_in, math);
  const int64_t h = cx.size(1);
  const at::Tensor ig = ws.narrow(1, 0, h), fg = ws.narrow(1, h, h);
  const at::Tensor cg = ws.narrow(1, 2 * h, h), og = ws.narrow(1, 3 * h, h);
  const at::Tensor tcy = at::tanh(in_math(cy_in, math));
  // d(cy) = grad_hy * o * (1 - tanh(cy)^2) + grad_cy; d(o) before its sigmoid's derivative.
  at::Tensor gcx, gog;
  if (has_hy) {
    const at::Tensor go = in_math(*grad_hy_opt, math);
    gog = at::mul(go, tcy);
    gcx = at::mul(go, og).mul_(at::mul(tcy, tcy).neg_().add_(1));
    if (has_cy) gcx.add_(in_math(*grad_cy_opt, math));
  } else {
    gog = at::zeros_like(tcy);
    gcx = in_math(*grad_cy_opt, math);
  }
  // sigmoid' = s (1 - s), tanh' = 1 - t^2
  auto dsig = [](const at::Tensor& s) { return at::mul(s, at::rsub(s, 1)); };
  const at::Tensor gig = at::mul(gcx, cg).mul_(dsig(ig));
  const at::Tensor gfg = at::mul(gcx, cx).mul_(dsig(fg));
  const at::Tensor gcg = at::mul(gcx, ig).mul_(at::mul(cg, cg).neg_().add_(1));
  gog = at::mul(gog, dsig(og));
  const at::Tensor grad_gates = at::cat({gig, gfg, gcg, gog}, 1);
  const at::Tensor grad_cx = at::mul(gcx, fg);
  at::Tensor grad_bias = has_bias ? at::sum(grad_gates, 0) : at::Tensor();
  return {out_as(grad_gates, dtype), out_as(grad_cx, dtype), out_as(grad_bias, dtype)};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates,
                                            const at::Tensor& hidden_gates, const at::Tensor& hx,
                                            const OptTensor& input_bias,
                                            const OptTensor& hidden_bias) {
  check_cell("_thnn_fused_gru_cell", input_gates, hidden_gates, input_bias, hidden_bias, 3, hx);
  const auto dtype = input_gates.scalar_type();
  const auto math = math_type(input_gates);
  const at::Tensor ig_in = plus_bias(in_math(input_gates, math), in_math(input_bias, math));
  const at::Tensor hg_in = plus_bias(in_math(hidden_gates, math), in_math(hidden_bias, math));
  const at::Tensor h0 = in_math(hx, math);
  const int64_t h = hx.size(1);
  // r and z: one sigmoid over the first two chunks of both.
  const at::Tensor rz = at::sigmoid(at::add(ig_in.narrow(1, 0, 2 * h), hg_in.narrow(1, 0, 2 * h)));
  const at::Tensor rg = rz.narrow(1, 0, h), zg = rz.narrow(1, h, h);
  const at::Tensor hn = hg_in.narrow(1, 2 * h, h);  // h_n + b_hn
  const at::Tensor ng = at::tanh(at::add(ig_in.narrow(1, 2 * h, h), at::mul(rg, hn)));
  at::Tensor hy = at::add(ng, at::mul(zg, at::sub(h0, ng)));
  at::Tensor workspace = at::cat({rg, zg, ng, h0, hn}, 1);
  return {out_as(hy, dtype), out_as(workspace, dtype)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace_in, bool has_bias) {
  const char* op = "_thnn_fused_gru_cell_backward";
  TORCH_CHECK(grad_hy.dim() == 2, op, ": grad_hy must be 2-D [batch, hidden_size], got ",
              grad_hy.sizes());
  TORCH_CHECK(workspace_in.dim() == 2 && workspace_in.size(0) == grad_hy.size(0) &&
                  workspace_in.size(1) == grad_hy.size(1) * 5,
              op, ": workspace must be [", grad_hy.size(0), ", ", grad_hy.size(1) * 5,
              "] (batch, 5 * hidden_size), got ", workspace_in.sizes());
  const auto dtype = grad_hy.scalar_type();
  const auto math = math_type(grad_hy);
  const at::Tensor ws = in_math(workspace_in, math), go = in_math(grad_hy, math);
  const int64_t h = grad_hy.size(1);
  const at::Tensor rg = ws.narrow(1, 0, h), zg = ws.narrow(1, h, h), ng = ws.narrow(1, 2 * h, h);
  const at::Tensor hx = ws.narrow(1, 3 * h, h), hn = ws.narrow(1, 4 * h, h);
  const at::Tensor one_minus_z = at::rsub(zg, 1);
  const at::Tensor gzg = at::mul(go, at::sub(hx, ng)).mul_(one_minus_z).mul_(zg);
  const at::Tensor ghx = at::mul(go, zg);
  const at::Tensor gin = at::mul(go, one_minus_z).mul_(at::mul(ng, ng).neg_().add_(1));
  const at::Tensor ghn = at::mul(gin, rg);
  const at::Tensor grg = at::mul(gin, hn).mul_(at::rsub(rg, 1)).mul_(rg);
  const at::Tensor grad_input_gates = at::cat({grg, gzg, gin}, 1);
  const at::Tensor grad_hidden_gates = at::cat({grg, gzg, ghn}, 1);
  at::Tensor grad_input_bias, grad_hidden_bias;
  if (has_bias) {
    grad_input_bias = at::sum(grad_input_gates, 0);
    grad_hidden_bias = at::sum(grad_hidden_gates, 0);
  }
  return {out_as(grad_input_gates, dtype), out_as(grad_hidden_gates, dtype), out_as(ghx, dtype),
          out_as(grad_input_bias, dtype), out_as(grad_hidden_bias, dtype)};
}

// ------------------------------------------------------------------ whole recurrent nets
// nn.LSTM, nn.GRU and nn.RNN call aten::lstm, gru, rnn_tanh and rnn_relu, which torch composes
// for a device out of per-step cells: about ten ops a step and layer (the fused cells above, the
// gates' matrix products), each a kernel launch, or a CPU kernel through the fallback where the
// device runs none of its own. There the whole op runs instead as the CPU's (one op through the
// fallback: in stream order, on CPU tensors aliasing the device memory, its outputs in device
// memory; torch's CPU path, oneDNN's fused LSTM where it applies), when:
//   - the device runs no kernels of its own and its memory is host-visible (else the
//     composition, on the device's kernels or staged op by op);
//   - nothing needs a gradient: autograd differentiates the composition, not the CPU's op;
//   - no dropout draws random numbers (train with dropout > 0: the CPU's generator would draw
//     them, not the device's).
// Registered for PrivateUse1 and AutogradPrivateUse1 (where the composition would otherwise
// run), so that inference mode, which skips autograd's keys, takes it too.
bool host_usable(const at::Tensor& t, bool grad) {
  return !(grad && t.requires_grad()) && (!is_mpsrt(t) || host_visible(t.storage()));
}

bool whole_net_on_host(const at::Tensor& input, at::TensorList state, at::TensorList params,
                       double dropout, bool train) {
  if ((train && dropout > 0) || !is_mpsrt(input) || enabled(input.device().index())) return false;
  const bool grad = at::GradMode::is_enabled();
  if (!host_usable(input, grad)) return false;
  for (const auto& t : state)
    if (!host_usable(t, grad)) return false;
  for (const auto& t : params)
    if (!host_usable(t, grad)) return false;
  return true;
}

// The op's CPU kernel on its arguments' stand-ins (register.h's typed host path: no boxing,
// the parameters' kept stand-ins), or the boxed fallback where that path cannot take them.
template <class Op, class... Args>
auto on_host(const Args&... args) {
  return detail::Entry<Op, NoKernel, HostPath::kTyped>::call(args...);
}

using Three = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Two = std::tuple<at::Tensor, at::Tensor>;

Three lstm_input(const at::Tensor& input, at::TensorList hx, at::TensorList params, bool has_biases,
                 int64_t num_layers, double dropout, bool train, bool bidirectional,
                 bool batch_first) {
  if (!whole_net_on_host(input, hx, params, dropout, train))
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train,
                            bidirectional, batch_first);
  return on_host<at::_ops::lstm_input>(input, hx, params, has_biases, num_layers, dropout, train,
                                       bidirectional, batch_first);
}

Three lstm_data(const at::Tensor& data, const at::Tensor& batch_sizes, at::TensorList hx,
                at::TensorList params, bool has_biases, int64_t num_layers, double dropout,
                bool train, bool bidirectional) {
  if (!whole_net_on_host(data, hx, params, dropout, train))
    return at::native::lstm(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train,
                            bidirectional);
  return on_host<at::_ops::lstm_data>(data, batch_sizes, hx, params, has_biases, num_layers,
                                      dropout, train, bidirectional);
}

// gru, rnn_tanh and rnn_relu: one state tensor, two returns (output, the last state).
using InputNet = Two (*)(const at::Tensor&, const at::Tensor&, at::TensorList, bool, int64_t,
                         double, bool, bool, bool);
using DataNet = Two (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::TensorList,
                        bool, int64_t, double, bool, bool);

// A net's ops (the CPU's kernels) and torch's composition of it, as a template argument.
struct GruName {
  using InputOp = at::_ops::gru_input;
  using DataOp = at::_ops::gru_data;
  static constexpr InputNet input = &at::native::gru;
  static constexpr DataNet data = &at::native::gru;
};
struct RnnTanhName {
  using InputOp = at::_ops::rnn_tanh_input;
  using DataOp = at::_ops::rnn_tanh_data;
  static constexpr InputNet input = &at::native::rnn_tanh;
  static constexpr DataNet data = &at::native::rnn_tanh;
};
struct RnnReluName {
  using InputOp = at::_ops::rnn_relu_input;
  using DataOp = at::_ops::rnn_relu_data;
  static constexpr InputNet input = &at::native::rnn_relu;
  static constexpr DataNet data = &at::native::rnn_relu;
};

template <class Net>
Two net_input(const at::Tensor& input, const at::Tensor& hx, at::TensorList params, bool has_biases,
              int64_t num_layers, double dropout, bool train, bool bidirectional,
              bool batch_first) {
  if (!whole_net_on_host(input, hx, params, dropout, train))
    return Net::input(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                      batch_first);
  return on_host<typename Net::InputOp>(input, hx, params, has_biases, num_layers, dropout, train,
                                        bidirectional, batch_first);
}

template <class Net>
Two net_data(const at::Tensor& data, const at::Tensor& batch_sizes, const at::Tensor& hx,
             at::TensorList params, bool has_biases, int64_t num_layers, double dropout, bool train,
             bool bidirectional) {
  if (!whole_net_on_host(data, hx, params, dropout, train))
    return Net::data(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train,
                     bidirectional);
  return on_host<typename Net::DataOp>(data, batch_sizes, hx, params, has_biases, num_layers,
                                       dropout, train, bidirectional);
}

void register_whole_nets(torch::Library& m) {
  namespace A = at::_ops;
  reg<A::lstm_input, &lstm_input>(m);
  reg<A::lstm_data, &lstm_data>(m);
  reg<A::gru_input, &net_input<GruName>>(m);
  reg<A::gru_data, &net_data<GruName>>(m);
  reg<A::rnn_tanh_input, &net_input<RnnTanhName>>(m);
  reg<A::rnn_tanh_data, &net_data<RnnTanhName>>(m);
  reg<A::rnn_relu_input, &net_input<RnnReluName>>(m);
  reg<A::rnn_relu_data, &net_data<RnnReluName>>(m);
}

void register_cells(torch::Library& m) {
  namespace A = at::_ops;
  reg<A::_thnn_fused_lstm_cell, &lstm_cell>(m);
  reg<A::_thnn_fused_lstm_cell_backward_impl, &lstm_cell_backward>(m);
  reg<A::_thnn_fused_gru_cell, &gru_cell>(m);
  reg<A::_thnn_fused_gru_cell_backward, &gru_cell_backward>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::rnn

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  mpsrt::torch_glue::ops::rnn::register_whole_nets(m);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::rnn::register_whole_nets(m);
  mpsrt::torch_glue::ops::rnn::register_cells(m);
}
