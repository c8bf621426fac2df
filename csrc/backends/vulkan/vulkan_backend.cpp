// The vulkan backend: any Vulkan 1.2 device with a compute queue.
//
//   Heap          - a VkDeviceMemory with VkBuffers over all of it (one, or overlapping ones
//                   where it is larger than the device's largest VkBuffer): on unified memory
//                   of a host-visible, host-coherent type, mapped persistently; on discrete
//                   memory of a device-local type, never mapped (staging heaps: host-visible
//                   memory)
//   Queue         - a VkQueue of the device (shared under a mutex when there are fewer VkQueues
//                   than streams), fed by a submit thread and drained by a completion thread
//                   (vk_queue.cpp)
//   CommandBuffer - a recording of commands, turned into VkCommandBuffers when submitted
//   TimelineEvent - a timeline VkSemaphore
//
// Instance creation and device discovery happen once per process, on the first question
// asked; a machine without a loader, a driver or a suitable device reports the backend
// unavailable with the reason.
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_info.h"
#include "backends/vulkan/vk_common.h"
#include "backends/vulkan/vulkan_backend.h"
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

DeviceShared::~DeviceShared() {
  if (device == VK_NULL_HANDLE) return;
  fn.vkDeviceWaitIdle(device);
  for (auto& kv : random_pipelines) fn.vkDestroyPipeline(device, kv.second, nullptr);
  for (VkPipeline p : {fill_pipeline, copy16_pipeline, copy4_pipeline}) {
    if (p) fn.vkDestroyPipeline(device, p, nullptr);
  }
  for (VkShaderModule m : {fill_module, copy_module, random_module}) {
    if (m) fn.vkDestroyShaderModule(device, m, nullptr);
  }
  for (VkPipelineLayout l : {fill_layout, copy_layout, random_layout}) {
    if (l) fn.vkDestroyPipelineLayout(device, l, nullptr);
  }
  for (VkDescriptorSetLayout l : {set_layout, copy_set_layout}) {
    if (l) fn.vkDestroyDescriptorSetLayout(device, l, nullptr);
  }
  fn.vkDestroyDevice(device, nullptr);
}

namespace {

// Pages of our own for an imported heap; nullptr when the system refuses them.
void* map_pages(VkDeviceSize size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Imports `a.mapped` (size bytes of our pages) as the memory of `a.buffer`. False when the
// driver does not accept these pages for the heap's memory type (the caller falls back).
bool import_pages(DeviceShared& d, VkDeviceSize size, Allocation& a) {
  auto hp =
      make<VkMemoryHostPointerPropertiesEXT>(VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT);
  if (d.fn.vkGetMemoryHostPointerPropertiesEXT(
          d.device, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, a.mapped, &hp) !=
          VK_SUCCESS ||
      (hp.memoryTypeBits & (1u << d.memory_type)) == 0) {
    return false;
  }
  auto imp =
      make<VkImportMemoryHostPointerInfoEXT>(VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT);
  imp.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  imp.pHostPointer = a.mapped;
  auto ai = make<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  ai.pNext = &imp;
  ai.allocationSize = size;
  ai.memoryTypeIndex = d.memory_type;
  return d.fn.vkAllocateMemory(d.device, &ai, nullptr, &a.memory) == VK_SUCCESS;
}

}  // namespace

namespace {

bool out_of_memory(VkResult r) {
  return r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY;
}

void destroy_buffers(DeviceShared& d, Allocation& a) noexcept {
  if (a.buffer) d.fn.vkDestroyBuffer(d.device, a.buffer, nullptr);
  for (VkBuffer b : a.more) d.fn.vkDestroyBuffer(d.device, b, nullptr);
  a.buffer = VK_NULL_HANDLE;
  a.more.clear();
}

// The offset of VkBuffer i of an allocation (0: a.buffer, i: a.more[i - 1]).
VkDeviceSize buffer_offset(const Allocation& a, size_t i) {
  return static_cast<VkDeviceSize>(i) * a.stride;
}

// What an allocation is for: a heap of the device's memory model, or staging memory.
struct MemoryKind {
  uint32_t type;  // memory type index
  bool map;       // host-visible: mapped for the allocation's life
  bool staging;
  bool address;  // the buffers get device addresses (bufferDeviceAddress)
};

// Creates the VkBuffers of `a` (a.size bytes): one over all of it, or where it is larger than
// buffer_span one of buffer_span bytes every buffer_stride bytes, the last one to the end.
// Returns the result of the first failure (none left then); *need is the memory they need.
VkResult create_buffers(DeviceShared& d, Allocation& a, const MemoryKind& kind,
                        VkDeviceSize* need) {
  auto ext =
      make<VkExternalMemoryBufferCreateInfo>(VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO);
  ext.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  auto bi = make<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  if (a.imported) bi.pNext = &ext;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
             VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  if (kind.address) bi.usage |= VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  a.stride = a.size > d.buffer_span ? d.buffer_stride : 0;
  *need = 0;
  for (size_t i = 0;; ++i) {
    const VkDeviceSize at = buffer_offset(a, i);
    bi.size = std::min(a.size - at, d.buffer_span);
    VkBuffer b = VK_NULL_HANDLE;
    const VkResult r = d.fn.vkCreateBuffer(d.device, &bi, nullptr, &b);
    if (r != VK_SUCCESS) {
      destroy_buffers(d, a);
      return r;
    }
    if (i == 0) {
      a.buffer = b;
    } else {
      a.more.push_back(b);
    }
    VkMemoryRequirements req;
    d.fn.vkGetBufferMemoryRequirements(d.device, b, &req);
    if ((req.memoryTypeBits & (1u << kind.type)) == 0 || at % req.alignment != 0) {
      destroy_buffers(d, a);
      return VK_ERROR_OUT_OF_DEVICE_MEMORY;  // not in this memory type: out of memory for us
    }
    *need = std::max(*need, at + req.size);
    if (at + bi.size == a.size) return VK_SUCCESS;
  }
}

bool allocate_as(DeviceShared& d, VkDeviceSize size, const MemoryKind& kind, Allocation* out) {
  Allocation a;
  a.size = size;
  a.staging = kind.staging;
  // Imported pages: unified heaps only (staging memory is needed on discrete memory only).
  if (kind.map && !kind.staging && d.import_host && size % d.import_align == 0) {
    a.mapped = map_pages(size);
    if (a.mapped == nullptr) return false;
    a.imported = true;
  }
  VkDeviceSize need = 0;
  VkResult r = create_buffers(d, a, kind, &need);
  if (r == VK_SUCCESS && (need > d.heap_limit || (a.imported && need > size))) {
    destroy_buffers(d, a);
    r = VK_ERROR_OUT_OF_DEVICE_MEMORY;
  }
  if (r != VK_SUCCESS) {
    if (a.imported) munmap(a.mapped, size);
    if (out_of_memory(r)) return false;
    fail("vkCreateBuffer", r);
  }
  if (a.imported && !import_pages(d, size, a)) {
    // Not importable after all: from now on heaps come from the driver.
    destroy_buffers(d, a);
    munmap(a.mapped, size);
    d.import_host = false;
    return allocate_as(d, size, kind, out);
  }
  if (!a.imported) {
    auto flags = make<VkMemoryAllocateFlagsInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO);
    flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    auto ai = make<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
    if (kind.address) ai.pNext = &flags;
    ai.allocationSize = need;
    ai.memoryTypeIndex = kind.type;
    r = d.fn.vkAllocateMemory(d.device, &ai, nullptr, &a.memory);
    if (r != VK_SUCCESS) {
      destroy_buffers(d, a);
      if (out_of_memory(r)) return false;
      fail("vkAllocateMemory", r);
    }
  }
  for (size_t i = 0; i <= a.more.size() && r == VK_SUCCESS; ++i) {
    r = d.fn.vkBindBufferMemory(d.device, i == 0 ? a.buffer : a.more[i - 1], a.memory,
                                buffer_offset(a, i));
  }
  if (r == VK_SUCCESS && kind.map && !a.imported) {
    r = d.fn.vkMapMemory(d.device, a.memory, 0, VK_WHOLE_SIZE, 0, &a.mapped);
  }
  if (r != VK_SUCCESS) {
    destroy_buffers(d, a);
    d.fn.vkFreeMemory(d.device, a.memory, nullptr);
    if (a.imported) munmap(a.mapped, size);
    if (out_of_memory(r) || r == VK_ERROR_MEMORY_MAP_FAILED) return false;
    fail("vkBindBufferMemory / vkMapMemory", r);
  }
  if (!kind.map) {
    if (kind.address) {
      // The first VkBuffer starts at the memory's byte 0: its address is the heap's.
      auto info = make<VkBufferDeviceAddressInfo>(VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO);
      info.buffer = a.buffer;
      a.address = d.fn.vkGetBufferDeviceAddress(d.device, &info);
    } else {
      // A range of its own, 2 MiB-aligned, never handed out again.
      const uint64_t span =
          (size + (uint64_t(2) << 20) - 1) / (uint64_t(2) << 20) * (uint64_t(2) << 20);
      a.address = d.next_synthetic_address.fetch_add(span, std::memory_order_relaxed);
    }
  }
  *out = std::move(a);
  return true;
}

}  // namespace

bool allocate(DeviceShared& d, VkDeviceSize size, Allocation* out) {
  // Discrete heaps get device addresses, the Buffers' unique addresses.
  const bool address = d.discrete && d.device_address;
  return allocate_as(d, size, MemoryKind{d.memory_type, !d.discrete, false, address}, out);
}

bool allocate_staging(DeviceShared& d, VkDeviceSize size, Allocation* out) {
  return allocate_as(d, size, MemoryKind{d.staging_type, true, true, false}, out);
}

void release(DeviceShared& d, Allocation& a) noexcept {
  if (a.memory == VK_NULL_HANDLE) return;
  destroy_buffers(d, a);
  d.fn.vkFreeMemory(d.device, a.memory, nullptr);  // unmaps implicitly
  if (a.imported) munmap(a.mapped, a.size);        // our pages go back to the system now
  a = Allocation{};
}

// Staging heaps are host memory: not counted in the device's bytes (driver_allocated_bytes).
VkHeap::VkHeap(std::shared_ptr<DeviceShared> d, const Allocation& a) : d_(std::move(d)), a_(a) {
  if (!a_.staging) d_->held.fetch_add(a_.size, std::memory_order_relaxed);
}

VkHeap::~VkHeap() {
  const VkDeviceSize n = a_.staging ? 0 : a_.size;
  release(*d_, a_);
  d_->held.fetch_sub(n, std::memory_order_relaxed);
}

bool wait_semaphores(const DeviceShared& d, const VkSemaphore* s, const uint64_t* v, uint32_t n,
                     bool any, int64_t timeout_ns) {
  auto reached = [&] {
    uint32_t hits = 0;
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t cur = 0;
      check(d.fn.vkGetSemaphoreCounterValue(d.device, s[i], &cur), "vkGetSemaphoreCounterValue");
      if (cur >= v[i]) {
        if (any) return true;
        ++hits;
      }
    }
    return hits == n;
  };
  if (reached()) return true;
  if (timeout_ns == 0) return false;
  // Poll first: the work a waiter waits for is often microseconds from done, and a blocking
  // wait costs a sleep and a wake-up in the driver. The first microseconds spin on the value;
  // after that the poll yields between reads, so that a device that runs on this machine's
  // cores (lavapipe) keeps its time slices.
  const int64_t start = host_now_ns();
  const int64_t spin = timeout_ns < 0 ? d.spin_ns : std::min(d.spin_ns, timeout_ns);
  for (int64_t now = start; now - start < spin; now = host_now_ns()) {
    if (reached()) return true;
    if (now - start > 2000) std::this_thread::yield();
  }
  int64_t left = -1;
  if (timeout_ns >= 0) {
    left = timeout_ns - (host_now_ns() - start);
    if (left <= 0) return reached();
  }
  auto wi = make<VkSemaphoreWaitInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO);
  wi.flags = any ? VK_SEMAPHORE_WAIT_ANY_BIT : 0;
  wi.semaphoreCount = n;
  wi.pSemaphores = s;
  wi.pValues = v;
  const VkResult r =
      d.fn.vkWaitSemaphores(d.device, &wi, left < 0 ? UINT64_MAX : static_cast<uint64_t>(left));
  if (r == VK_SUCCESS) return true;
  if (r == VK_TIMEOUT) return false;
  fail("vkWaitSemaphores", r);
}

Semaphore::Semaphore(std::shared_ptr<DeviceShared> d) : d_(std::move(d)) {
  auto ti = make<VkSemaphoreTypeCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO);
  ti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  ti.initialValue = 0;
  auto ci = make<VkSemaphoreCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO);
  ci.pNext = &ti;
  check(d_->fn.vkCreateSemaphore(d_->device, &ci, nullptr, &sem_), "vkCreateSemaphore");
}

Semaphore::~Semaphore() {
  d_->fn.vkDestroySemaphore(d_->device, sem_, nullptr);
}

void Semaphore::signal(uint64_t v) {
  std::lock_guard<std::mutex> lock(mu_);
  if (v <= value()) return;
  auto si = make<VkSemaphoreSignalInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO);
  si.semaphore = sem_;
  si.value = v;
  check(d_->fn.vkSignalSemaphore(d_->device, &si), "vkSignalSemaphore");
}

bool Semaphore::wait(uint64_t target, int64_t timeout_ns) {
  return wait_semaphores(*d_, &sem_, &target, 1, false, timeout_ns);
}

// Both semaphores in one vkWaitSemaphores (VK_SEMAPHORE_WAIT_ANY_BIT).
bool Semaphore::wait_either(uint64_t target, backend::TimelineEvent& other, uint64_t other_target,
                            int64_t timeout_ns) {
  auto* o = dynamic_cast<Semaphore*>(&other);
  if (o == nullptr || o->d_ != d_) return wait(target, timeout_ns);
  const VkSemaphore s[2] = {sem_, o->sem_};
  const uint64_t v[2] = {target, other_target};
  return wait_semaphores(*d_, s, v, 2, true, timeout_ns);
}

uint64_t Semaphore::value() const {
  uint64_t v = 0;
  check(d_->fn.vkGetSemaphoreCounterValue(d_->device, sem_, &v), "vkGetSemaphoreCounterValue");
  return v;
}

namespace {

bool has_extension(const std::vector<VkExtensionProperties>& list, const char* name) {
  for (const VkExtensionProperties& e : list) {
    if (std::strcmp(e.extensionName, name) == 0) return true;
  }
  return false;
}

std::vector<VkExtensionProperties> device_extensions(VkPhysicalDevice pd) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> out(n);
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, out.data());
  out.resize(n);
  return out;
}

// What a physical device offers the backend; `why` is empty when it is usable.
struct Candidate {
  VkPhysicalDevice pd = VK_NULL_HANDLE;
  std::string name;
  std::string why;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t family = 0;
  uint32_t queue_count = 0;
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
};

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
  uint32_t nf = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nf, nullptr);
  std::vector<VkQueueFamilyProperties> fams(nf);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nf, fams.data());
  // A compute family without graphics where there is one (a discrete GPU's asynchronous
  // compute queues; ggml-vulkan does the same), else the first with compute.
  bool found = false;
  for (int pass = 0; pass < 2 && !found; ++pass) {
    for (uint32_t i = 0; i < nf && !found; ++i) {
      const VkQueueFlags f = fams[i].queueFlags;
      if ((f & VK_QUEUE_COMPUTE_BIT) && fams[i].timestampValidBits > 0 &&
          (pass == 1 || !(f & VK_QUEUE_GRAPHICS_BIT))) {
        c.family = i;
        c.queue_count = std::min<uint32_t>(fams[i].queueCount, 8);
        found = true;
      }
    }
  }
  if (!found) {
    c.why = "no compute queue with timestamps";
    return c;
  }
  auto f12 =
      make<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  auto f2 = make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  f2.pNext = &f12;
  vkGetPhysicalDeviceFeatures2(pd, &f2);
  c.device_address = f12.bufferDeviceAddress == VK_TRUE;
  if (!f12.timelineSemaphore) c.why = "no timeline semaphores";
  if (!f2.features.shaderInt64) c.why = "no shaderInt64";
  if (!f2.features.shaderFloat64) c.why = "no shaderFloat64";
  const std::vector<VkExtensionProperties> exts = device_extensions(pd);
  if (!has_extension(exts, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME))
    c.why = "no VK_KHR_push_descriptor";
  if (!c.why.empty()) return c;
  c.memory_budget = has_extension(exts, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  c.calibrated = has_extension(exts, VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME);
  c.maintenance4 = props.apiVersion >= VK_API_VERSION_1_3 ||
                   has_extension(exts, VK_KHR_MAINTENANCE_4_EXTENSION_NAME);
  c.nv_sm = has_extension(exts, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME);
  c.amd_core = has_extension(exts, VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME);
  c.import_host = has_extension(exts, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME) &&
                  (props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ||
                   props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU);
  // Host-visible, host-coherent memory; device-local among those if there is such a type.
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  const VkMemoryPropertyFlags need =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  int best = -1;
  for (uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
    if ((f & need) != need) continue;
    const bool local = f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    if (best < 0 ||
        (local && !(mp.memoryTypes[best].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT))) {
      best = static_cast<int>(i);
    }
  }
  if (best < 0) {
    c.why = "no host-visible coherent memory";
    return c;
  }
  c.memory_type = static_cast<uint32_t>(best);
  // Discrete heaps: device-local memory the host cannot map where there is such a type (the
  // PCIe BAR window, device-local and host-visible, is never where Buffers live), else any
  // device-local type, else the host-visible one.
  // Staging: host-visible, coherent; first not device-local (where such a type exists: host
  // memory, not the BAR window), then host-cached (host reads of a readback at memory speed).
  auto score = [&](uint32_t i, bool staging) {
    const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
    const bool local = f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    const bool visible = f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
    if (staging) {
      if ((f & need) != need) return -1;
      return (local ? 0 : 2) + ((f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ? 1 : 0);
    }
    return (local ? 2 : 0) + (visible ? 0 : 1);
  };
  int local = static_cast<int>(best), staging = static_cast<int>(best);
  for (uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
    if (score(i, false) > score(static_cast<uint32_t>(local), false)) local = static_cast<int>(i);
    if (score(i, true) > score(static_cast<uint32_t>(staging), true)) staging = static_cast<int>(i);
  }
  c.local_type = static_cast<uint32_t>(local);
  c.staging_type = static_cast<uint32_t>(staging);
  return c;
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

// The process's Vulkan instance and its usable devices, found once.
struct Instance {
  VkInstance instance = VK_NULL_HANDLE;
  std::vector<Candidate> devices;
  std::string why;  // why no device is usable

  Instance() {
    VkResult r = volkInitialize();
    if (r != VK_SUCCESS) {
      why =
          "[vulkan] no Vulkan loader (libvulkan.so.1) was found; install one (Debian: "
          "libvulkan1 and a driver such as mesa-vulkan-drivers)";
      return;
    }
    if (volkGetInstanceVersion() < VK_API_VERSION_1_1) {
      why = "[vulkan] the Vulkan loader is older than 1.1; update it";
      return;
    }
    uint32_t n = 0;
    vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr);
    std::vector<VkExtensionProperties> exts(n);
    vkEnumerateInstanceExtensionProperties(nullptr, &n, exts.data());
    exts.resize(n);
    const bool debug = has_extension(exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    std::vector<const char*> enable;
    if (debug) enable.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);

    auto app = make<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
    app.pApplicationName = "mpsrt";
    app.pEngineName = "mpsrt";
    app.apiVersion = VK_API_VERSION_1_2;
    auto mi = make<VkDebugUtilsMessengerCreateInfoEXT>(
        VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
    mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                         VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    mi.pfnUserCallback = on_debug_message;
    auto ci = make<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
    ci.pApplicationInfo = &app;
    ci.enabledExtensionCount = static_cast<uint32_t>(enable.size());
    ci.ppEnabledExtensionNames = enable.data();
    r = vkCreateInstance(&ci, nullptr, &instance);
    if (r != VK_SUCCESS) {
      instance = VK_NULL_HANDLE;
      why = std::string("[vulkan] no usable Vulkan driver: vkCreateInstance returned ") +
            result_name(r) + "; install a Vulkan driver (e.g. mesa-vulkan-drivers)";
      return;
    }
    volkLoadInstanceOnly(instance);
    if (debug && vkCreateDebugUtilsMessengerEXT) {
      VkDebugUtilsMessengerEXT m;
      vkCreateDebugUtilsMessengerEXT(instance, &mi, nullptr, &m);  // lives with the instance
    }
    uint32_t np = 0;
    vkEnumeratePhysicalDevices(instance, &np, nullptr);
    std::vector<VkPhysicalDevice> pds(np);
    vkEnumeratePhysicalDevices(instance, &np, pds.data());
    pds.resize(np);
    std::string skipped;
    for (VkPhysicalDevice pd : pds) {
      Candidate c = examine(pd);
      if (c.why.empty()) {
        devices.push_back(std::move(c));
      } else {
        skipped += (skipped.empty() ? "" : "; ") + c.name + ": " + c.why;
      }
    }
    // Hardware first (discrete, integrated, virtual, other), software (CPU) devices last, so
    // that device 0 is the real GPU where there is one.
    auto rank = [](VkPhysicalDeviceType t) {
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
    };
    std::stable_sort(devices.begin(), devices.end(), [&](const Candidate& a, const Candidate& b) {
      return rank(a.type) < rank(b.type);
    });
    if (devices.empty()) {
      why = "[vulkan] no usable Vulkan device" +
            (skipped.empty() ? std::string(" was found") : " (" + skipped + ")") +
            "; a device needs Vulkan 1.2, a compute queue, timeline semaphores, shaderInt64, "
            "shaderFloat64 and VK_KHR_push_descriptor";
    }
  }
  // The instance lives until the process exits: devices may be open until then.
};

// Set once this process has a VkInstance: from then on the driver's state (its threads,
// mappings, locks) does not survive fork(), and a forked child must not use Vulkan.
std::atomic<bool> g_started{false};

Instance& instance() {
  static Instance* inst = [] {
    auto* i = new Instance();  // never destroyed (see above)
    g_started.store(i->instance != VK_NULL_HANDLE);
    return i;
  }();
  return *inst;
}

// Device time (ns) -> host CLOCK_MONOTONIC offset, from VK_EXT_calibrated_timestamps when the
// device offers both domains; 0 (the clocks are taken to be the same) otherwise.
int64_t calibrate(const DeviceShared& d, bool calibrated) {
  if (!calibrated || !vkGetPhysicalDeviceCalibrateableTimeDomainsEXT ||
      !d.fn.vkGetCalibratedTimestampsEXT)
    return 0;
  uint32_t n = 0;
  vkGetPhysicalDeviceCalibrateableTimeDomainsEXT(d.phys, &n, nullptr);
  std::vector<VkTimeDomainEXT> domains(n);
  vkGetPhysicalDeviceCalibrateableTimeDomainsEXT(d.phys, &n, domains.data());
  const bool dev = std::find(domains.begin(), domains.begin() + n, VK_TIME_DOMAIN_DEVICE_EXT) !=
                   domains.begin() + n;
  const bool mono = std::find(domains.begin(), domains.begin() + n,
                              VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT) != domains.begin() + n;
  if (!dev || !mono) return 0;
  VkCalibratedTimestampInfoEXT info[2] = {
      make<VkCalibratedTimestampInfoEXT>(VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT),
      make<VkCalibratedTimestampInfoEXT>(VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT)};
  info[0].timeDomain = VK_TIME_DOMAIN_DEVICE_EXT;
  info[1].timeDomain = VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT;
  uint64_t ts[2] = {0, 0};
  uint64_t deviation = 0;
  if (d.fn.vkGetCalibratedTimestampsEXT(d.device, 2, info, ts, &deviation) != VK_SUCCESS) return 0;
  const double dev_ns = static_cast<double>(ts[0] & d.timestamp_mask) * d.timestamp_period;
  return static_cast<int64_t>(ts[1]) - static_cast<int64_t>(dev_ns);
}

// What the kernels' sizing needs to know of a device.
struct Shape {
  uint32_t subgroup = 1;         // invocations of a subgroup (warp, wavefront)
  uint32_t max_workgroup = 128;  // invocations of a workgroup at most
  uint32_t max_groups = 65535;   // workgroups of a dispatch at most
  uint32_t sms = 0;              // SMs / CUs; 0 when the device does not tell
  uint32_t threads_per_sm = 0;   // invocations an SM / CU holds at once
};

// Workgroup size and workgroups per dispatch (PyTorch's rule for its CUDA kernels: 256-thread
// blocks, at most as many as the SMs hold at once, a grid-stride loop over the rest).
void size_kernels(DeviceShared& d, const VulkanConfig& cfg, const Shape& s) {
  uint32_t wg = cfg.workgroup != 0 ? cfg.workgroup : 256;
  wg = std::max(wg, s.subgroup);  // a whole number of subgroups (both powers of two)
  while (wg > s.max_workgroup && wg > 1) wg /= 2;
  d.workgroup = wg;
  uint64_t groups = 0;
  if (s.sms != 0) {
    const uint32_t per_sm =
        cfg.groups_per_sm != 0 ? cfg.groups_per_sm : std::max<uint32_t>(1, s.threads_per_sm / wg);
    groups = uint64_t(s.sms) * per_sm;
  } else if (cfg.groups_per_sm != 0) {
    groups = cfg.groups_per_sm;  // the SM count unknown: counted as one
  } else {
    groups = (uint64_t(1) << 20) / wg;  // 2^20 invocations: more than any GPU holds at once
  }
  d.max_groups = static_cast<uint32_t>(std::clamp<uint64_t>(groups, 1, s.max_groups));
  d.unroll = cfg.unroll;
  d.vector = cfg.vector_bytes;
  d.copy_kernel = cfg.copy_kernel;
}

class Device final : public backend::Device {
 public:
  Device(const Candidate& c, const VulkanConfig& cfg) : d_(std::make_shared<DeviceShared>()) {
    DeviceShared& d = *d_;
    d.phys = c.pd;
    d.family = c.family;
    // The memory model: discrete on a GPU with memory of its own (discrete, virtual and other
    // types) or when MPSRT_VULKAN_MEMORY=discrete forces it; unified on CPU-type and integrated
    // devices, whose memory is the host's.
    d.discrete = cfg.force_discrete || !(c.type == VK_PHYSICAL_DEVICE_TYPE_CPU ||
                                         c.type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU);
    d.memory_type = d.discrete ? c.local_type : c.memory_type;
    d.staging_type = c.staging_type;
    d.device_address = d.discrete && c.device_address;
    d.memory_budget = c.memory_budget;

    std::vector<float> priorities(c.queue_count, 1.0f);
    auto qi = make<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
    qi.queueFamilyIndex = c.family;
    qi.queueCount = c.queue_count;
    qi.pQueuePriorities = priorities.data();
    auto f12 = make<VkPhysicalDeviceVulkan12Features>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
    f12.timelineSemaphore = VK_TRUE;
    if (d.device_address) f12.bufferDeviceAddress = VK_TRUE;
    auto f2 = make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
    f2.pNext = &f12;
    f2.features.shaderInt64 = VK_TRUE;
    f2.features.shaderFloat64 = VK_TRUE;
    std::vector<const char*> exts = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
    if (c.memory_budget) exts.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    if (c.calibrated) exts.push_back(VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME);
    if (c.import_host) exts.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
    auto ci = make<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
    ci.pNext = &f2;
    ci.queueCreateInfoCount = 1;
    ci.pQueueCreateInfos = &qi;
    ci.enabledExtensionCount = static_cast<uint32_t>(exts.size());
    ci.ppEnabledExtensionNames = exts.data();
    check(vkCreateDevice(c.pd, &ci, nullptr, &d.device), "vkCreateDevice");
    volkLoadDeviceTable(&d.fn, d.device);
    d.queues.resize(c.queue_count);
    for (uint32_t i = 0; i < c.queue_count; ++i)
      d.fn.vkGetDeviceQueue(d.device, c.family, i, &d.queues[i]);
    d.queue_mutexes.reset(new std::mutex[c.queue_count]);

    auto m3 = make<VkPhysicalDeviceMaintenance3Properties>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
    auto drv =
        make<VkPhysicalDeviceDriverProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES);
    drv.pNext = &m3;
    auto hostp = make<VkPhysicalDeviceExternalMemoryHostPropertiesEXT>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT);
    auto sub = make<VkPhysicalDeviceSubgroupProperties>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
    auto m4 = make<VkPhysicalDeviceMaintenance4Properties>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES);
    auto nv = make<VkPhysicalDeviceShaderSMBuiltinsPropertiesNV>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV);
    auto amd = make<VkPhysicalDeviceShaderCorePropertiesAMD>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD);
    auto p2 = make<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
    // The chain: p2 -> drv -> m3 -> sub, then those the device has.
    p2.pNext = &drv;
    m3.pNext = &sub;
    void** tail = &sub.pNext;
    auto append = [&](auto& ext) {
      *tail = &ext;
      tail = &ext.pNext;
    };
    if (c.import_host) append(hostp);
    if (c.maintenance4) append(m4);
    if (c.nv_sm) append(nv);
    if (c.amd_core) append(amd);
    vkGetPhysicalDeviceProperties2(c.pd, &p2);
    const VkPhysicalDeviceLimits& lim = p2.properties.limits;
    d.window_align = std::max<VkDeviceSize>(lim.minStorageBufferOffsetAlignment, 16);
    VkDeviceSize window = std::min<VkDeviceSize>(lim.maxStorageBufferRange, 1u << 30);
    // The largest VkBuffer: maxBufferSize where the device tells it; else what one allocation
    // may be (a VkBuffer that large is what this backend always made there).
    const VkDeviceSize max_buffer =
        c.maintenance4
            ? m4.maxBufferSize
            : std::max<VkDeviceSize>(m3.maxMemoryAllocationSize, lim.maxStorageBufferRange);
    // Buffers start at multiples of 2 MiB (more than any buffer alignment), and overlap by at
    // least a window.
    const VkDeviceSize granule = VkDeviceSize(2) << 20;
    d.buffer_span = std::max(max_buffer / granule * granule, 2 * granule);
    window = std::min(window, d.buffer_span / 2);
    d.window_bytes = window / d.window_align * d.window_align;
    d.buffer_stride = (d.buffer_span - d.window_bytes) / granule * granule;
    d.timestamp_period = lim.timestampPeriod;
    Shape shape;
    shape.subgroup = std::max<uint32_t>(sub.subgroupSize, 1);
    shape.max_workgroup =
        std::min(lim.maxComputeWorkGroupInvocations, lim.maxComputeWorkGroupSize[0]);
    shape.max_groups = lim.maxComputeWorkGroupCount[0];
    if (c.nv_sm && nv.shaderSMCount > 0) {
      shape.sms = nv.shaderSMCount;
      shape.threads_per_sm = nv.shaderWarpsPerSM * shape.subgroup;
    } else if (c.amd_core && amd.computeUnitsPerShaderArray > 0) {
      shape.sms =
          amd.shaderEngineCount * amd.shaderArraysPerEngineCount * amd.computeUnitsPerShaderArray;
      shape.threads_per_sm = amd.simdPerComputeUnit * amd.wavefrontsPerSimd * amd.wavefrontSize;
    }
    size_kernels(d, cfg, shape);
    if (c.import_host) {
      const VkDeviceSize page = static_cast<VkDeviceSize>(sysconf(_SC_PAGESIZE));
      d.import_align = std::max<VkDeviceSize>(hostp.minImportedHostPointerAlignment, page);
      // mmap gives page-aligned ranges: import only when that is aligned enough.
      d.import_host = d.import_align == page;
    }
    uint32_t nf = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(c.pd, &nf, nullptr);
    std::vector<VkQueueFamilyProperties> fams(nf);
    vkGetPhysicalDeviceQueueFamilyProperties(c.pd, &nf, fams.data());
    const uint32_t bits = fams[c.family].timestampValidBits;
    d.timestamp_mask = bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;

    auto budget = make<VkPhysicalDeviceMemoryBudgetPropertiesEXT>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT);
    auto mp2 = make<VkPhysicalDeviceMemoryProperties2>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2);
    if (c.memory_budget) mp2.pNext = &budget;
    vkGetPhysicalDeviceMemoryProperties2(c.pd, &mp2);
    d.memory_heap = mp2.memoryProperties.memoryTypes[d.memory_type].heapIndex;
    // One heap may be as large as the memory heap (maxMemoryAllocationSize is a soft limit,
    // which NVIDIA exceeds; a refusal is out of memory). On a CPU-type device (lavapipe) the
    // memory is the host's and the heap size a nominal figure the driver does not enforce
    // (lavapipe: 2 GiB): there the host's memory is the limit.
    uint64_t heap_size = mp2.memoryProperties.memoryHeaps[d.memory_heap].size;
    if (c.type == VK_PHYSICAL_DEVICE_TYPE_CPU) {
      heap_size = std::max(heap_size, cpu::usable_memory_bytes());
    }
    d.heap_limit = heap_size;

    info_.name = p2.properties.deviceName;
    info_.total_memory = heap_size;
    // The budget where the driver reports one; else three quarters, as Metal recommends.
    info_.recommended_max_memory =
        c.memory_budget ? std::min<uint64_t>(budget.heapBudget[d.memory_heap], heap_size)
                        : heap_size / 4 * 3;
    if (info_.recommended_max_memory == 0) info_.recommended_max_memory = heap_size / 4 * 3;
    info_.max_buffer_size = d.heap_limit;
    info_.unified_memory = !d.discrete;
    info_.timestamp_period_ns = d.timestamp_period;
    const uint32_t api = p2.properties.apiVersion;
    info_.details = std::string("driver=") + drv.driverName + " " + drv.driverInfo +
                    ", api=" + std::to_string(VK_API_VERSION_MAJOR(api)) + "." +
                    std::to_string(VK_API_VERSION_MINOR(api)) + "." +
                    std::to_string(VK_API_VERSION_PATCH(api)) +
                    ", queues=" + std::to_string(c.queue_count) +
                    (cfg.shared_queue ? " (one shared)" : "") +
                    ", memory=" + (d.discrete ? "discrete" : "unified") +
                    ", kernels: workgroup=" + std::to_string(d.workgroup) +
                    " groups=" + std::to_string(d.max_groups) +
                    (shape.sms != 0 ? " (" + std::to_string(shape.sms) + " SMs)" : "") +
                    " unroll=" + std::to_string(d.unroll) + " vector=" + std::to_string(d.vector) +
                    " copy=" + (d.copy_kernel ? "kernel" : "dma") +
                    " subgroup=" + std::to_string(shape.subgroup);

    d.create_kernels();
    d.host_offset_ns = calibrate(d, c.calibrated);
    d.spin_ns = cfg.spin_ns;
    d.shared_queue = cfg.shared_queue;
  }

  const backend::DeviceInfo& info() const noexcept override { return info_; }

  // Cost: vkCreateBuffer per buffer_span (one below maxBufferSize), vkAllocateMemory (or an
  // mmap imported), vkBindBufferMemory per buffer, vkMapMemory.
  std::unique_ptr<backend::Heap> create_heap(size_t nbytes) override {
    const size_t page = d_->import_align;  // 4096 unless imported pages need more
    if (nbytes > d_->heap_limit) return nullptr;
    const size_t size = (std::max<size_t>(nbytes, 1) + page - 1) / page * page;
    if (size > d_->heap_limit) return nullptr;
    // A heap that would take the process past the device's memory budget is refused as the
    // driver would refuse it: the core's out-of-memory ladder runs.
    if (d_->memory_budget && over_budget(size)) return nullptr;
    Allocation a;
    if (!allocate(*d_, size, &a)) return nullptr;
    return std::make_unique<VkHeap>(d_, a);
  }
  std::unique_ptr<backend::Heap> create_staging_heap(size_t nbytes) override {
    const size_t size = (std::max<size_t>(nbytes, 1) + 4095) / 4096 * 4096;
    Allocation a;
    if (!allocate_staging(*d_, size, &a)) return nullptr;
    return std::make_unique<VkHeap>(d_, a);
  }
  uint64_t driver_allocated_bytes() const noexcept override {
    return d_->held.load(std::memory_order_relaxed);
  }
  std::unique_ptr<backend::Queue> create_queue(int priority) override {
    (void)priority;  // queue priorities are fixed when the VkDevice is created
    return make_queue(d_);
  }
  std::unique_ptr<backend::TimelineEvent> create_event() override {
    return std::make_unique<Semaphore>(d_);
  }
  int64_t host_clock_offset_ns() const noexcept override { return d_->host_offset_ns; }

 private:
  // True when `bytes` more of the heaps' memory heap would exceed VK_EXT_memory_budget's
  // budget for this process (heapUsage counts what the process holds there now).
  bool over_budget(uint64_t bytes) const {
    auto budget = make<VkPhysicalDeviceMemoryBudgetPropertiesEXT>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT);
    auto mp2 = make<VkPhysicalDeviceMemoryProperties2>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2);
    mp2.pNext = &budget;
    vkGetPhysicalDeviceMemoryProperties2(d_->phys, &mp2);
    const uint64_t limit = budget.heapBudget[d_->memory_heap];
    const uint64_t used = budget.heapUsage[d_->memory_heap];
    return limit != 0 && (used > limit || bytes > limit - used);
  }

  std::shared_ptr<DeviceShared> d_;
  backend::DeviceInfo info_;
};

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
  bool usable_after_fork() const noexcept override { return !g_started.load(); }
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
    return std::make_unique<Device>(inst.devices[static_cast<size_t>(index)], cfg);
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
