// Typed host kernels of the ops models call most (host_ops.cpp): the fallback's run of the CPU
// kernel (fallback.h) without its boxing, for calls whose mpsrt tensors are host-visible memory
// of one device and that no device kernel takes.
#pragma once

#include <torch/library.h>

#include <optional>

namespace mpsrt::torch_glue::host_ops {

// The typed kernel of op `name` ("addmm", "add.Tensor") where it has one: kernels::impl
// registers it instead of the boxed kernel (its slow path calls kernels::run_boxed).
std::optional<torch::CppFunction> typed_kernel(const char* name);

}  // namespace mpsrt::torch_glue::host_ops
