// Memory of the vulkan backend: heaps (backend::Heap) as the device's memory model has them,
// and staging memory. An Allocation is a VkDeviceMemory with VkBuffers over all of it (one, or
// overlapping ones where it is larger than the device's largest VkBuffer): on unified memory of
// a host-visible, host-coherent type, mapped persistently (on devices with
// VK_EXT_external_memory_host, pages of our own imported); on discrete memory of a device-local
// type, never mapped, with a device address; staging memory host-visible and mapped.
#include <sys/mman.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "backends/vulkan/vk_common.h"

namespace mpsrt::vk {
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
// Memory past the heap limit (or, imported, past a.size) is VK_ERROR_OUT_OF_DEVICE_MEMORY.
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
    if (at + bi.size == a.size) break;
  }
  if (*need > d.heap_limit || (a.imported && *need > a.size)) {
    destroy_buffers(d, a);
    return VK_ERROR_OUT_OF_DEVICE_MEMORY;
  }
  return VK_SUCCESS;
}

// `need` bytes of the driver's memory of kind.type for a's buffers. False when the driver is
// out of memory (a's buffers are destroyed then).
bool allocate_memory(DeviceShared& d, Allocation& a, const MemoryKind& kind, VkDeviceSize need) {
  auto flags = make<VkMemoryAllocateFlagsInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO);
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  auto ai = make<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  if (kind.address) ai.pNext = &flags;
  ai.allocationSize = need;
  ai.memoryTypeIndex = kind.type;
  const VkResult r = d.fn.vkAllocateMemory(d.device, &ai, nullptr, &a.memory);
  if (r == VK_SUCCESS) return true;
  destroy_buffers(d, a);
  if (out_of_memory(r)) return false;
  fail("vkAllocateMemory", r);
}

// Binds a's buffers to a.memory and maps it where kind has it (imported pages are mapped
// already). False when the driver is out of memory (everything of `a` is released then).
bool bind_and_map(DeviceShared& d, Allocation& a, const MemoryKind& kind) {
  VkResult r = VK_SUCCESS;
  for (size_t i = 0; i <= a.more.size() && r == VK_SUCCESS; ++i) {
    r = d.fn.vkBindBufferMemory(d.device, i == 0 ? a.buffer : a.more[i - 1], a.memory,
                                buffer_offset(a, i));
  }
  if (r == VK_SUCCESS && kind.map && !a.imported) {
    r = d.fn.vkMapMemory(d.device, a.memory, 0, VK_WHOLE_SIZE, 0, &a.mapped);
  }
  if (r == VK_SUCCESS) return true;
  destroy_buffers(d, a);
  d.fn.vkFreeMemory(d.device, a.memory, nullptr);
  if (a.imported) munmap(a.mapped, a.size);
  if (out_of_memory(r) || r == VK_ERROR_MEMORY_MAP_FAILED) return false;
  fail("vkBindBufferMemory / vkMapMemory", r);
}

// The address of byte 0 of a heap that is not mapped.
uint64_t heap_address(DeviceShared& d, const Allocation& a, const MemoryKind& kind) {
  if (kind.address) {
    // The first VkBuffer starts at the memory's byte 0: its address is the heap's.
    auto info = make<VkBufferDeviceAddressInfo>(VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO);
    info.buffer = a.buffer;
    return d.fn.vkGetBufferDeviceAddress(d.device, &info);
  }
  // A range of its own, 2 MiB-aligned, never handed out again.
  const uint64_t span =
      (a.size + (uint64_t(2) << 20) - 1) / (uint64_t(2) << 20) * (uint64_t(2) << 20);
  return d.next_synthetic_address.fetch_add(span, std::memory_order_relaxed);
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
  const VkResult r = create_buffers(d, a, kind, &need);
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
  if (!a.imported && !allocate_memory(d, a, kind, need)) return false;
  if (!bind_and_map(d, a, kind)) return false;
  if (!kind.map) a.address = heap_address(d, a, kind);
  *out = std::move(a);
  return true;
}

// True when `bytes` more of the heaps' memory heap would exceed VK_EXT_memory_budget's
// budget for this process (heapUsage counts what the process holds there now).
bool over_budget(const DeviceShared& d, uint64_t bytes) {
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget;
  memory_properties(d.phys, &budget);
  const uint64_t limit = budget.heapBudget[d.memory_heap];
  const uint64_t used = budget.heapUsage[d.memory_heap];
  return limit != 0 && (used > limit || bytes > limit - used);
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

std::unique_ptr<backend::Heap> create_heap(const std::shared_ptr<DeviceShared>& d, size_t nbytes) {
  const size_t page = d->import_align;  // 4096 unless imported pages need more
  if (nbytes > d->heap_limit) return nullptr;
  const size_t size = (std::max<size_t>(nbytes, 1) + page - 1) / page * page;
  if (size > d->heap_limit) return nullptr;
  // A heap that would take the process past the device's memory budget is refused as the
  // driver would refuse it: the core's out-of-memory ladder runs.
  if (d->memory_budget && over_budget(*d, size)) return nullptr;
  Allocation a;
  if (!allocate(*d, size, &a)) return nullptr;
  return std::make_unique<VkHeap>(d, a);
}

std::unique_ptr<backend::Heap> create_staging_heap(const std::shared_ptr<DeviceShared>& d,
                                                   size_t nbytes) {
  const size_t size = (std::max<size_t>(nbytes, 1) + 4095) / 4096 * 4096;
  Allocation a;
  if (!allocate_staging(*d, size, &a)) return nullptr;
  return std::make_unique<VkHeap>(d, a);
}

}  // namespace mpsrt::vk
