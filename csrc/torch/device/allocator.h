// The allocators torch uses on the mpsrt device: device memory from mpsrt's caching allocator
// (registered for PrivateUse1), pinned host memory (served through the hooks), and the growth
// of a device storage's bytes.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

#include <cstddef>

namespace mpsrt::torch_glue {

// The deleter of every DataPtr over mpsrt memory (its context is the MpsrtBuffer): a storage
// whose deleter is this one is mpsrt memory.
void free_buffer(void* ctx);

// The device allocator (REGISTER_ALLOCATOR for PrivateUse1): mpsrt's caching allocator on the
// current device. A DataPtr's pointer is the memory's host address on unified memory and its
// device address on discrete memory; its context is the MpsrtBuffer.
c10::DeviceAllocator& device_allocator();

// Pinned host memory (pin_memory(), is_pinned(), DDP's reducer buffers).
c10::Allocator* pinned_allocator();
// True for any address inside a live allocation of the pinned allocator.
bool is_pinned(const void* ptr);

// Regrows `storage` to `newsize` bytes in new device memory, its bytes kept (torch's
// resizePrivateUse1Bytes).
void resize_bytes(const c10::Storage& storage, size_t newsize);

}  // namespace mpsrt::torch_glue
