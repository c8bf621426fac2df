// The process's Vulkan instance and device discovery: the loader, the instance (with the
// validation layer's messages on stderr where the loader has VK_EXT_debug_utils), and what
// each physical device offers the backend (examine()): a compute queue family with
// timestamps, the features and extensions the kernels and queues need, the memory types of
// unified heaps, discrete heaps and staging memory. Happens once per process, on the first
// question asked; a machine without a loader, a driver or a suitable device reports the
// backend unavailable with the reason.
#include "backends/vulkan/vk_instance.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace mpsrt::vk {
namespace {

bool has_extension(const std::vector<VkExtensionProperties>& list, const char* name) {
  for (const VkExtensionProperties& e : list) {
    if (std::strcmp(e.extensionName, name) == 0) return true;
  }
  return false;
}

std::vector<VkExtensionProperties> device_extensions(VkPhysicalDevice pd) {
  return enumerate<VkExtensionProperties>([&](uint32_t* n, VkExtensionProperties* out) {
    vkEnumerateDeviceExtensionProperties(pd, nullptr, n, out);
  });
}

// A compute family with timestamps for c: one without graphics where there is one (a
// discrete GPU's asynchronous compute queues; ggml-vulkan does the same), else the first with
// compute. False when there is none.
bool choose_queue_family(Candidate& c) {
  const std::vector<VkQueueFamilyProperties> fams =
      enumerate<VkQueueFamilyProperties>([&](uint32_t* n, VkQueueFamilyProperties* out) {
        vkGetPhysicalDeviceQueueFamilyProperties(c.pd, n, out);
      });
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t i = 0; i < fams.size(); ++i) {
      const VkQueueFlags f = fams[i].queueFlags;
      if ((f & VK_QUEUE_COMPUTE_BIT) && fams[i].timestampValidBits > 0 &&
          (pass == 1 || !(f & VK_QUEUE_GRAPHICS_BIT))) {
        c.family = i;
        c.queue_count = std::min<uint32_t>(fams[i].queueCount, 8);
        c.timestamp_bits = fams[i].timestampValidBits;
        return true;
      }
    }
  }
  return false;
}

// The features and extensions c needs (c.why names one that is missing) and the optional
// ones it has.
void check_features(Candidate& c, uint32_t api_version) {
  auto f12 =
      make<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  auto f11 =
      make<VkPhysicalDeviceVulkan11Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES);
  f12.pNext = &f11;
  auto f2 = make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  f2.pNext = &f12;
  vkGetPhysicalDeviceFeatures2(c.pd, &f2);
  c.device_address = f12.bufferDeviceAddress == VK_TRUE;
  c.tensor_kernels = f11.storageBuffer16BitAccess && f12.storageBuffer8BitAccess &&
                     f12.shaderFloat16 && f12.shaderInt8 && f2.features.shaderInt16;
  if (!f12.timelineSemaphore) c.why = "no timeline semaphores";
  if (!f2.features.shaderInt64) c.why = "no shaderInt64";
  if (!f2.features.shaderFloat64) c.why = "no shaderFloat64";
  const std::vector<VkExtensionProperties> exts = device_extensions(c.pd);
  if (!has_extension(exts, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME))
    c.why = "no VK_KHR_push_descriptor";
  if (!c.why.empty()) return;
  c.memory_budget = has_extension(exts, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  c.calibrated = has_extension(exts, VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME);
  c.maintenance4 =
      api_version >= VK_API_VERSION_1_3 || has_extension(exts, VK_KHR_MAINTENANCE_4_EXTENSION_NAME);
  c.nv_sm = has_extension(exts, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME);
  c.amd_core = has_extension(exts, VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME);
  c.import_host =
      has_extension(exts, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME) &&
      (c.type == VK_PHYSICAL_DEVICE_TYPE_CPU || c.type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU);
}

constexpr VkMemoryPropertyFlags kHostCoherent =
    VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;

// How well a memory type with flags f suits discrete heaps or staging memory (higher is
// better; -1: not at all). Discrete heaps: device-local memory the host cannot map where there
// is such a type (the PCIe BAR window, device-local and host-visible, is never where Buffers
// live), else any device-local type, else a host-visible one. Staging: host-visible, coherent;
// first not device-local (where such a type exists: host memory, not the BAR window), then
// host-cached (host reads of a readback at memory speed).
int memory_score(VkMemoryPropertyFlags f, bool staging) {
  const bool local = f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  const bool visible = f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
  if (staging) {
    if ((f & kHostCoherent) != kHostCoherent) return -1;
    return (local ? 0 : 2) + ((f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ? 1 : 0);
  }
  return (local ? 2 : 0) + (visible ? 0 : 1);
}

// The memory types of c's unified heaps, discrete heaps and staging memory. False when the
// device has no host-visible, host-coherent memory.
bool choose_memory_types(Candidate& c) {
  const VkPhysicalDeviceMemoryProperties mp = memory_properties(c.pd);
  const auto flags = [&](int i) { return mp.memoryTypes[i].propertyFlags; };
  // Unified: host-visible, host-coherent memory; device-local among those if there is such a
  // type.
  int best = -1;
  for (uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
    if ((f & kHostCoherent) != kHostCoherent) continue;
    const bool local = f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    if (best < 0 || (local && !(flags(best) & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT))) {
      best = static_cast<int>(i);
    }
  }
  if (best < 0) return false;
  c.memory_type = static_cast<uint32_t>(best);
  int local = best, staging = best;
  for (uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
    const int n = static_cast<int>(i);
    if (memory_score(flags(n), false) > memory_score(flags(local), false)) local = n;
    if (memory_score(flags(n), true) > memory_score(flags(staging), true)) staging = n;
  }
  c.local_type = static_cast<uint32_t>(local);
  c.staging_type = static_cast<uint32_t>(staging);
  return true;
}

Candidate examine(VkPhysicalDevice pd) {
  Candidate c;
  c.pd = pd;
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(pd, &props);
  c.name = props.deviceName;
  c.type = props.deviceType;
  if (props.apiVersion < VK_API_VERSION_1_2) {
    c.why = "needs Vulkan 1.2";
    return c;
  }
  if (!choose_queue_family(c)) {
    c.why = "no compute queue with timestamps";
    return c;
  }
  check_features(c, props.apiVersion);
  if (!c.why.empty()) return c;
  if (!choose_memory_types(c)) c.why = "no host-visible coherent memory";
  return c;
}

// Hardware first (discrete, integrated, virtual, other), software (CPU) devices last, so
// that device 0 is the real GPU where there is one.
int hardware_rank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return 4;
    default:
      return 3;
  }
}

VKAPI_ATTR VkBool32 VKAPI_CALL on_debug_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                VkDebugUtilsMessageTypeFlagsEXT type,
                                                const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                void*) {
  const bool error = severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  // General warnings are the loader's notices (e.g. "VK_INSTANCE_LAYERS adds a layer").
  if (!error && type == VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT) return VK_FALSE;
  const char* level = error ? "error" : "warning";
  std::fprintf(stderr, "[vulkan] validation %s: %s\n", level,
               data && data->pMessage ? data->pMessage : "");
  return VK_FALSE;
}

// The validation layer's warnings and errors, to on_debug_message.
VkDebugUtilsMessengerCreateInfoEXT debug_messenger_info() {
  auto mi = make<VkDebugUtilsMessengerCreateInfoEXT>(
      VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
  mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                   VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                   VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  mi.pfnUserCallback = on_debug_message;
  return mi;
}

std::atomic<bool> g_started{false};

}  // namespace

Instance::Instance() {
  if (create()) find_devices();
}

bool Instance::create() {
  VkResult r = volkInitialize();
  if (r != VK_SUCCESS) {
    why =
        "[vulkan] no Vulkan loader (libvulkan.so.1) was found; install one (Debian: "
        "libvulkan1 and a driver such as mesa-vulkan-drivers)";
    return false;
  }
  if (volkGetInstanceVersion() < VK_API_VERSION_1_1) {
    why = "[vulkan] the Vulkan loader is older than 1.1; update it";
    return false;
  }
  const std::vector<VkExtensionProperties> exts =
      enumerate<VkExtensionProperties>([](uint32_t* n, VkExtensionProperties* out) {
        vkEnumerateInstanceExtensionProperties(nullptr, n, out);
      });
  const bool debug = has_extension(exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  std::vector<const char*> enable;
  if (debug) enable.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);

  auto app = make<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.pApplicationName = "mpsrt";
  app.pEngineName = "mpsrt";
  app.apiVersion = VK_API_VERSION_1_2;
  auto ci = make<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  ci.pApplicationInfo = &app;
  ci.enabledExtensionCount = static_cast<uint32_t>(enable.size());
  ci.ppEnabledExtensionNames = enable.data();
  r = vkCreateInstance(&ci, nullptr, &instance);
  if (r != VK_SUCCESS) {
    instance = VK_NULL_HANDLE;
    why = std::string("[vulkan] no usable Vulkan driver: vkCreateInstance returned ") +
          result_name(r) + "; install a Vulkan driver (e.g. mesa-vulkan-drivers)";
    return false;
  }
  volkLoadInstanceOnly(instance);
  if (debug && vkCreateDebugUtilsMessengerEXT) {
    const VkDebugUtilsMessengerCreateInfoEXT mi = debug_messenger_info();
    VkDebugUtilsMessengerEXT m;
    vkCreateDebugUtilsMessengerEXT(instance, &mi, nullptr, &m);  // lives with the instance
  }
  return true;
}

void Instance::find_devices() {
  const std::vector<VkPhysicalDevice> pds = enumerate<VkPhysicalDevice>(
      [&](uint32_t* n, VkPhysicalDevice* out) { vkEnumeratePhysicalDevices(instance, n, out); });
  std::string skipped;
  for (VkPhysicalDevice pd : pds) {
    Candidate c = examine(pd);
    if (c.why.empty()) {
      devices.push_back(std::move(c));
    } else {
      skipped += (skipped.empty() ? "" : "; ") + c.name + ": " + c.why;
    }
  }
  std::stable_sort(devices.begin(), devices.end(), [](const Candidate& a, const Candidate& b) {
    return hardware_rank(a.type) < hardware_rank(b.type);
  });
  if (devices.empty()) {
    why = "[vulkan] no usable Vulkan device" +
          (skipped.empty() ? std::string(" was found") : " (" + skipped + ")") +
          "; a device needs Vulkan 1.2, a compute queue, timeline semaphores, shaderInt64, "
          "shaderFloat64 and VK_KHR_push_descriptor";
  }
}

Instance& instance() {
  static Instance* inst = [] {
    auto* i = new Instance();  // never destroyed (see vk_instance.h)
    g_started.store(i->instance != VK_NULL_HANDLE);
    return i;
  }();
  return *inst;
}

bool started() noexcept {
  return g_started.load();
}

}  // namespace mpsrt::vk
