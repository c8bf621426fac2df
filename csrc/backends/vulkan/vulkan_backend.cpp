// The vulkan backend: any Vulkan 1.2 device with a compute queue. This file is its
// backend::Backend (availability, devices, settings: configure()); the parts:
//
//   vk_instance.cpp  - the instance and device discovery, once per process, on the first
//                      question asked; a machine without a loader, a driver or a suitable device
//                      reports the backend unavailable with the reason
//   vk_device.cpp    - opening a device: the VkDevice and its queues, the memory model, limits
//                      and kernel sizes, the clock's calibration; its backend::Device
//   vk_memory.cpp    - Heap: a VkDeviceMemory with VkBuffers over all of it (one, or
//                      overlapping ones where it is larger than the device's largest VkBuffer):
//                      on unified memory of a host-visible, host-coherent type, mapped
//                      persistently; on discrete memory of a device-local type, never mapped
//                      (staging heaps: host-visible memory)
//   vk_semaphore.cpp - TimelineEvent: a timeline VkSemaphore; host waits for the device
//   vk_queue.cpp     - Queue: a VkQueue of the device (shared under a mutex when there are fewer
//                      VkQueues than streams); a CommandBuffer is a recording of commands,
//                      turned into VkCommandBuffers when submitted
//   vk_kernels.cpp   - the fill, copy and random kernels (csrc/kernels/runtime/)
//   vk_tensor_kernels.cpp - the tensor kernels (csrc/kernels/*.comp): CommandBuffer::dispatch
//   vk_common.cpp    - helpers for all of them (vk_common.h)
#include <memory>
#include <mutex>
#include <string>

#include "backends/vulkan/vk_device.h"
#include "backends/vulkan/vk_instance.h"
#include "backends/vulkan/vulkan_backend.h"
#include "mpsrt/error.h"

namespace mpsrt::vk {
namespace {

class Backend final : public backend::Backend {
 public:
  const char* name() const noexcept override { return "vulkan"; }
  void configure(const VulkanConfig& config) {
    // Validate everything first: a configure() that throws changes nothing.
    const auto power_of_two = [](uint32_t v) { return v != 0 && (v & (v - 1)) == 0; };
    if (config.workgroup != 0 && (!power_of_two(config.workgroup) || config.workgroup > 1024)) {
      detail::throw_invalid("[vulkan] the workgroup size must be 0 or a power of two up to 1024");
    }
    if (!power_of_two(config.unroll) || config.unroll > 8) {
      detail::throw_invalid("[vulkan] the unroll factor must be 1, 2, 4 or 8");
    }
    if (config.vector_bytes != 4 && config.vector_bytes != 16) {
      detail::throw_invalid("[vulkan] the vector width must be 4 or 16 bytes");
    }
    std::lock_guard<std::mutex> lock(mu_);
    cfg_ = config;
  }
  void configure(const backend::Settings& s) override {
    VulkanConfig c;
    c.spin_ns = s.integer("MPSRT_VULKAN_SPIN_US") * 1000;
    c.shared_queue = s.text("MPSRT_VULKAN_QUEUES") == "shared";
    c.force_discrete = s.text("MPSRT_VULKAN_MEMORY") == "discrete";
    c.workgroup = static_cast<uint32_t>(s.integer("MPSRT_VULKAN_WORKGROUP"));
    c.groups_per_sm = static_cast<uint32_t>(s.integer("MPSRT_VULKAN_GROUPS_PER_SM"));
    c.unroll = static_cast<uint32_t>(s.integer("MPSRT_VULKAN_UNROLL"));
    c.vector_bytes = static_cast<uint32_t>(s.integer("MPSRT_VULKAN_VECTOR"));
    c.copy_kernel = s.text("MPSRT_VULKAN_COPY") == "kernel";
    configure(c);
  }
  bool is_built() const noexcept override { return true; }
  bool is_available() noexcept override {
    try {
      return !instance().devices.empty();
    } catch (...) {
      return false;
    }
  }
  std::string unavailable_reason() override {
    return is_available() ? std::string() : instance().why;
  }
  std::string software_only() override {
    if (!is_available()) return {};
    std::string names;
    for (const Candidate& c : instance().devices) {
      if (c.type != VK_PHYSICAL_DEVICE_TYPE_CPU) return {};
      names += (names.empty() ? "" : ", ") + c.name;
    }
    const bool one = instance().devices.size() == 1;
    return names + (one ? " is a software device" : " are software devices") +
           ", Vulkan emulated on the CPU";
  }
  bool usable_after_fork() const noexcept override { return !started(); }
  int device_count() override {
    Instance& inst = instance();
    if (inst.devices.empty()) detail::throw_error(inst.why);
    return static_cast<int>(inst.devices.size());
  }
  std::unique_ptr<backend::Device> open_device(int index) override {
    Instance& inst = instance();
    if (inst.devices.empty()) detail::throw_error(inst.why);
    if (index < 0 || index >= static_cast<int>(inst.devices.size())) {
      detail::throw_invalid("[vulkan] no device " + std::to_string(index) + "; there are " +
                            std::to_string(inst.devices.size()));
    }
    VulkanConfig cfg;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cfg = cfg_;
    }
    return vk::open_device(inst.devices[static_cast<size_t>(index)], cfg);
  }

 private:
  std::mutex mu_;
  VulkanConfig cfg_;
};

Backend& the_backend() {
  static Backend b;
  return b;
}

}  // namespace

void configure(const VulkanConfig& config) {
  the_backend().configure(config);
}

}  // namespace mpsrt::vk

namespace mpsrt::backend {
Backend& vulkan_backend() {
  return vk::the_backend();
}
}  // namespace mpsrt::backend
