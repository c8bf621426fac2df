// The boxed fallback of the mpsrt device: every aten operator without a kernel of its own runs
// its CPU kernel on CPU tensors that alias the device memory, or on host copies of it where
// the memory is discrete (fallback.cpp). What module.cpp
// needs of it: the CPU allocator it installs and its counters.
#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mpsrt::torch_glue {

// The boxed fallback: runs op's CPU kernel on the stack's mpsrt tensors (aliases on unified
// memory, staged host copies on discrete memory), counted per op. The device kernels
// (kernels.h) call it for the launches they decline.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// The same for the device's quantized tensors (QuantizedPrivateUse1): the QuantizedCPU kernel on
// quantized stand-ins.
void quantized_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The fallback's run of a CPU kernel in pieces, for the typed host kernels (host_ops.cpp),
// which give the kernel aliases of host-visible arguments themselves: while a HostRun lives,
// the current stream of device d has finished its queued work, the CPU kernel's new allocations
// on this thread are mpsrt memory, and (in a profiler session) an interval is open; done()
// closes it and counts the op as the fallback counts its runs (in `count`, the op's entry:
// op_count_of, found once by the caller).
struct OpCount;
OpCount& op_count_of(const c10::OperatorHandle& op);

class HostRun {
 public:
  explicit HostRun(c10::DeviceIndex d);
  ~HostRun();
  HostRun(const HostRun&) = delete;
  HostRun& operator=(const HostRun&) = delete;
  void done(const c10::OperatorHandle& op, OpCount& count);

 private:
  c10::DeviceIndex d_;
  int* capture_;  // the thread's capture device (one thread-local look-up per run)
  int previous_capture_;
  int64_t t0_;
};

// A new output of a CPU kernel run under a HostRun as an mpsrt tensor on device d: its memory
// adopted where it is mpsrt memory that only r holds, else copied into a new mpsrt tensor.
at::Tensor host_output(const at::Tensor& r, c10::DeviceIndex d);

// Installs the CPU allocator through which the CPU kernels the fallback runs allocate their new
// outputs in mpsrt memory (once, at `_init`).
void install_capture_allocator();

// What the fallback did, for tests and tuning (torch.ops.mpsrt_torch._fallback_counts()):
// operators run, new outputs that were already mpsrt memory, new outputs copied into it, tensor
// arguments staged (host copies on discrete memory).
std::vector<int64_t> fallback_counts();

// The ops the fallback ran, by name ("aten::add.Tensor"), with their calls since the last
// reset_fallback_counts() (torch.mpsrt.fallback_counts() / reset_fallback_counts()).
c10::Dict<std::string, int64_t> fallback_op_counts();
void reset_fallback_counts();

}  // namespace mpsrt::torch_glue
