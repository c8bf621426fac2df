// Convolutions on the mpsrt device. torch sends every convolution of an out-of-tree device
// (Conv1d/2d/3d, transposed, grouped, dilated) to convolution_overrideable and its gradient to
// convolution_backward_overrideable, which have kernels for no device of torch's own, so the
// fallback, which runs an op's CPU kernel, finds none. They are the generic convolution ops
// under other names: the same arguments as aten::convolution, and as aten::convolution_backward
// less its bias_sizes. Each runs here as that op's CPU kernel through the fallback (CPU tensors
// aliasing the device memory where it is host-visible, staged host copies where it is
// discrete), so torch's CPU convolutions (oneDNN, the slow paths) compute it and the outputs are
// device memory; counted by the fallback under the generic op's name.
//
// Memory format: torch decides an out-of-tree device's convolution outputs are contiguous
// (_conv_determine_backend_memory_format for its Overrideable backend; torch.compile's fake
// tensors say so), while the CPU's kernels keep a channels-last input's format. The outputs
// here follow torch's rule, so eager and compiled code see the same strides.
#include <ATen/core/Tensor.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/convolution_backward_overrideable_ops.h>
#include <ATen/ops/convolution_overrideable_ops.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>
#include <vector>

#include "fallback/fallback.h"
#include "ops/register.h"

namespace mpsrt::torch_glue::ops::conv {
namespace {

// A result made contiguous where the CPU kernel kept another format.
at::Tensor contiguous(const c10::IValue& v) {
  const at::Tensor& t = v.toTensor();
  return t.defined() && !t.is_contiguous() ? t.contiguous() : t;
}

// convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
// output_padding, groups) -> Tensor: aten::convolution's arguments exactly.
at::Tensor forward(const at::Tensor& input, const at::Tensor& weight,
                   const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                   c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                   c10::IntArrayRef output_padding, int64_t groups) {
  torch::jit::Stack s = c10::impl::boxArgs(input, weight, bias, stride, padding, dilation,
                                           transposed, output_padding, groups);
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
  cpu_fallback(op, &s);
  return contiguous(s.back());
}

// convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
// transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias):
// aten::convolution_backward's arguments less bias_sizes (after weight), which only says
// whether and how big a bias gradient to make: the output channels, as output_mask[2] asks.
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  const std::vector<int64_t> bias_sizes{channels};
  torch::jit::Stack s =
      c10::impl::boxArgs(grad_output, input, weight, c10::IntArrayRef(bias_sizes), stride, padding,
                         dilation, transposed, output_padding, groups, output_mask);
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", "");
  cpu_fallback(op, &s);
  return {contiguous(s[0]), contiguous(s[1]), contiguous(s[2])};
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::conv

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  namespace c = mpsrt::torch_glue::ops::conv;
  using mpsrt::torch_glue::ops::reg;
  reg<at::_ops::convolution_overrideable, &c::forward>(m);
  reg<at::_ops::convolution_backward_overrideable, &c::backward>(m);
}
