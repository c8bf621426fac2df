// The vulkan backend's own settings. They are not part of the backend interface (backend.h):
// the backend makes them from the runtime's options (MPSRT_VULKAN_*) that the core hands it
// through Backend::configure(Settings) when the vulkan backend is the one it runs on; the
// backend reads no environment itself. mpsrt's C++ tests apply them directly. No Vulkan type
// appears here, and a build without the backend (no_vulkan.cpp) accepts and ignores them.
#pragma once

#include <cstdint>

namespace mpsrt::vk {

struct VulkanConfig {
  /// How long a host wait for the device (synchronize, an event, back-pressure) polls the
  /// semaphore before it blocks in the driver.
  int64_t spin_ns = 20000;
  /// Every stream submits to one VkQueue, each ordering its own segments with a wait on its
  /// semaphore instead of a queue-wide barrier (so different streams' work may overlap within
  /// the queue); false: each stream gets a VkQueue of its own while the device has enough.
  bool shared_queue = false;
  /// The discrete memory model on every device (MPSRT_VULKAN_MEMORY=discrete): Buffers in
  /// memory the host does not map, every host access staged; false: decided by the device's
  /// type (discrete on discrete, virtual and other GPUs; unified on CPU-type and integrated).
  bool force_discrete = false;
  /// Invocations per workgroup of every kernel (a power of two); 0: by the device (256, a
  /// multiple of its subgroup size, within its limits).
  uint32_t workgroup = 0;
  /// Workgroups per SM / CU that one dispatch launches at most; 0: by the device (as many as
  /// its SMs hold at once). The SM count comes from VK_NV_shader_sm_builtins or
  /// VK_AMD_shader_core_properties; where the device tells none it counts as one (this is then
  /// the cap itself), and 0 means at most 2^20 invocations per dispatch.
  uint32_t groups_per_sm = 0;
  /// Vectors (fill, copy) or Philox blocks (random) an invocation handles per step of its
  /// grid-stride loop: 1, 2, 4 or 8.
  uint32_t unroll = 2;
  /// The widest access of the kernels in bytes: 16 (uvec4 where aligned) or 4 (32-bit words).
  uint32_t vector_bytes = 16;
  /// Device-to-device copies as a compute kernel where source and destination agree mod 4
  /// (false: every copy is vkCmdCopyBuffer, the transfer engine).
  bool copy_kernel = true;
};

/// Applies `config` to the vulkan backend (backend::vulkan_backend()); devices opened after
/// the call use it. Throws std::invalid_argument for a value out of range (the core's options
/// check them first), and then changes nothing. A no-op where the backend is not built.
void configure(const VulkanConfig& config);

}  // namespace mpsrt::vk
