// The PyTorch device "mpsrt" (PrivateUse1): the glue torch calls. `import mpsrt.torch` compiles
// the files of this folder as one translation unit (mpsrt/torch/_glue.py: file-local names are
// distinct across the files) against the installed torch
// (torch.utils.cpp_extension.load), loads the library with torch.ops.load_library and calls
// mpsrt_torch::_init (below) with the address of mpsrt's C API table (the capsule
// mpsrt._C._c_api). Everything here reaches the runtime through that table only
// (include/mpsrt/c_api.h): the process keeps ONE runtime, the one mpsrt._C holds.
//
// What it registers, one file per part:
//   runtime.*      the C API table (taken here) and mpsrt's errors, devices and streams for torch
//   allocator.*    a c10::DeviceAllocator over mpsrt's caching allocator; pinned host memory
//   guard.cpp      the DeviceGuardImpl: devices, torch.Stream <-> mpsrt streams, torch.Event <->
//                  mpsrt events
//   generator.*    torch.Generators that are mpsrt's Philox generators
//   hooks.*        the PrivateUse1 hooks (registered here): devices, generators, pinned memory
//   host_access.*  the host's access to mpsrt memory in both memory models (aliases, staging)
//   storage_ops.*  empty/empty_strided/as_strided/resize_/set_ and the per-device views (view,
//                  _reshape_alias, unfold, view_as_real/complex), native
//   copy_ops.cpp   host<->device and device-to-device copies, fills (fill_, zero_) on mpsrt's
//                  kernels on the current stream, _local_scalar_dense
//   random_ops.cpp the random ops (uniform_, normal_, random_, bernoulli_, native_dropout) on
//                  mpsrt's kernels on the current stream
//   kernels.*      the device-kernel layer: where ops run (MPSRT_TORCH_KERNELS), tensors as
//                  kernel arguments, launches, registration with the fallback behind each kernel
//   elementwise_ops.cpp  element-wise ops on the elementwise kernel (TensorIterator geometry)
//   fallback.*     a boxed fallback that runs every other aten operator's CPU kernel on CPU
//                  tensors that alias the device memory (host copies of it on discrete memory),
//                  after the current stream's queued work, counted per op,
//                  with the CPU allocations it makes served by mpsrt (its CPU allocator is
//                  installed here), each op a named interval in an mpsrt profiler session
//   autocast.cpp   torch.autocast("mpsrt")
//
// Memory models (mpsrt's DeviceProperties::unified_memory). Unified: the storage's data pointer
// is the host address of the memory and everything above aliases it. Discrete: the data pointer
// is the memory's device address, which the host cannot dereference; host <-> device copies go
// through mpsrt's staging path (C API buffer_copy_to_host / buffer_copy_from_host), fills and
// random ops that mpsrt's kernels cannot do directly (strided tensors, other dtypes) work on a
// host copy of the bytes they touch, and the boxed fallback runs the CPU kernel on host copies
// of the op's tensors (staged in, written back), warning once per op.
#include <torch/library.h>

#include <cstdint>

#include "fallback.h"
#include "hooks.h"
#include "kernels.h"
#include "runtime.h"

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
  m.def("_set_kernels(str mode) -> str", &kernels::set_mode);
  m.def("_kernels_forget() -> ()", &kernels::forget);
  m.def("_default_stream(int device) -> int",
        [](int64_t d) { return torch_stream(api().stream_default(static_cast<int>(d))).id(); });
  m.def("_kernel_ops() -> str[]", &kernels::kernel_ops);
  m.def("_kernels_enabled(int device) -> bool",
        [](int64_t d) { return kernels::enabled(static_cast<c10::DeviceIndex>(d)); });
}

}  // namespace mpsrt::torch_glue
