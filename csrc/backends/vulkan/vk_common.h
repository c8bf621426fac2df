// Internals of the vulkan backend, shared by its translation units. Nothing here is seen
// outside csrc/backends/vulkan/ (backend.h stays free of Vulkan types).
//
// Vulkan is reached through volk (compiled into the library): no link-time dependency on the
// loader, so a build with this backend imports where no loader or driver exists, and the
// backend then reports itself unavailable.
#pragma once

#include <volk.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/backend.h"

namespace mpsrt::vk {

/// "VK_ERROR_OUT_OF_DEVICE_MEMORY" and so on.
const char* result_name(VkResult r) noexcept;
/// Throws mpsrt::Error "[vulkan] <what> failed: <result>".
[[noreturn]] void fail(const std::string& what, VkResult r);
inline void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) fail(what, r);
}

/// A zero-initialised Vulkan structure of type T with its sType set.
template <class T>
T make(VkStructureType type) noexcept {
  T v{};
  v.sType = type;
  return v;
}

/// Nanoseconds of the host's steady clock (CLOCK_MONOTONIC on Linux).
int64_t host_now_ns() noexcept;

/// The items of a Vulkan two-call enumeration: `call(&n, nullptr)` counts them,
/// `call(&n, data)` fills them (vkEnumeratePhysicalDevices and the like, through a lambda).
template <class T, class Call>
std::vector<T> enumerate(Call&& call) {
  uint32_t n = 0;
  call(&n, nullptr);
  std::vector<T> out(n);
  call(&n, out.data());
  out.resize(n);
  return out;
}

/// The memory types and heaps of `pd`; with `budget`, also VK_EXT_memory_budget's figures
/// there (the device must have the extension).
VkPhysicalDeviceMemoryProperties memory_properties(
    VkPhysicalDevice pd, VkPhysicalDeviceMemoryBudgetPropertiesEXT* budget = nullptr) noexcept;

/// Push constants of random.comp (std430 layout, 80 bytes).
struct RandomPush {
  double da, db;
  uint32_t seed[2], block0[2], low[2], range[2], thresh[2];
  uint32_t nblocks, e_lo, e_hi, dst_off;
  float fa, fb;
};
static_assert(sizeof(RandomPush) == 80, "random.comp push constants");

/// Push constants of fill.comp.
struct FillPush {
  uint32_t first, end, pat[2];
};

/// Push constants of copy.comp.
struct CopyPush {
  uint32_t src, dst, n;
};

/// What the device, its heaps, queues and events share. Owned through shared_ptr so that the
/// VkDevice is destroyed only after the last object that uses it.
struct DeviceShared {
  VkPhysicalDevice phys = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  VolkDeviceTable fn{};
  uint32_t family = 0;
  std::vector<VkQueue> queues;                  // of `family`
  std::unique_ptr<std::mutex[]> queue_mutexes;  // vkQueueSubmit is externally synchronised
  std::atomic<uint32_t> next_queue{0};
  uint32_t memory_type = 0;  // the memory type of heaps (allocate()): see `discrete`
  uint32_t memory_heap = 0;  // its memory heap (the memory budget's)
  // The memory model, decided when the device is opened. Unified: heaps are host-visible,
  // coherent memory (device-local preferred), mapped for their life. Discrete: heaps are
  // device-local memory that is not host-visible where the device has such a type, never
  // mapped; the core stages host access through staging heaps (allocate_staging()).
  bool discrete = false;
  uint32_t staging_type = 0;  // host-visible, coherent; host-cached and not device-local preferred
  bool device_address = false;  // bufferDeviceAddress is enabled: discrete heaps' addresses
  bool memory_budget = false;   // VK_EXT_memory_budget is enabled: create_heap() stays within it
  // Discrete heaps' addresses where the device has no buffer device addresses: ranges taken in
  // turn, never reused, so that they are unique among live heaps.
  std::atomic<uint64_t> next_synthetic_address{uint64_t(1) << 44};
  // Heaps are pages of our own (mmap) imported with VK_EXT_external_memory_host, on devices
  // whose memory is the host's (cpu / integrated types): releasing a heap then returns its
  // pages to the system at once. A driver that takes heaps from malloc (lavapipe) may keep
  // them, and the process's resident memory creeps up in a long run.
  std::atomic<bool> import_host{false};
  VkDeviceSize import_align = 4096;  // minImportedHostPointerAlignment
  uint64_t heap_limit = 0;           // largest heap create_heap accepts (the memory heap's size)
  VkDeviceSize window_align = 16;    // storage-buffer offset alignment, at least 16
  VkDeviceSize window_bytes = 0;     // bytes a storage-buffer window spans (a multiple of 16)
  // A heap larger than buffer_span bytes (the largest VkBuffer the device makes) has several
  // VkBuffers over its one VkDeviceMemory, one every buffer_stride bytes, each buffer_span long
  // (the last one to the heap's end): they overlap by buffer_span - buffer_stride >=
  // window_bytes, so every window and copy region of at most window_bytes lies inside one.
  VkDeviceSize buffer_span = 0;
  VkDeviceSize buffer_stride = 0;
  // Kernel sizing (VulkanConfig and the device's properties).
  uint32_t workgroup = 256;    // invocations per workgroup (local_size_x of every kernel)
  uint32_t max_groups = 4096;  // workgroups per dispatch at most (the grid-stride loops cover more)
  uint32_t unroll = 2;         // vectors / Philox blocks per invocation and loop step
  uint32_t vector = 16;        // widest access in bytes: 16 or 4
  bool copy_kernel = true;     // device-to-device copies as copy.comp where alignment allows
  uint64_t timestamp_mask = ~uint64_t(0);
  double timestamp_period = 1.0;
  int64_t host_offset_ns = 0;  // device time + this = host steady clock
  int64_t spin_ns = 20000;     // VulkanConfig::spin_ns when the device was opened
  bool shared_queue = false;   // VulkanConfig::shared_queue when the device was opened
  std::atomic<uint64_t> held{0};

  // Kernels (vk_kernels.cpp).
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;       // one storage buffer
  VkDescriptorSetLayout copy_set_layout = VK_NULL_HANDLE;  // two: source, destination
  VkPipelineLayout fill_layout = VK_NULL_HANDLE;
  VkPipelineLayout copy_layout = VK_NULL_HANDLE;
  VkPipelineLayout random_layout = VK_NULL_HANDLE;
  VkShaderModule fill_module = VK_NULL_HANDLE;
  VkShaderModule copy_module = VK_NULL_HANDLE;
  VkShaderModule random_module = VK_NULL_HANDLE;      // random.comp: every dtype but float64
  VkShaderModule random_f64_module = VK_NULL_HANDLE;  // -DMPSRT_RANDOM_F64: float64 outputs
  VkPipeline fill_pipeline = VK_NULL_HANDLE;
  VkPipeline copy16_pipeline = VK_NULL_HANDLE;  // source and destination agree mod 16
  VkPipeline copy4_pipeline = VK_NULL_HANDLE;   // mod 4
  std::mutex pipelines_mu;
  std::map<uint32_t, VkPipeline> random_pipelines;
  // Tensor kernels (csrc/kernels/, vk_tensor_kernels.cpp): per argument count a set layout
  // (push descriptors) and a pipeline layout (128 bytes of push constants); per kernel a module;
  // per kernel and specialisation a pipeline. Built on first use, under pipelines_mu.
  VkDescriptorSetLayout tensor_set_layouts[backend::KernelLaunch::kMaxArgs + 1] = {};
  VkPipelineLayout tensor_layouts[backend::KernelLaunch::kMaxArgs + 1] = {};
  std::vector<VkShaderModule> tensor_modules;
  std::map<std::vector<uint32_t>, VkPipeline> tensor_pipelines;

  DeviceShared() = default;
  DeviceShared(const DeviceShared&) = delete;
  DeviceShared& operator=(const DeviceShared&) = delete;
  ~DeviceShared();  // waits for the device, destroys the kernels and the VkDevice

  /// Builds the fill and copy pipelines and the layouts (at device open).
  void create_kernels();
  /// Workgroups for a dispatch of `items` work items (each invocation takes `unroll` per step
  /// of its grid-stride loop): enough to cover them, at most max_groups, at least 1.
  uint32_t groups(uint64_t items) const noexcept;
  /// The random pipeline for p's op and dtype, built on first use and cached.
  VkPipeline random_pipeline(const backend::RandomParams& p);
  /// The pipeline of a tensor kernel launch (its kernel and specialisation) and its layout,
  /// built on first use and cached.
  VkPipeline tensor_pipeline(const backend::KernelLaunch& k, VkPipelineLayout* layout);
  void destroy_tensor_kernels() noexcept;
  /// Device time (ns) of the host steady clock now.
  uint64_t device_now_ns() const noexcept {
    return static_cast<uint64_t>(host_now_ns() - host_offset_ns);
  }
};

/// Semaphores (vk_semaphore.cpp). Waits until semaphore s[i] reaches v[i] for every i (any = false)
/// or for one of them (any = true): polls the values for d.spin_ns, then blocks in
/// vkWaitSemaphores. timeout_ns < 0 waits forever. Returns false on timeout; throws mpsrt::Error
/// when the device is lost. Cost when already reached: one vkGetSemaphoreCounterValue per
/// semaphore.
bool wait_semaphores(const DeviceShared& d, const VkSemaphore* s, const uint64_t* v, uint32_t n,
                     bool any, int64_t timeout_ns);

/// A timeline VkSemaphore as a backend event (events, and the queues' completion timelines).
/// A host signal never lowers the value; whoever signals it from the host makes sure no
/// device signal of a lower value is still pending (Vulkan forbids that).
class Semaphore final : public backend::TimelineEvent {
 public:
  explicit Semaphore(std::shared_ptr<DeviceShared> d);
  ~Semaphore() override;
  Semaphore(const Semaphore&) = delete;
  Semaphore& operator=(const Semaphore&) = delete;

  void signal(uint64_t v) override;
  bool wait(uint64_t target, int64_t timeout_ns) override;
  bool wait_either(uint64_t target, backend::TimelineEvent& other, uint64_t other_target,
                   int64_t timeout_ns) override;
  uint64_t value() const override;
  VkSemaphore handle() const noexcept { return sem_; }

 private:
  std::shared_ptr<DeviceShared> d_;
  VkSemaphore sem_ = VK_NULL_HANDLE;
  std::mutex mu_;  // host signals
};

/// A VkDeviceMemory with VkBuffers over all of it (one unless it is larger than
/// DeviceShared::buffer_span), mapped persistently where host-visible (unified heaps and
/// staging heaps; discrete heaps are not mapped).
struct Allocation {
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkBuffer buffer = VK_NULL_HANDLE;  // bytes [0, min(size, buffer_span))
  std::vector<VkBuffer> more;        // more[i]: bytes [(i + 1) stride, + buffer_span) or to the end
  VkDeviceSize stride = 0;           // buffer_stride where `more` is not empty
  void* mapped = nullptr;
  uint64_t address = 0;  // device address of byte 0 of a heap that is not mapped
  VkDeviceSize size = 0;
  bool imported = false;  // `mapped` is our own mmap()ed range imported into Vulkan
  bool staging = false;   // host memory for transfers (copies to and from it are vkCmdCopyBuffer)

  /// The VkBuffer that holds the bytes [offset, offset + n) for any n <= window_bytes (within
  /// the allocation); *first is the allocation's offset of that buffer's byte 0.
  VkBuffer locate(VkDeviceSize offset, VkDeviceSize* first) const noexcept {
    if (more.empty()) {
      *first = 0;
      return buffer;
    }
    const VkDeviceSize i = std::min<VkDeviceSize>(offset / stride, more.size());
    *first = i * stride;
    return i == 0 ? buffer : more[i - 1];
  }
};
/// Memory (vk_memory.cpp). Allocates `size` bytes (already rounded) of heap memory, as the
/// device's memory model has it (DeviceShared::discrete); false when the driver is out of memory.
bool allocate(DeviceShared& d, VkDeviceSize size, Allocation* out);
/// Allocates `size` bytes of staging memory (DeviceShared::staging_type, mapped); false when
/// the driver is out of memory.
bool allocate_staging(DeviceShared& d, VkDeviceSize size, Allocation* out);
void release(DeviceShared& d, Allocation& a) noexcept;

class VkHeap final : public backend::Heap {
 public:
  VkHeap(std::shared_ptr<DeviceShared> d, const Allocation& a);
  ~VkHeap() override;
  size_t size() const noexcept override { return static_cast<size_t>(a_.size); }
  void* host_ptr() const noexcept override { return a_.mapped; }
  uint64_t address() const noexcept override {
    return a_.mapped != nullptr ? reinterpret_cast<uint64_t>(a_.mapped) : a_.address;
  }
  const Allocation& allocation() const noexcept { return a_; }
  /// Host memory for transfers: copies to and from it are vkCmdCopyBuffer, never copy.comp.
  bool staging() const noexcept { return a_.staging; }

 private:
  std::shared_ptr<DeviceShared> d_;
  Allocation a_;
};

/// backend::Device::create_heap: a heap of at least `nbytes` (rounded to pages), nullptr when
/// it is larger than DeviceShared::heap_limit, would pass VK_EXT_memory_budget's budget, or the
/// driver is out of memory. Cost: vkCreateBuffer per buffer_span (one below maxBufferSize),
/// vkAllocateMemory (or an mmap imported), vkBindBufferMemory per buffer, vkMapMemory.
std::unique_ptr<backend::Heap> create_heap(const std::shared_ptr<DeviceShared>& d, size_t nbytes);
/// backend::Device::create_staging_heap: staging memory of at least `nbytes` (rounded to
/// 4 KiB), nullptr when the driver is out of memory.
std::unique_ptr<backend::Heap> create_staging_heap(const std::shared_ptr<DeviceShared>& d,
                                                   size_t nbytes);

/// Records kernels into a command buffer (vk_kernels.cpp). `scratch` is a buffer (of at least
/// 64 KiB, a multiple of 16 bytes, one VkBuffer) the recorder may use (overlapping copies,
/// unaligned random fills).
struct Recorder {
  DeviceShared& d;
  VkCommandBuffer cb;
  const Allocation& scratch;
  /// Makes every earlier transfer / compute write visible to later commands.
  void barrier() const;
  void fill(const Allocation& a, VkDeviceSize offset, VkDeviceSize n, uint64_t pattern8) const;
  /// Copies n bytes; the ranges may overlap. `dma`: with vkCmdCopyBuffer (a side is staging
  /// memory), else with copy.comp where the offsets agree mod 4 and the setting allows.
  void copy(const Allocation& src, VkDeviceSize src_off, const Allocation& dst,
            VkDeviceSize dst_off, VkDeviceSize n, bool dma) const;
  void random(const Allocation& a, VkDeviceSize offset, const backend::RandomParams& p) const;
  /// A tensor kernel; k's arguments' heaps are VkHeaps.
  void dispatch(const backend::KernelLaunch& k) const;

 private:
  void copy_region(const Allocation& src, VkDeviceSize src_off, const Allocation& dst,
                   VkDeviceSize dst_off, VkDeviceSize n, bool dma) const;
};

/// True when the kernels implement op with this output dtype (mpsrt::random_supported()).
using backend::random_supported;

/// Queues (vk_queue.cpp).
std::unique_ptr<backend::Queue> make_queue(std::shared_ptr<DeviceShared> d);

}  // namespace mpsrt::vk
