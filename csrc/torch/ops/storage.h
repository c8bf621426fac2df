// The mpsrt device's operators on storage and geometry, which never touch the bytes: the
// factories (mpsrt's allocator), as_strided and the per-device views, resize_ and set_. The
// copies and the fallback make tensors with the ones declared here.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace mpsrt::torch_glue {

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout>, std::optional<at::Device> device,
                               std::optional<bool>, std::optional<at::MemoryFormat> mf);

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                         std::optional<at::Device> device, std::optional<bool>);

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> mf);

}  // namespace mpsrt::torch_glue
