// mpsrt/testing.h: hooks for mpsrt's own tests and benchmarks.
#include "mpsrt/testing.h"

#include <exception>
#include <vector>

#include "core/allocator/caching_allocator.h"
#include "core/event.h"
#include "core/runtime.h"
#include "core/stream.h"
#include "mpsrt/error.h"

namespace mpsrt::testing {

void reset_runtime(const std::map<std::string, std::string>* env) {
  std::vector<detail::DeviceContext*> open;
  try {
    open = detail::Runtime::get().open_devices();
  } catch (const std::exception&) {  // a runtime that failed to start: nothing is live
  }
  for (detail::DeviceContext* d : open) {
    const uint64_t live = d->allocator().allocated_bytes();
    if (live != 0) {
      detail::throw_error("[runtime] _reset_runtime: " + std::to_string(live) +
                          " bytes of live Buffers on device " + std::to_string(d->index()) +
                          "; delete them first");
    }
    // An Event refers to its device, which the reset destroys.
    if (const size_t events = d->events().in_use()) {
      detail::throw_error("[runtime] _reset_runtime: " + std::to_string(events) +
                          " live Event(s) on device " + std::to_string(d->index()) +
                          "; delete them first");
    }
  }
  if (env == nullptr) {
    detail::Runtime::reset(nullptr);
    return;
  }
  const detail::EnvLookup lookup = [env](const char* name) -> const char* {
    auto it = env->find(name);
    return it == env->end() ? nullptr : it->second.c_str();
  };
  detail::Runtime::reset(&lookup);
}

struct RawHeap::Impl {
  std::unique_ptr<backend::Heap> heap;
  size_t nbytes = 0;
  int device = 0;
  detail::StreamImpl& stream() {
    return detail::Runtime::get().device(device).streams().default_stream();
  }
};

RawHeap::RawHeap(size_t nbytes, int device) : impl_(std::make_unique<Impl>()) {
  detail::DeviceContext& d = detail::Runtime::get().device(device);
  impl_->device = d.index();
  impl_->heap = d.backend_device().create_heap(nbytes);
  if (!impl_->heap) {
    detail::throw_oom("[bench] could not map " + std::to_string(nbytes) + " bytes");
  }
  impl_->nbytes = nbytes;
}

RawHeap::~RawHeap() {
  try {
    detail::Runtime::get().device(impl_->device).synchronize();
  } catch (...) {  // a failed command already reported; the memory must still go back
  }
}

size_t RawHeap::nbytes() const noexcept {
  return impl_->nbytes;
}

uint8_t* RawHeap::host() const {
  auto* p = static_cast<uint8_t*>(impl_->heap->host_ptr());
  if (p == nullptr) detail::throw_error("[bench] heap is not host-visible");
  return p;
}

void RawHeap::fill(uint64_t value, unsigned pattern_size) {
  if (pattern_size != 1 && pattern_size != 2 && pattern_size != 4 && pattern_size != 8) {
    detail::throw_invalid("[bench] pattern_size must be 1, 2, 4 or 8");
  }
  const size_t n = impl_->nbytes / pattern_size * pattern_size;
  backend::Heap* h = impl_->heap.get();
  impl_->stream().encode({detail::prof::Op::Fill}, [&](backend::CommandBuffer& cb) {
    cb.fill({h, 0}, n, value, pattern_size);
  });
}

void RawHeap::copy_from(const RawHeap& src) {
  if (src.impl_->nbytes != impl_->nbytes) detail::throw_invalid("[bench] heaps differ in size");
  backend::Heap* s = src.impl_->heap.get();
  backend::Heap* dst = impl_->heap.get();
  const size_t n = impl_->nbytes;
  impl_->stream().encode({detail::prof::Op::Copy}, [&](backend::CommandBuffer& cb) {
    cb.copy({s, 0}, {dst, 0}, n);
  });
}

}  // namespace mpsrt::testing
