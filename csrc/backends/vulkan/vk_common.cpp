// The helpers vk_common.h declares for every part of the vulkan backend: Vulkan results as
// names and errors, the host clock, a physical device's memory properties.
#include "backends/vulkan/vk_common.h"

#include <time.h>

#include <string>

#include "mpsrt/error.h"

namespace mpsrt::vk {

const char* result_name(VkResult r) noexcept {
  switch (r) {
    case VK_SUCCESS:
      return "VK_SUCCESS";
    case VK_NOT_READY:
      return "VK_NOT_READY";
    case VK_TIMEOUT:
      return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED:
      return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT:
      return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    default:
      return "VkResult error";
  }
}

void fail(const std::string& what, VkResult r) {
  detail::throw_error("[vulkan] " + what + " failed: " + result_name(r) + " (" +
                      std::to_string(static_cast<int>(r)) + ")");
}

int64_t host_now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

VkPhysicalDeviceMemoryProperties memory_properties(
    VkPhysicalDevice pd, VkPhysicalDeviceMemoryBudgetPropertiesEXT* budget) noexcept {
  auto mp2 = make<VkPhysicalDeviceMemoryProperties2>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2);
  if (budget != nullptr) {
    *budget = make<VkPhysicalDeviceMemoryBudgetPropertiesEXT>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT);
    mp2.pNext = budget;
  }
  vkGetPhysicalDeviceMemoryProperties2(pd, &mp2);
  return mp2.memoryProperties;
}

}  // namespace mpsrt::vk
