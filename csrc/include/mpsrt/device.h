// Devices and backends.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mpsrt/api.h"

namespace mpsrt {

/// What a device is and how much memory it offers. All sizes in bytes.
struct DeviceProperties {
  int index = 0;                        ///< the device's index (0 .. device_count() - 1)
  std::string name;                     ///< e.g. the CPU model, the GPU's name
  std::string backend;                  ///< "cpu", "vulkan" or "metal"
  uint64_t total_memory = 0;            ///< memory the device can reach
  uint64_t recommended_max_memory = 0;  ///< working-set size the runtime should stay within
  uint64_t max_buffer_size = 0;         ///< largest single buffer
  bool unified_memory = false;          ///< host and device share memory
  double timestamp_period_ns = 1.0;     ///< nanoseconds per device timestamp tick
  std::string details;                  ///< driver / kernel facts, e.g. "kernels=avx512"
  /// The device is the host's processor (the cpu backend; a CPU-type Vulkan device such as
  /// lavapipe): CPU code on its memory is as fast as its own kernels.
  bool cpu_type = false;
  /// Largest byte span of one argument of a tensor kernel (mpsrt/kernel.h); 0 when the device
  /// runs no tensor kernels.
  uint64_t kernel_arg_bytes = 0;
};

/// True when the active backend has at least one device.
MPSRT_API bool is_available();
/// The active backend's name. Chosen once, from MPSRT_BACKEND or the best built backend.
MPSRT_API std::string backend_name();
/// Backends compiled into this build, whether or not they work on this machine.
MPSRT_API std::vector<std::string> built_backends();
/// Why the active backend was chosen, for users: e.g. "cpu: the best available backend;
/// vulkan: llvmpipe (LLVM 15.0.6, 256 bits) is a software device, Vulkan emulated on the CPU;
/// using cpu (set MPSRT_BACKEND=vulkan to use it)". Unset MPSRT_BACKEND picks metal, then
/// vulkan on a hardware GPU, then cpu, and only then a backend whose devices are all software.
MPSRT_API std::string backend_reason();
/// Backends compiled into this build that work on this machine, best first (the order in which
/// an unset MPSRT_BACKEND considers them).
MPSRT_API std::vector<std::string> available_backends();

/// Number of devices of the active backend (0 when it has none). Starts the runtime.
MPSRT_API int device_count();
/// A number that changes whenever the process's runtime is re-created (a fork's child, the test
/// facility reset_runtime): what a client caches of the runtime's devices holds while it stays
/// the same. Starts nothing. Cost: one load.
MPSRT_API uint64_t runtime_generation() noexcept;
/// The calling thread's current device (0 until set_device is called on that thread).
MPSRT_API int current_device();
/// Sets the calling thread's current device; returns the previous one.
/// Throws std::invalid_argument when the index is out of range.
MPSRT_API int set_device(int index);
/// Properties of a device; index -1 means the current device.
MPSRT_API DeviceProperties get_device_properties(int index = -1);
/// Waits until all work on every stream of the device is done; -1 means the current device.
MPSRT_API void synchronize(int index = -1);
/// Bytes the backend holds from the driver / OS for the device (-1: current device).
MPSRT_API uint64_t driver_allocated_memory(int index = -1);

}  // namespace mpsrt
