// The mpsrt device's operators on mpsrt's tensor kernels (csrc/kernels/, C API kernel_launch):
// where they run (MPSRT_TORCH_KERNELS and the device), how a tensor becomes a kernel argument,
// and how an operator's kernel is registered so that what it declines runs through the
// fallback. The kernels of each op family live in their own file (elementwise_ops.cpp, ...).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime.h"

namespace mpsrt::torch_glue::kernels {

// Whether device d's operators run on mpsrt's kernels: the device has them and
// MPSRT_TORCH_KERNELS (or set_mode) asks for them there (auto: not on CPU-type devices).
// Cost: one load after the device's first call.
bool enabled(c10::DeviceIndex d);

// The mode in force for every device ("auto", "device" or "cpu"; MPSRT_TORCH_KERNELS until
// set); set_mode returns the previous one (torch.mpsrt._set_kernels). A bad value raises
// ValueError naming the values.
std::string mode();
// Forgets what the runtime said of its devices and the mode set (after the runtime was
// re-created: mpsrt._C._reset_runtime).
void forget();
std::string set_mode(const std::string& mode);

// mpsrt/dtype.h's id (MPSRT_DTYPE_*) of a torch dtype; -1 where mpsrt has none (complex, ...):
// the glue's one map of torch's dtypes to mpsrt's (the kernels and the random ops use it).
int dtype_id(at::ScalarType t);

// Thrown by a kernel that cannot take its arguments (a dtype, rank or span it does not handle)
// before it launches anything: the op then runs through the fallback.
struct Declined {};

// A launch of one kernel on the current stream of a device. Arguments are bound in the order
// arg() is called (binding 0, 1, ...); push() appends to the kernel's push constants (after the
// runtime's base[8]); spec() appends a specialisation constant.
class Launch {
 public:
  Launch(const char* kernel, c10::DeviceIndex device);
  Launch& spec(uint32_t v);
  // Binds the bytes from byte `first` of t's storage (relative to t's data pointer, usually 0)
  // spanning `nbytes`; throws Declined when t is not mpsrt memory of this device or the span is
  // larger than the device binds.
  Launch& arg_bytes(const at::Tensor& t, int64_t first, size_t nbytes, bool written);
  // Binds every element t addresses (its sizes and strides; negative strides decline).
  Launch& arg(const at::Tensor& t, bool written);
  template <class T>
  Launch& push(const T& v) {
    static_assert(std::is_trivially_copyable<T>::value, "push constants are bytes");
    if (l_.push_bytes + sizeof(T) > sizeof(l_.push)) throw Declined{};
    std::memcpy(reinterpret_cast<char*>(l_.push) + l_.push_bytes, &v, sizeof(T));
    l_.push_bytes += static_cast<uint32_t>(sizeof(T));
    return *this;
  }
  // A 1-D grid of workgroups of `local` invocations for `items` work items, each invocation
  // looping grid-stride (common.glsl's linear_id / grid_size): at most 65535 x 65535 groups.
  Launch& grid(uint64_t items, uint32_t local);
  Launch& groups(uint32_t x, uint32_t y = 1, uint32_t z = 1);
  void run();

 private:
  MpsrtKernelLaunch l_{};
  c10::DeviceIndex device_;
};

// Registers `name` for PrivateUse1 as a boxed kernel (or, for the ops host_ops.h types, as its
// typed host kernel, whose boxed path this is) that runs K where enabled() holds for the
// device of the op's first mpsrt tensor and K does not decline (returns false or throws
// Declined), and the fallback otherwise. K leaves the stack untouched when it declines; when it
// runs, it replaces the arguments with the returns (finish()).
using Kernel = bool (*)(const c10::OperatorHandle& op, torch::jit::Stack& stack);
void impl(torch::Library& m, const char* name, Kernel k);
// The boxed path of an op registered with impl() (the typed host kernels' path for what they do
// not run themselves, host_ops.h): its kernel K where it runs, else the fallback.
void run_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// Whether impl() registered a kernel K for the op.
bool has_kernel(const c10::OperatorHandle& op);
// The ops registered with impl(), by name ("aten::add.Tensor"), sorted.
std::vector<std::string> kernel_ops();

// The op's argument i (0-based) on the stack, and the stack's arguments replaced by `result`.
const c10::IValue& arg(const c10::OperatorHandle& op, const torch::jit::Stack& s, size_t i);
void finish(const c10::OperatorHandle& op, torch::jit::Stack& s, c10::IValue result);

}  // namespace mpsrt::torch_glue::kernels
