// What other families take from the element-wise family (elementwise.cpp).
#pragma once

#include <ATen/core/Tensor.h>

namespace mpsrt::torch_glue::ops::elementwise {

// dst.copy_(src)'s bytes on the elementwise kernel (TensorIterator's geometry: broadcasting,
// strides, any pair of the kernel's dtypes); false where it cannot (nothing was launched).
[[nodiscard]] bool copy(const at::Tensor& dst, const at::Tensor& src);

}  // namespace mpsrt::torch_glue::ops::elementwise
