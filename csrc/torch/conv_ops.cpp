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
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <vector>

#include "fallback.h"

namespace mpsrt::torch_glue {
namespace {

c10::OperatorHandle generic_conv_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

// The last `outputs` results on the stack, made contiguous where the CPU kernel kept another
// format (grad_bias, the third of the backward's, is 1-d: contiguous).
void contiguous_results(torch::jit::Stack* stack, size_t outputs) {
  for (auto it = stack->end() - outputs; it != stack->end(); ++it) {
    if (!it->isTensor()) continue;
    const at::Tensor& t = it->toTensor();
    if (t.defined() && !t.is_contiguous()) *it = t.contiguous();
  }
}

// convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
// output_padding, groups) -> Tensor: aten::convolution's arguments exactly.
void conv_forward_kernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static const c10::OperatorHandle op = generic_conv_op("aten::convolution");
  cpu_fallback(op, stack);
  contiguous_results(stack, 1);
}

// convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
// transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias):
// aten::convolution_backward's arguments less bias_sizes (its 4th), which only says whether and
// how big a bias gradient to make: the output channels, as output_mask[2] asks.
void conv_backward_kernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static const c10::OperatorHandle op = generic_conv_op("aten::convolution_backward");
  constexpr size_t kArgs = 10;
  auto args = stack->end() - kArgs;
  const at::Tensor weight = args[2].toTensor();
  const bool transposed = args[6].toBool();
  const int64_t groups = args[8].toInt();
  const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  stack->insert(args + 3, c10::IValue(std::vector<int64_t>{channels}));
  cpu_fallback(op, stack);
  contiguous_results(stack, 3);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&conv_forward_kernel>());
  m.impl("convolution_backward_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&conv_backward_kernel>());
}

}  // namespace mpsrt::torch_glue
