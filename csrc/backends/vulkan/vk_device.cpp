// Opening a device of the vulkan backend, in steps: the memory model, the VkDevice (queues,
// features, extensions), the limits (storage-buffer windows, VkBuffers over large heaps,
// timestamps), the kernels' sizes, imported host pages, the memory sizes and budget, the
// details string, the kernels, the device clock's calibration. The Device it makes answers
// backend.h's questions through the heaps (vk_memory.cpp), queues (vk_queue.cpp) and events
// (vk_semaphore.cpp).
#include "backends/vulkan/vk_device.h"

#include <unistd.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/cpu_info.h"
#include "backends/vulkan/vk_common.h"

namespace mpsrt::vk {

DeviceShared::~DeviceShared() {
  if (device == VK_NULL_HANDLE) return;
  fn.vkDeviceWaitIdle(device);
  for (auto& kv : random_pipelines) fn.vkDestroyPipeline(device, kv.second, nullptr);
  destroy_tensor_kernels();
  for (VkPipeline p : {fill_pipeline, copy16_pipeline, copy4_pipeline}) {
    if (p) fn.vkDestroyPipeline(device, p, nullptr);
  }
  for (VkShaderModule m : {fill_module, copy_module, random_module, random_f64_module}) {
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

// The memory model: discrete on a GPU with memory of its own (discrete, virtual and other
// types) or when MPSRT_VULKAN_MEMORY=discrete forces it; unified on CPU-type and integrated
// devices, whose memory is the host's. Sets d's memory types and what they enable.
void choose_memory_model(DeviceShared& d, const Candidate& c, const VulkanConfig& cfg) {
  d.phys = c.pd;
  d.family = c.family;
  d.discrete = cfg.force_discrete || !(c.type == VK_PHYSICAL_DEVICE_TYPE_CPU ||
                                       c.type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU);
  d.memory_type = d.discrete ? c.local_type : c.memory_type;
  d.staging_type = c.staging_type;
  d.device_address = d.discrete && c.device_address;
  d.memory_budget = c.memory_budget;
}

// Creates the VkDevice with c.queue_count queues of c.family, the features the backend needs
// (and bufferDeviceAddress where d uses it) and the extensions it uses; gets its functions
// and queues.
void create_device(DeviceShared& d, const Candidate& c) {
  std::vector<float> priorities(c.queue_count, 1.0f);
  auto qi = make<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  qi.queueFamilyIndex = c.family;
  qi.queueCount = c.queue_count;
  qi.pQueuePriorities = priorities.data();
  auto f12 =
      make<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  f12.timelineSemaphore = VK_TRUE;
  if (d.device_address) f12.bufferDeviceAddress = VK_TRUE;
  auto f11 =
      make<VkPhysicalDeviceVulkan11Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES);
  if (c.tensor_kernels) {
    f11.storageBuffer16BitAccess = VK_TRUE;
    f12.storageBuffer8BitAccess = VK_TRUE;
    f12.shaderFloat16 = VK_TRUE;
    f12.shaderInt8 = VK_TRUE;
    f12.pNext = &f11;
  }
  auto f2 = make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  f2.pNext = &f12;
  if (c.tensor_kernels) f2.features.shaderInt16 = VK_TRUE;
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
}

// The physical device's properties that the backend reads, in one
// vkGetPhysicalDeviceProperties2 chain: p2 -> drv -> m3 -> sub, then those the device has.
// Not copyable: the chain points into it.
struct Properties {
  VkPhysicalDeviceProperties2 p2 =
      make<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  VkPhysicalDeviceDriverProperties drv =
      make<VkPhysicalDeviceDriverProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES);
  VkPhysicalDeviceMaintenance3Properties m3 = make<VkPhysicalDeviceMaintenance3Properties>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
  VkPhysicalDeviceSubgroupProperties sub = make<VkPhysicalDeviceSubgroupProperties>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
  VkPhysicalDeviceExternalMemoryHostPropertiesEXT hostp =
      make<VkPhysicalDeviceExternalMemoryHostPropertiesEXT>(
          VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT);
  VkPhysicalDeviceMaintenance4Properties m4 = make<VkPhysicalDeviceMaintenance4Properties>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES);
  VkPhysicalDeviceShaderSMBuiltinsPropertiesNV nv =
      make<VkPhysicalDeviceShaderSMBuiltinsPropertiesNV>(
          VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV);
  VkPhysicalDeviceShaderCorePropertiesAMD amd = make<VkPhysicalDeviceShaderCorePropertiesAMD>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD);

  explicit Properties(const Candidate& c) {
    p2.pNext = &drv;
    drv.pNext = &m3;
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
  }
  Properties(const Properties&) = delete;
  Properties& operator=(const Properties&) = delete;

  const VkPhysicalDeviceLimits& limits() const noexcept { return p2.properties.limits; }
};

// Storage-buffer windows (at most 1 GiB, maxStorageBufferRange), the VkBuffers over a heap
// larger than the device's largest one, the timestamps' period and valid bits.
void set_limits(DeviceShared& d, const Candidate& c, const Properties& p) {
  const VkPhysicalDeviceLimits& lim = p.limits();
  d.window_align = std::max<VkDeviceSize>(lim.minStorageBufferOffsetAlignment, 16);
  VkDeviceSize window = std::min<VkDeviceSize>(lim.maxStorageBufferRange, 1u << 30);
  // The largest VkBuffer: maxBufferSize where the device tells it; else what one allocation
  // may be (a VkBuffer that large is what this backend always made there).
  const VkDeviceSize max_buffer =
      c.maintenance4
          ? p.m4.maxBufferSize
          : std::max<VkDeviceSize>(p.m3.maxMemoryAllocationSize, lim.maxStorageBufferRange);
  // Buffers start at multiples of 2 MiB (more than any buffer alignment), and overlap by at
  // least a window.
  const VkDeviceSize granule = VkDeviceSize(2) << 20;
  d.buffer_span = std::max(max_buffer / granule * granule, 2 * granule);
  window = std::min(window, d.buffer_span / 2);
  d.window_bytes = window / d.window_align * d.window_align;
  d.buffer_stride = (d.buffer_span - d.window_bytes) / granule * granule;
  d.timestamp_period = lim.timestampPeriod;
  const uint32_t bits = c.timestamp_bits;
  d.timestamp_mask = bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
}

// What the kernels' sizing needs to know of a device.
struct Shape {
  uint32_t subgroup = 1;         // invocations of a subgroup (warp, wavefront)
  uint32_t max_workgroup = 128;  // invocations of a workgroup at most
  uint32_t max_groups = 65535;   // workgroups of a dispatch at most
  uint32_t sms = 0;              // SMs / CUs; 0 when the device does not tell
  uint32_t threads_per_sm = 0;   // invocations an SM / CU holds at once
};

// The SM count from VK_NV_shader_sm_builtins or VK_AMD_shader_core_properties where the
// device has one of them.
Shape kernel_shape(const Candidate& c, const Properties& p) {
  const VkPhysicalDeviceLimits& lim = p.limits();
  Shape shape;
  shape.subgroup = std::max<uint32_t>(p.sub.subgroupSize, 1);
  shape.max_workgroup =
      std::min(lim.maxComputeWorkGroupInvocations, lim.maxComputeWorkGroupSize[0]);
  shape.max_groups = lim.maxComputeWorkGroupCount[0];
  if (c.nv_sm && p.nv.shaderSMCount > 0) {
    shape.sms = p.nv.shaderSMCount;
    shape.threads_per_sm = p.nv.shaderWarpsPerSM * shape.subgroup;
  } else if (c.amd_core && p.amd.computeUnitsPerShaderArray > 0) {
    const VkPhysicalDeviceShaderCorePropertiesAMD& amd = p.amd;
    shape.sms =
        amd.shaderEngineCount * amd.shaderArraysPerEngineCount * amd.computeUnitsPerShaderArray;
    shape.threads_per_sm = amd.simdPerComputeUnit * amd.wavefrontsPerSimd * amd.wavefrontSize;
  }
  return shape;
}

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

// Heaps of imported pages (VK_EXT_external_memory_host): the alignment they need, and
// whether mmap's pages have it.
void set_import(DeviceShared& d, const Candidate& c, const Properties& p) {
  if (!c.import_host) return;
  const VkDeviceSize page = static_cast<VkDeviceSize>(sysconf(_SC_PAGESIZE));
  d.import_align = std::max<VkDeviceSize>(p.hostp.minImportedHostPointerAlignment, page);
  // mmap gives page-aligned ranges: import only when that is aligned enough.
  d.import_host = d.import_align == page;
}

// The memory heap of d's heaps, the largest heap (d.heap_limit) and info's memory figures.
void size_memory(DeviceShared& d, const Candidate& c, backend::DeviceInfo& info) {
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{};
  const VkPhysicalDeviceMemoryProperties mp =
      memory_properties(c.pd, c.memory_budget ? &budget : nullptr);
  d.memory_heap = mp.memoryTypes[d.memory_type].heapIndex;
  // One heap may be as large as the memory heap (maxMemoryAllocationSize is a soft limit,
  // which NVIDIA exceeds; a refusal is out of memory). On a CPU-type device (lavapipe) the
  // memory is the host's and the heap size a nominal figure the driver does not enforce
  // (lavapipe: 2 GiB): there the host's memory is the limit.
  uint64_t heap_size = mp.memoryHeaps[d.memory_heap].size;
  if (c.type == VK_PHYSICAL_DEVICE_TYPE_CPU) {
    heap_size = std::max(heap_size, cpu::usable_memory_bytes());
  }
  d.heap_limit = heap_size;
  info.total_memory = heap_size;
  // The budget where the driver reports one; else three quarters, as Metal recommends.
  info.recommended_max_memory =
      c.memory_budget ? std::min<uint64_t>(budget.heapBudget[d.memory_heap], heap_size)
                      : heap_size / 4 * 3;
  if (info.recommended_max_memory == 0) info.recommended_max_memory = heap_size / 4 * 3;
  info.max_buffer_size = d.heap_limit;
}

// DeviceProperties.details: the driver, the API version, the queues, the memory model and
// what the kernels' sizing chose.
std::string details(const DeviceShared& d, const Candidate& c, const VulkanConfig& cfg,
                    const Properties& p, const Shape& shape) {
  const uint32_t api = p.p2.properties.apiVersion;
  return std::string("driver=") + p.drv.driverName + " " + p.drv.driverInfo +
         ", api=" + std::to_string(VK_API_VERSION_MAJOR(api)) + "." +
         std::to_string(VK_API_VERSION_MINOR(api)) + "." +
         std::to_string(VK_API_VERSION_PATCH(api)) + ", queues=" + std::to_string(c.queue_count) +
         (cfg.shared_queue ? " (one shared)" : "") +
         ", memory=" + (d.discrete ? "discrete" : "unified") +
         ", kernels: workgroup=" + std::to_string(d.workgroup) +
         " groups=" + std::to_string(d.max_groups) +
         (shape.sms != 0 ? " (" + std::to_string(shape.sms) + " SMs)" : "") +
         " unroll=" + std::to_string(d.unroll) + " vector=" + std::to_string(d.vector) +
         " copy=" + (d.copy_kernel ? "kernel" : "dma") +
         " subgroup=" + std::to_string(shape.subgroup);
}

// Device time (ns) -> host CLOCK_MONOTONIC offset, from VK_EXT_calibrated_timestamps when the
// device offers both domains; 0 (the clocks are taken to be the same) otherwise.
int64_t calibrate(const DeviceShared& d, bool calibrated) {
  if (!calibrated || !vkGetPhysicalDeviceCalibrateableTimeDomainsEXT ||
      !d.fn.vkGetCalibratedTimestampsEXT)
    return 0;
  const std::vector<VkTimeDomainEXT> domains =
      enumerate<VkTimeDomainEXT>([&](uint32_t* n, VkTimeDomainEXT* out) {
        vkGetPhysicalDeviceCalibrateableTimeDomainsEXT(d.phys, n, out);
      });
  const auto has = [&](VkTimeDomainEXT t) {
    return std::find(domains.begin(), domains.end(), t) != domains.end();
  };
  if (!has(VK_TIME_DOMAIN_DEVICE_EXT) || !has(VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT)) return 0;
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

class Device final : public backend::Device {
 public:
  Device(const Candidate& c, const VulkanConfig& cfg) : d_(std::make_shared<DeviceShared>()) {
    DeviceShared& d = *d_;
    choose_memory_model(d, c, cfg);
    create_device(d, c);
    const Properties props(c);
    set_limits(d, c, props);
    const Shape shape = kernel_shape(c, props);
    size_kernels(d, cfg, shape);
    set_import(d, c, props);
    size_memory(d, c, info_);
    info_.name = props.p2.properties.deviceName;
    info_.unified_memory = !d.discrete;
    info_.timestamp_period_ns = d.timestamp_period;
    info_.details = details(d, c, cfg, props, shape);
    info_.cpu_type = c.type == VK_PHYSICAL_DEVICE_TYPE_CPU;
    // Tensor kernels bind each argument as one storage-buffer window from an aligned position.
    if (c.tensor_kernels) info_.kernel_arg_bytes = d.window_bytes - d.window_align;
    d.create_kernels();
    d.host_offset_ns = calibrate(d, c.calibrated);
    d.spin_ns = cfg.spin_ns;
    d.shared_queue = cfg.shared_queue;
  }

  const backend::DeviceInfo& info() const noexcept override { return info_; }
  std::unique_ptr<backend::Heap> create_heap(size_t nbytes) override {
    return vk::create_heap(d_, nbytes);
  }
  std::unique_ptr<backend::Heap> create_staging_heap(size_t nbytes) override {
    return vk::create_staging_heap(d_, nbytes);
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
  std::shared_ptr<DeviceShared> d_;
  backend::DeviceInfo info_;
};

}  // namespace

std::unique_ptr<backend::Device> open_device(const Candidate& c, const VulkanConfig& cfg) {
  return std::make_unique<Device>(c, cfg);
}

}  // namespace mpsrt::vk
