// Hot ops of real models that have no device kernel yet and no composite kernel (which the device
// would run instead): registered for the typed host path (register.h) so that, on host-visible
// memory, their CPU kernels run on borrowed aliases without boxing; elsewhere the fallback.
#include <ATen/core/Tensor.h>
#include <ATen/ops/hardsigmoid_ops.h>
#include <ATen/ops/roll_ops.h>
#include <torch/library.h>

#include "ops/register.h"

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  namespace ops = mpsrt::torch_glue::ops;
  namespace A = at::_ops;
  constexpr ops::HostPath kTyped = ops::HostPath::kTyped;
  ops::reg<A::hardsigmoid, ops::NoKernel, kTyped>(m);
  ops::reg<A::roll, ops::NoKernel, kTyped>(m);
}
