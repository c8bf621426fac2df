// The process's Vulkan instance and the physical devices the backend can use (vk_instance.cpp).
// Internal to csrc/backends/vulkan/, as vk_common.h.
#pragma once

#include <string>
#include <vector>

#include "backends/vulkan/vk_common.h"

namespace mpsrt::vk {

/// What a physical device offers the backend; `why` is empty when it is usable.
struct Candidate {
  VkPhysicalDevice pd = VK_NULL_HANDLE;
  std::string name;
  std::string why;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t family = 0;
  uint32_t queue_count = 0;
  uint32_t timestamp_bits = 0;  // timestampValidBits of `family`
  uint32_t memory_type = 0;     // host-visible, coherent (device-local preferred): unified heaps
  uint32_t local_type = 0;      // device-local (not host-visible preferred): discrete heaps
  uint32_t staging_type = 0;    // host-visible, coherent (cached, not device-local preferred)
  bool device_address = false;  // bufferDeviceAddress
  bool memory_budget = false;
  bool calibrated = false;    // VK_EXT_calibrated_timestamps
  bool import_host = false;   // VK_EXT_external_memory_host on a device whose memory is the host's
  bool maintenance4 = false;  // maxBufferSize is known (Vulkan 1.3 or VK_KHR_maintenance4)
  bool nv_sm = false;         // VK_NV_shader_sm_builtins: the SM count
  bool amd_core = false;      // VK_AMD_shader_core_properties: the CU count
  // The tensor kernels' features: 8- and 16-bit storage access, float16 and int8/int16
  // arithmetic (without them the device runs no tensor kernels; the PyTorch device falls back).
  bool tensor_kernels = false;
};

/// The process's Vulkan instance and its usable devices, found once (instance()).
struct Instance {
  VkInstance instance = VK_NULL_HANDLE;
  std::vector<Candidate> devices;  // hardware first, software (CPU-type) devices last
  std::string why;                 // why no device is usable

  Instance();
  // The instance lives until the process exits: devices may be open until then.

 private:
  // Loads the loader and creates the instance (with a validation-message callback where the
  // loader has VK_EXT_debug_utils); false, with `why`, when there is no usable loader or driver.
  bool create();
  // Examines every physical device: the usable ones in `devices`, in order; else `why`.
  void find_devices();
};

/// The instance, created on the first call (never destroyed).
Instance& instance();

/// True once this process has a VkInstance: from then on the driver's state (its threads,
/// mappings, locks) does not survive fork(), and a forked child must not use Vulkan.
bool started() noexcept;

}  // namespace mpsrt::vk
