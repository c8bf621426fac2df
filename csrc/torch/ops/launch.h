// The launch layer of the mpsrt device's ops: where they run on mpsrt's kernels
// (MPSRT_TORCH_KERNELS and the device), how a tensor becomes a kernel argument, and a launch of
// one kernel (csrc/kernels/, C API kernel_launch). How an op is registered: register.h.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "device/runtime_client.h"

namespace mpsrt::torch_glue::ops {

// Whether device d's operators run on mpsrt's kernels: the device has them and
// MPSRT_TORCH_KERNELS (or set_mode) asks for them there (auto: not on CPU-type devices).
// Cost: two loads after the device's first call in a runtime generation.
bool enabled(c10::DeviceIndex d);

// What an op asks of device d before it runs, in one look-up: whether its operators run on
// mpsrt's kernels (enabled()), whether its memory is host memory (the unified memory model: the
// host addresses every mpsrt tensor of it), and the runtime generation that holds for.
struct DeviceMode {
  bool kernels;
  bool unified;
  uint64_t generation;
};
DeviceMode device_mode(c10::DeviceIndex d);

// The mode in force for every device ("auto", "device" or "cpu"; MPSRT_TORCH_KERNELS until
// set); set_mode returns the previous one (torch.mpsrt._set_kernels). A bad value raises
// ValueError naming the values.
std::string mode();
std::string set_mode(const std::string& mode);

// mpsrt/dtype.h's id (MPSRT_DTYPE_*) of a torch dtype; -1 where mpsrt has none (complex, ...):
// the glue's one map of torch's dtypes to mpsrt's (the kernels and the random ops use it).
int dtype_id(at::ScalarType t);

// A launch of one kernel on the current stream of a device. Arguments are bound in the order
// arg() is called (binding 0, 1, ...); push() appends to the kernel's push constants (after the
// runtime's base[8]: a kernel's whole push struct from its interface header,
// csrc/kernels/<family>/, or its fields one by one); spec(id, v) sets specialisation constant `id`.
// What the launch cannot take (an argument that is not mpsrt memory of this device, a span
// larger than the device binds, negative strides, too many bytes) makes run() decline: it
// returns false and launches nothing.
class Launch {
 public:
  Launch(const char* kernel, c10::DeviceIndex device);
  Launch& spec(uint32_t id, uint32_t v);
  // Binds the bytes from byte `first` of t's storage (relative to t's data pointer, usually 0)
  // spanning `nbytes`.
  Launch& arg_bytes(const at::Tensor& t, int64_t first, size_t nbytes, bool written);
  // Binds every element t addresses (its sizes and strides).
  Launch& arg(const at::Tensor& t, bool written);
  // Binds the argument slots from the next one up to `n` (bindings the kernel declares but this
  // launch does not use) to argument `like`'s bytes, read-only, without computing a span again.
  Launch& fill_args(uint32_t like, uint32_t n = 8);
  template <class T>
  Launch& push(const T& v) {
    static_assert(std::is_trivially_copyable<T>::value, "push constants are bytes");
    if (l_.push_bytes + sizeof(T) > sizeof(l_.push)) {
      ok_ = false;
      return *this;
    }
    std::memcpy(reinterpret_cast<char*>(l_.push) + l_.push_bytes, &v, sizeof(T));
    l_.push_bytes += static_cast<uint32_t>(sizeof(T));
    return *this;
  }
  // A 1-D grid of workgroups of `local` invocations for `items` work items, each invocation
  // looping grid-stride (common.glsl's linear_id / grid_size): at most 65535 x 65535 groups.
  Launch& grid(uint64_t items, uint32_t local);
  Launch& groups(uint32_t x, uint32_t y = 1, uint32_t z = 1);
  // Launches the kernel on the device's current stream; false (nothing launched) where it
  // declines (above).
  [[nodiscard]] bool run();

 private:
  MpsrtKernelLaunch l_{};
  c10::DeviceIndex device_;
  bool ok_ = true;
};

}  // namespace mpsrt::torch_glue::ops
