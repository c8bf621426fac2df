// torch's PrivateUse1 hooks for the mpsrt device (devices, generators, pinned memory, storage
// growth): registered once by `_init` (module.cpp).
#pragma once

namespace mpsrt::torch_glue {

void register_hooks();

}  // namespace mpsrt::torch_glue
