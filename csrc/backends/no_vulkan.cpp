// Built when the Vulkan backend is not: reports itself unavailable.
#include "backends/unbuilt.h"
#include "backends/vulkan/vulkan_backend.h"

namespace mpsrt::backend {
Backend& vulkan_backend() {
  static UnbuiltBackend b("vulkan", "Vulkan");
  return b;
}
}  // namespace mpsrt::backend

namespace mpsrt::vk {
void configure(const VulkanConfig&) {}
}  // namespace mpsrt::vk
