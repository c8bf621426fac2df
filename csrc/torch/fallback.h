// The boxed fallback of the mpsrt device: every aten operator without a kernel of its own runs
// its CPU kernel on CPU tensors that alias the device memory (fallback.cpp). What module.cpp
// needs of it: the CPU allocator it installs and its counters.
#pragma once

#include <cstdint>
#include <vector>

namespace mpsrt::torch_glue {

// Installs the CPU allocator through which the CPU kernels the fallback runs allocate their new
// outputs in mpsrt memory (once, at `_init`).
void install_capture_allocator();

// What the fallback did, for tests and tuning (torch.ops.mpsrt_torch._fallback_counts()):
// operators run, new outputs that were already mpsrt memory, new outputs copied into it.
std::vector<int64_t> fallback_counts();

}  // namespace mpsrt::torch_glue
