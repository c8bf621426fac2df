// Opening a device of the vulkan backend (vk_device.cpp). Internal to
// csrc/backends/vulkan/, as vk_common.h.
#pragma once

#include <memory>

#include "backends/backend.h"
#include "backends/vulkan/vk_instance.h"
#include "backends/vulkan/vulkan_backend.h"

namespace mpsrt::vk {

/// Opens the device c (one of instance().devices) with the settings `cfg`: the VkDevice and
/// its queues, the memory model, the limits and kernel sizes, the kernels. Throws mpsrt::Error
/// when the driver refuses.
std::unique_ptr<backend::Device> open_device(const Candidate& c, const VulkanConfig& cfg);

}  // namespace mpsrt::vk
