// The PyTorch device "mpsrt" (PrivateUse1): the glue torch calls. `import mpsrt.torch` compiles
// every .cpp under this folder into one library against the installed torch
// (mpsrt/torch/_glue.py: one translation unit; each file keeps its names in its own namespace)
// and calls mpsrt_torch::_init (below) with the address of the library's C API table
// (mpsrt_c_api(), csrc/c_api/), which mpsrt._C exports as the capsule mpsrt._C._c_api over the
// runtime it holds: the glue's only way into it (docs/torch-device.md, "One runtime per process").
//
// The folder, by role:
//   device/    the device runtime glue: runtime_client.* (the C API table and mpsrt's errors,
//              devices and streams for torch), allocator.* (a c10::DeviceAllocator over mpsrt's
//              caching allocator; pinned host memory), guard.cpp (DeviceGuardImpl: devices,
//              streams, events), generator.* (torch.Generators that are mpsrt's Philox
//              generators), hooks.* (the PrivateUse1 hooks), host_access.* (the host's access to
//              mpsrt memory in both memory models), autocast.cpp, profiler_stubs.cpp
//   fallback/  the boxed fallback: every other aten op's CPU kernel on CPU tensors aliasing the
//              device memory (staged host copies on discrete memory), counted per op
//   ops/       the operators, one file per op family (elementwise, reduce, norm, gemm,
//              attention, index, loss, optim, rnn, conv, copy, random, storage, composite);
//              common.h (forms, narrowing, dtype acceptors), register.h (the one registration
//              path: a typed kernel per op that runs or declines, then the typed host path or
//              the fallback), launch.* (where ops run, kernel launches)
// The kernels the ops launch live in csrc/kernels/<family>/ with their interface headers.
//
// Memory models: see device/host_access.h.
#include <torch/library.h>

#include <cstdint>

#include "device/hooks.h"
#include "device/runtime_client.h"
#include "fallback/fallback.h"
#include "ops/launch.h"
#include "ops/register.h"

namespace mpsrt::torch_glue {
namespace {

void init(int64_t api_address) {
  use_table(reinterpret_cast<const MpsrtCApi*>(static_cast<intptr_t>(api_address)));
  static bool hooks_registered = [] {
    register_hooks();
    install_capture_allocator();
    return true;
  }();
  (void)hooks_registered;
}

}  // namespace

TORCH_LIBRARY(mpsrt_torch, m) {
  m.def("_init(int api) -> ()", &init);
  m.def("_fallback_counts() -> int[]", &fallback_counts);
  m.def("_fallback_op_counts() -> Dict(str, int)", &fallback_op_counts);
  m.def("_reset_fallback_counts() -> ()", &reset_fallback_counts);
  m.def("_set_kernels(str mode) -> str", &ops::set_mode);
  m.def("_default_stream(int device) -> int",
        [](int64_t d) { return torch_stream(api().stream_default(static_cast<int>(d))).id(); });
  m.def("_kernel_ops() -> str[]", &ops::kernel_ops);
  m.def("_kernels_enabled(int device) -> bool",
        [](int64_t d) { return ops::enabled(static_cast<c10::DeviceIndex>(d)); });
}

}  // namespace mpsrt::torch_glue
