// The allocators torch uses on the mpsrt device: see allocator.h.
#include "device/allocator.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "device/runtime_client.h"

namespace mpsrt::torch_glue {

void free_buffer(void* ctx) {
  if (g_api != nullptr && ctx != nullptr) g_api->buffer_free(static_cast<MpsrtBuffer*>(ctx));
}

namespace {

void no_free(void*) {}

// One of torch.cuda's statistic arrays (all, small_pool, large_pool) from mpsrt's memory_stats
// keys ("<name>.<pool>.<field>").
void fill_stat_array(c10::CachingDeviceAllocator::StatArray& arr, const char* name,
                     std::unordered_map<std::string, int64_t>& m) {
  const char* pools[] = {"all", "small_pool", "large_pool"};
  for (int p = 0; p < 3; ++p) {
    std::string base = std::string(name) + "." + pools[p] + ".";
    arr[p].current = m[base + "current"];
    arr[p].peak = m[base + "peak"];
    arr[p].allocated = m[base + "allocated"];
    arr[p].freed = m[base + "freed"];
  }
}

struct Allocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    auto d = current_index();
    c10::Device dev(kDev, d);
    if (nbytes == 0) return {nullptr, nullptr, &no_free, dev};
    MpsrtBuffer* b = nullptr;
    void* host = nullptr;
    check(api().buffer_alloc(nbytes, d, &b, &host));
    // Unified memory: the host address. Discrete memory: the device address (unique, never
    // dereferenced by the host; buffer_of() finds the buffer and offset from the context).
    void* data = host != nullptr ? host : reinterpret_cast<void*>(api().buffer_address(b));
    return {data, b, &free_buffer, dev};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    // Given bare pointers: only host addresses (unified memory) can be copied here.
    TORCH_CHECK(api().host_visible(current_index()) == 1,
                "[torch] copying the raw bytes of an mpsrt storage (Allocator::copy_data, e.g. a "
                "copy-on-write clone) needs host-visible memory; this device's memory is "
                "discrete: copy the tensor instead (t.clone())");
    sync_current(current_index());
    std::memcpy(dest, src, count);
  }
  bool initialized() override { return g_api != nullptr; }
  void emptyCache(c10::MempoolId_t) override {
    for (int d = 0; d < api().device_count(); ++d) check(api().empty_cache(d));
  }
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (ptr.get_context() == nullptr || ptr.get_deleter() != &free_buffer) return;
    check(api().buffer_record_stream(static_cast<MpsrtBuffer*>(ptr.get_context()),
                                     stream_of(stream)));
  }
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats stats;
    std::unordered_map<std::string, int64_t> m;
    check(api().memory_stats(
        device,
        [](void* ctx, const char* k, int64_t v) {
          (*static_cast<std::unordered_map<std::string, int64_t>*>(ctx))[k] = v;
        },
        &m));
    fill_stat_array(stats.allocation, "allocation", m);
    fill_stat_array(stats.segment, "segment", m);
    fill_stat_array(stats.active, "active", m);
    fill_stat_array(stats.inactive_split, "inactive_split", m);
    fill_stat_array(stats.allocated_bytes, "allocated_bytes", m);
    fill_stat_array(stats.reserved_bytes, "reserved_bytes", m);
    fill_stat_array(stats.active_bytes, "active_bytes", m);
    fill_stat_array(stats.inactive_split_bytes, "inactive_split_bytes", m);
    fill_stat_array(stats.requested_bytes, "requested_bytes", m);
    stats.num_alloc_retries = m["num_alloc_retries"];
    stats.num_ooms = m["num_ooms"];
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check(api().reset_accumulated_memory_stats(device));
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    check(api().reset_peak_memory_stats(device));
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    uint64_t free_bytes = 0, total_bytes = 0;
    check(api().mem_get_info(device, &free_bytes, &total_bytes));
    return {static_cast<size_t>(free_bytes), static_cast<size_t>(total_bytes)};
  }
};

Allocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator)

// Page-locked host memory is what a GPU copies from asynchronously; mpsrt's host-visible
// devices need nothing special, so "pinned" memory is host memory this allocator made and can
// recognise (torch asks isPinnedPtr for pin_memory(), is_pinned() and DDP's reducer buffers).
// It is also the device's host allocator (at::getHostAllocator(PrivateUse1): torch.accelerator's
// empty_host_cache / host memory stats): it caches nothing, so emptying the cache has nothing
// to free, and a block needs no event (it is freed when its tensor is, as torch's CPU memory).
struct PinnedAllocator final : at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes == 0 ? nullptr : c10::alloc_cpu(nbytes);
    if (p != nullptr) {
      std::lock_guard<std::mutex> lock(mu());
      live().emplace(reinterpret_cast<uintptr_t>(p), nbytes);
      Stats& st = stats();
      for (c10::CachingAllocator::Stat* x : {&st.s.active_requests, &st.s.allocations}) {
        x->increase(1);
      }
      for (c10::CachingAllocator::Stat* x : {&st.s.active_bytes, &st.s.allocated_bytes}) {
        x->increase(nbytes);
      }
      ++st.s.num_host_alloc;
    }
    return {p, p, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mu());
    return stats().s;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mu());
    at::HostStats& st = stats().s;
    for (c10::CachingAllocator::Stat* x :
         {&st.active_requests, &st.active_bytes, &st.allocations, &st.allocated_bytes}) {
      x->reset_accumulated();
    }
    st.num_host_alloc = st.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mu());
    at::HostStats& st = stats().s;
    for (c10::CachingAllocator::Stat* x :
         {&st.active_requests, &st.active_bytes, &st.allocations, &st.allocated_bytes}) {
      x->reset_peak();
    }
  }
  // True for any address inside a live allocation of this allocator.
  static bool contains(const void* ptr) {
    const auto a = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mu());
    auto it = live().upper_bound(a);
    if (it == live().begin()) return false;
    --it;
    return a < it->first + it->second;
  }

 private:
  struct Stats {
    at::HostStats s;
  };
  static void release(void* p) {
    if (p == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu());
      const auto it = live().find(reinterpret_cast<uintptr_t>(p));
      if (it != live().end()) {
        Stats& st = stats();
        for (c10::CachingAllocator::Stat* x : {&st.s.active_requests, &st.s.allocations}) {
          x->decrease(1);
        }
        for (c10::CachingAllocator::Stat* x : {&st.s.active_bytes, &st.s.allocated_bytes}) {
          x->decrease(it->second);
        }
        ++st.s.num_host_free;
        live().erase(it);
      }
    }
    c10::free_cpu(p);
  }
  // Leaked on purpose: tensors may be freed during static destruction.
  static std::mutex& mu() {
    static auto* m = new std::mutex;
    return *m;
  }
  static std::map<uintptr_t, size_t>& live() {
    static auto* m = new std::map<uintptr_t, size_t>;
    return *m;
  }
  static Stats& stats() {
    static auto* st = new Stats;
    return *st;
  }
};
PinnedAllocator g_pinned;
REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_pinned)

}  // namespace

c10::DeviceAllocator& device_allocator() {
  return g_allocator;
}

c10::Allocator* pinned_allocator() {
  return &g_pinned;
}

bool is_pinned(const void* ptr) {
  return PinnedAllocator::contains(ptr);
}

void resize_bytes(const c10::Storage& storage, size_t newsize) {
  auto* impl = storage.unsafeGetStorageImpl();
  size_t old = impl->nbytes();
  c10::DataPtr fresh = g_allocator.allocate(newsize);
  if (old > 0 && newsize > 0) {
    const c10::DataPtr& from = impl->data_ptr();
    auto* src = from.get_deleter() == &free_buffer
                    ? static_cast<const MpsrtBuffer*>(from.get_context())
                    : nullptr;
    if (src != nullptr && api().buffer_host_ptr(src) == nullptr) {
      // Discrete memory: a device copy on the current stream (the host addresses neither).
      check(api().buffer_copy(static_cast<MpsrtBuffer*>(fresh.get_context()), 0, src, 0,
                              std::min(old, newsize), current_stream(fresh.device().index())));
    } else {
      sync_current(fresh.device().index());
      std::memcpy(fresh.get(), impl->data(), std::min(old, newsize));
    }
  }
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(newsize);
}

}  // namespace mpsrt::torch_glue
