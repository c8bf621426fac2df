// The vulkan backend's own settings. They are not part of the backend interface (backend.h):
// the core fills them from its options (MPSRT_VULKAN_*) and applies them when the vulkan backend
// is the one it runs on; the backend reads no environment itself. No Vulkan type appears here.
#pragma once

namespace mpsrt::vk {

struct VulkanConfig {
  /// The discrete memory model on every device (MPSRT_VULKAN_MEMORY=discrete): Buffers in
  /// memory the host does not map, every host access staged; false: decided by the device's
  /// type (discrete on discrete, virtual and other GPUs; unified on CPU-type and integrated).
  bool force_discrete = false;
};

/// Applies `config` to the vulkan backend (backend::vulkan_backend()) for the devices opened
/// from now on. Without the vulkan backend in the build it does nothing.
void configure(const VulkanConfig& config);

}  // namespace mpsrt::vk
