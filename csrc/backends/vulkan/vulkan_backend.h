// The vulkan backend's own settings. They are not part of the backend interface (backend.h):
// the core fills them from its options (MPSRT_VULKAN_*) and applies them when the vulkan
// backend is the one it runs on; the backend reads no environment itself. No Vulkan type
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
};

/// Applies `config` to the vulkan backend (backend::vulkan_backend()) for the devices opened
/// from now on. Without the vulkan backend in the build it does nothing.
void configure(const VulkanConfig& config);

}  // namespace mpsrt::vk
