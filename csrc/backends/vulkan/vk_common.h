// Internals of the vulkan backend, shared by its translation units. Nothing here is seen
// outside csrc/backends/vulkan/ (backend.h stays free of Vulkan types).
//
// Vulkan is reached through volk (compiled into the library): no link-time dependency on the
// loader, so a build with this backend imports where no loader or driver exists, and the
// backend then reports itself unavailable.
#pragma once

#include <volk.h>

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
  uint64_t timestamp_mask = ~uint64_t(0);
  double timestamp_period = 1.0;
  int64_t host_offset_ns = 0;  // device time + this = host steady clock
  int64_t spin_ns = 20000;     // VulkanConfig::spin_ns when the device was opened
  bool shared_queue = false;   // VulkanConfig::shared_queue when the device was opened
  std::atomic<uint64_t> held{0};

  // Kernels (vk_kernels.cpp).
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout fill_layout = VK_NULL_HANDLE;
  VkPipelineLayout random_layout = VK_NULL_HANDLE;
  VkShaderModule fill_module = VK_NULL_HANDLE;
  VkShaderModule random_module = VK_NULL_HANDLE;
  VkPipeline fill_pipeline = VK_NULL_HANDLE;
  std::mutex pipelines_mu;
  std::map<uint32_t, VkPipeline> random_pipelines;

  DeviceShared() = default;
  DeviceShared(const DeviceShared&) = delete;
  DeviceShared& operator=(const DeviceShared&) = delete;
  ~DeviceShared();

  /// Builds the fill pipeline and the layouts (at device open).
  void create_kernels();
  /// The random pipeline for p's op and dtype, built on first use and cached.
  VkPipeline random_pipeline(const backend::RandomParams& p);
  /// Device time (ns) of the host steady clock now.
  uint64_t device_now_ns() const noexcept {
    return static_cast<uint64_t>(host_now_ns() - host_offset_ns);
  }
};

/// Waits until semaphore s[i] reaches v[i] for every i (any = false) or for one of them
/// (any = true): polls the values for d.spin_ns, then blocks in vkWaitSemaphores. timeout_ns
/// < 0 waits forever. Returns false on timeout; throws mpsrt::Error when the device is lost.
/// Cost when already reached: one vkGetSemaphoreCounterValue per semaphore.
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

/// A VkDeviceMemory with one VkBuffer over all of it, mapped persistently where host-visible
/// (unified heaps and staging heaps; discrete heaps are not mapped).
struct Allocation {
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkBuffer buffer = VK_NULL_HANDLE;
  void* mapped = nullptr;
  uint64_t address = 0;  // device address of byte 0 of a heap that is not mapped
  VkDeviceSize size = 0;
  bool imported = false;  // `mapped` is our own mmap()ed range imported into Vulkan
  bool staging = false;
};
/// Allocates `size` bytes (already rounded) of heap memory, as the device's memory model has
/// it (DeviceShared::discrete); false when the driver is out of memory.
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
  VkBuffer buffer() const noexcept { return a_.buffer; }
  bool staging() const noexcept { return a_.staging; }

 private:
  std::shared_ptr<DeviceShared> d_;
  Allocation a_;
};

/// Records kernels into a command buffer (vk_kernels.cpp). `scratch` is a buffer of
/// scratch_bytes the recorder may use (overlapping copies, unaligned random fills).
struct Recorder {
  DeviceShared& d;
  VkCommandBuffer cb;
  VkBuffer scratch;
  VkDeviceSize scratch_bytes;
  /// Makes every earlier transfer / compute write visible to later commands.
  void barrier() const;
  void fill(VkBuffer buf, VkDeviceSize buf_size, VkDeviceSize offset, VkDeviceSize n,
            uint64_t pattern8) const;
  void copy(VkBuffer src, VkDeviceSize src_off, VkBuffer dst, VkDeviceSize dst_off,
            VkDeviceSize n) const;
  void random(VkBuffer buf, VkDeviceSize buf_size, VkDeviceSize offset,
              const backend::RandomParams& p) const;
};

/// True when the kernels implement op with this output dtype (mpsrt::random_supported()).
using backend::random_supported;

/// Queues (vk_queue.cpp).
std::unique_ptr<backend::Queue> make_queue(std::shared_ptr<DeviceShared> d);

}  // namespace mpsrt::vk
