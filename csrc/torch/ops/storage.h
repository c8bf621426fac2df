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

// A new tensor on mpsrt device `device` (contiguous, or in memory format `mf`): the device's
// empty_memory_format called directly, for the outputs and scratch an op's kernel makes below
// the dispatcher (at::empty's dispatch is a quarter of a small allocation's host cost).
at::Tensor new_empty(c10::IntArrayRef size, at::ScalarType dtype, c10::Device device,
                     at::MemoryFormat mf = at::MemoryFormat::Contiguous);

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> mf);

}  // namespace mpsrt::torch_glue
