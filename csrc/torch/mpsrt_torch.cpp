// The PyTorch device "mpsrt" (PrivateUse1): the glue torch calls. `import mpsrt.torch` compiles
// this one translation unit against the installed torch (torch.utils.cpp_extension.load), loads
// it with torch.ops.load_library and calls mpsrt_torch::_init with the address of mpsrt's C API
// table (the capsule mpsrt._C._c_api). Everything here reaches the runtime through that table
// only (include/mpsrt/c_api.h): the process keeps ONE runtime, the one mpsrt._C holds.
//
// What it registers: a DeviceGuardImpl (devices, torch.Stream <-> mpsrt streams, torch.Event
// <-> mpsrt events), a c10::DeviceAllocator over mpsrt's caching allocator, PrivateUse1 hooks
// (generators: mpsrt's Philox generators), and operators: empty/empty_strided/as_strided/
// resize_/set_ and the per-device views (view, _reshape_alias, unfold, view_as_real/complex)
// natively; fills (fill_, zero_), device-to-device copies and the random ops
// (uniform_, normal_, random_, bernoulli_, native_dropout) on mpsrt's own kernels on the current
// stream; host<->device copies; and a boxed fallback that runs every other aten operator's CPU
// kernel on CPU tensors that alias the device memory, after the current stream's queued work, with
// the CPU allocations it makes served by mpsrt (so new outputs are mpsrt memory already), each op a
// named interval in an mpsrt profiler session.
//
// Memory models (mpsrt's DeviceProperties::unified_memory). Unified: the storage's data pointer
// is the host address of the memory and everything above aliases it. Discrete: the data pointer
// is the memory's device address, which the host cannot dereference; host <-> device copies go
// through mpsrt's staging path (C API buffer_copy_to_host / buffer_copy_from_host), fills and
// random ops that mpsrt's kernels cannot do directly (strided tensors, other dtypes) work on a
// host copy of the bytes they touch, and the boxed fallback refuses an op with mpsrt tensors:
// it has no GPU kernel yet and the memory is not host-visible.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "mpsrt/c_api.h"

namespace {

constexpr auto kDev = c10::DeviceType::PrivateUse1;
const MpsrtCApi* g_api = nullptr;

const MpsrtCApi& api() {
  TORCH_CHECK(g_api != nullptr,
              "[torch] the mpsrt device is not initialised; `import mpsrt.torch` first");
  return *g_api;
}

// Maps an mpsrt failure to torch's error types (OOM -> torch.OutOfMemoryError, bad value ->
// ValueError, else RuntimeError), keeping mpsrt's message.
void check(MpsrtStatus st) {
  if (st == MPSRT_OK) return;
  std::string msg = api().last_error();
  TORCH_CHECK_WITH(OutOfMemoryError, st != MPSRT_ERR_OOM, msg);
  TORCH_CHECK_VALUE(st != MPSRT_ERR_VALUE, msg);
  TORCH_CHECK(false, msg);
}

c10::DeviceIndex current_index() {
  const int d = api().current_device();
  // 0 with an error when the runtime cannot start (e.g. a forked child): mpsrt's reason.
  TORCH_CHECK(d != 0 || *api().last_error() == '\0', api().last_error());
  return static_cast<c10::DeviceIndex>(d);
}

// The device's current stream (raises mpsrt's error when there is none to give).
MpsrtStream* current_stream(c10::DeviceIndex d) {
  MpsrtStream* s = api().stream_current(d);
  TORCH_CHECK(s != nullptr, api().last_error());
  return s;
}

void check_index(c10::DeviceIndex d) {
  int n = api().device_count();
  // No devices because the runtime cannot start (e.g. a forked child): mpsrt's reason.
  TORCH_CHECK(n > 0 || *api().last_error() == '\0', api().last_error());
  TORCH_CHECK_INDEX(d >= 0 && d < n, "The device index is out of range. It must be in [0, ", n,
                    "), but got ", static_cast<int>(d), ".");
}

MpsrtStream* stream_of(const c10::Stream& s) {
  return reinterpret_cast<MpsrtStream*>(static_cast<intptr_t>(s.id()));
}
c10::Stream torch_stream(MpsrtStream* s) {
  TORCH_CHECK(s != nullptr, api().last_error());
  auto d = static_cast<c10::DeviceIndex>(api().stream_device(s));
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDev, d),
                     static_cast<c10::StreamId>(reinterpret_cast<intptr_t>(s)));
}

// Work queued on the device's current stream completes before the host touches its memory.
void sync_current(c10::DeviceIndex d) {
  check(api().stream_synchronize(current_stream(d)));
}

// ------------------------------------------------------------------ allocator
void free_buffer(void* ctx) {
  if (g_api != nullptr && ctx != nullptr) g_api->buffer_free(static_cast<MpsrtBuffer*>(ctx));
}
void no_free(void*) {}

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
    using namespace c10::CachingDeviceAllocator;
    DeviceStats stats;
    std::unordered_map<std::string, int64_t> m;
    check(api().memory_stats(
        device,
        [](void* ctx, const char* k, int64_t v) {
          (*static_cast<std::unordered_map<std::string, int64_t>*>(ctx))[k] = v;
        },
        &m));
    auto fill = [&](StatArray& arr, const char* name) {
      const char* pools[] = {"all", "small_pool", "large_pool"};
      for (int p = 0; p < 3; ++p) {
        std::string base = std::string(name) + "." + pools[p] + ".";
        arr[p].current = m[base + "current"];
        arr[p].peak = m[base + "peak"];
        arr[p].allocated = m[base + "allocated"];
        arr[p].freed = m[base + "freed"];
      }
    };
    fill(stats.allocation, "allocation");
    fill(stats.segment, "segment");
    fill(stats.active, "active");
    fill(stats.inactive_split, "inactive_split");
    fill(stats.allocated_bytes, "allocated_bytes");
    fill(stats.reserved_bytes, "reserved_bytes");
    fill(stats.active_bytes, "active_bytes");
    fill(stats.inactive_split_bytes, "inactive_split_bytes");
    fill(stats.requested_bytes, "requested_bytes");
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

// ------------------------------------------------------------------ generators
// A torch.Generator on the mpsrt device: one of mpsrt's Philox generators. The default
// generator of a device holds no handle and names "the device's default generator" at each
// call, so torch's default generator and mpsrt's (mpsrt.manual_seed, mpsrt.rand) are one.
struct MpsrtGeneratorImpl final : c10::GeneratorImpl {
  MpsrtGeneratorImpl(c10::DeviceIndex d, MpsrtGenerator* handle)
      : c10::GeneratorImpl(c10::Device(kDev, d),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        handle_(handle) {}
  ~MpsrtGeneratorImpl() override {
    if (handle_ != nullptr && g_api != nullptr) g_api->generator_destroy(handle_);
  }
  static c10::DeviceType device_type() { return kDev; }
  MpsrtGenerator* handle() const { return handle_; }
  int index() const { return device_.index(); }

  void set_current_seed(uint64_t seed) override {
    check(api().generator_manual_seed(handle_, index(), seed));
  }
  void set_offset(uint64_t offset) override {
    check(api().generator_set_offset(handle_, index(), offset));
  }
  uint64_t get_offset() const override {
    uint64_t v = 0;
    check(api().generator_offset(handle_, index(), &v));
    return v;
  }
  uint64_t current_seed() const override {
    uint64_t v = 0;
    check(api().generator_initial_seed(handle_, index(), &v));
    return v;
  }
  uint64_t seed() override {
    uint64_t v = 0;
    check(api().generator_seed(handle_, index(), &v));
    return v;
  }
  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.is_contiguous() &&
                    state.device().is_cpu(),
                "[torch] an mpsrt generator's state is a contiguous uint8 CPU tensor of 44 bytes "
                "(get_state()'s), got ",
                state.dtype(), " on ", state.device());
    TORCH_CHECK(state.numel() == 44,
                "RNG state is wrong size: an mpsrt generator's state has 44 "
                "bytes, got ",
                state.numel());
    check(
        api().generator_set_state(handle_, index(), static_cast<const uint8_t*>(state.data()), 44));
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto t = at::empty({44}, c10::TensorOptions().dtype(at::kByte));
    check(api().generator_get_state(handle_, index(), t.mutable_data_ptr<uint8_t>(), 44));
    return t.getIntrusivePtr();
  }

 private:
  MpsrtGeneratorImpl* clone_impl() const override {
    MpsrtGenerator* h = nullptr;
    check(api().generator_clone_state(handle_, index(), &h));
    return new MpsrtGeneratorImpl(device_.index(), h);
  }
  MpsrtGenerator* handle_;  // owned; nullptr: the device's default generator
};

const at::Generator& default_generator(c10::DeviceIndex d) {
  if (d < 0) d = current_index();
  check_index(d);
  static std::mutex mu;
  static std::array<at::Generator, 64> gens;  // c10::DeviceIndex is int8: at most 127 devices
  TORCH_CHECK(d < static_cast<c10::DeviceIndex>(gens.size()), "[torch] device index ",
              static_cast<int>(d), " is past the 64 devices the mpsrt PyTorch device supports");
  std::lock_guard<std::mutex> lock(mu);
  if (!gens[d].defined()) gens[d] = at::make_generator<MpsrtGeneratorImpl>(d, nullptr);
  return gens[d];
}

at::Generator new_generator(c10::DeviceIndex d) {
  if (d < 0) d = current_index();
  check_index(d);
  MpsrtGenerator* h = nullptr;
  check(api().generator_create(d, &h));
  return at::make_generator<MpsrtGeneratorImpl>(d, h);
}

// The mpsrt generator an op draws from on `device`: the given one (which must be an mpsrt
// generator on that device) or the device's default.
MpsrtGeneratorImpl* generator_for(const std::optional<at::Generator>& gen, c10::Device device) {
  if (!gen.has_value() || !gen->defined()) {
    return static_cast<MpsrtGeneratorImpl*>(
        default_generator(device.index()).unsafeGetGeneratorImpl());
  }
  TORCH_CHECK(gen->device().type() == kDev, "Expected a '", c10::Device(kDev),
              "' device type for generator but found '", gen->device().type(), "'");
  TORCH_CHECK_VALUE(gen->device().index() == device.index(), "[torch] the generator is on ",
                    gen->device(), " but the tensor is on ", device,
                    "; use a generator of the tensor's device");
  return static_cast<MpsrtGeneratorImpl*>(gen->unsafeGetGeneratorImpl());
}

// For random ops mpsrt has no kernel for: a CPU generator seeded from the mpsrt generator's
// stream (64 bits of it), so that those ops too follow torch.mpsrt.manual_seed.
at::Generator cpu_generator_from(MpsrtGeneratorImpl* g) {
  uint64_t seed = 0;
  check(api().generator_random_u64(g->handle(), g->index(), &seed));
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

// ------------------------------------------------------------------ device guard
struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDev; }
  c10::Device exchangeDevice(c10::Device d) const override {
    const auto cur = current_index();
    if (d.index() == cur) return d;  // nothing to switch (the common case)
    int prev = 0;
    check_index(d.index());
    check(api().set_device(d.index(), &prev));
    return c10::Device(kDev, static_cast<c10::DeviceIndex>(prev));
  }
  c10::Device getDevice() const override { return c10::Device(kDev, current_index()); }
  void setDevice(c10::Device d) const override {
    check_index(d.index());
    check(api().set_device(d.index(), nullptr));
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (g_api) g_api->set_device(d.index(), nullptr);
  }
  c10::Stream getStream(c10::Device d) const override {
    return torch_stream(api().stream_current(d.index()));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return torch_stream(api().stream_default(d.index()));
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    MpsrtStream* s = nullptr;
    check(api().stream_from_pool(priority, d.index(), &s));
    return torch_stream(s);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    return getNewStream(d, high_priority ? -1 : 0);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return torch_stream(api().stream_set_current(stream_of(s)));
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return g_api ? static_cast<c10::DeviceIndex>(g_api->device_count()) : 0;
  }
  // Every dtype: operators without an mpsrt kernel run torch's CPU kernels.
  c10::DeviceCapability getDeviceCapability(c10::Device) const override { return {}; }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex,
              const c10::EventFlag flag) const override {
    if (*event == nullptr) {
      MpsrtEvent* e = nullptr;
      check(api().event_create(flag == c10::EventFlag::BACKEND_DEFAULT ? 1 : 0, &e));
      *event = e;
    }
    check(api().event_record(static_cast<MpsrtEvent*>(*event), stream_of(stream)));
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    check(api().event_wait(static_cast<MpsrtEvent*>(event), stream_of(stream)));
  }
  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    int r = api().event_query(static_cast<MpsrtEvent*>(event));
    if (r < 0) check(MPSRT_ERR_RUNTIME);
    return r == 1;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event != nullptr && g_api != nullptr) g_api->event_destroy(static_cast<MpsrtEvent*>(event));
  }
  bool queryStream(const c10::Stream& stream) const override {
    int r = api().stream_query(stream_of(stream));
    if (r < 0) check(MPSRT_ERR_RUNTIME);
    return r == 1;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    check(api().stream_synchronize(stream_of(stream)));
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) check(api().event_synchronize(static_cast<MpsrtEvent*>(event)));
  }
  void synchronizeDevice(const c10::DeviceIndex d) const override { check(api().synchronize(d)); }
  void recordDataPtrOnStream(const c10::DataPtr& ptr, const c10::Stream& stream) const override {
    g_allocator.recordStream(ptr, stream);
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "[torch] elapsed_time: both events must have been recorded");
    double ms = 0;
    check(api().event_elapsed_ms(static_cast<MpsrtEvent*>(start), static_cast<MpsrtEvent*>(end),
                                 &ms));
    return ms;
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

// ------------------------------------------------------------------ pinned host memory
// Page-locked host memory is what a GPU copies from asynchronously; mpsrt's host-visible
// devices need nothing special, so "pinned" memory is host memory this allocator made and can
// recognise (torch asks isPinnedPtr for pin_memory(), is_pinned() and DDP's reducer buffers).
struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes == 0 ? nullptr : c10::alloc_cpu(nbytes);
    if (p != nullptr) {
      std::lock_guard<std::mutex> lock(mu());
      live().emplace(reinterpret_cast<uintptr_t>(p), nbytes);
    }
    return {p, p, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
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
  static void release(void* p) {
    if (p == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu());
      live().erase(reinterpret_cast<uintptr_t>(p));
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
};
PinnedAllocator g_pinned;

// ------------------------------------------------------------------ hooks
struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return g_api != nullptr && g_api->device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(api().device_count());
  }
  void setCurrentDevice(c10::DeviceIndex d) const override {
    check_index(d);
    check(api().set_device(d, nullptr));
  }
  c10::DeviceIndex getCurrentDevice() const override { return current_index(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    int prev = 0;
    check_index(d);
    check(api().set_device(d, &prev));
    return static_cast<c10::DeviceIndex>(prev);
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex d) const override {
    return default_generator(d);
  }
  at::Generator getNewGenerator(c10::DeviceIndex d) const override { return new_generator(d); }
  at::Device getDeviceFromPtr(void*) const override { return {kDev, current_index()}; }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned; }
  bool isPinnedPtr(const void* data) const override { return PinnedAllocator::contains(data); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
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
};

// ------------------------------------------------------------------ host access
// True where the host addresses the storage's memory: mpsrt memory on unified memory, or memory
// that is not mpsrt's. Cost: one C API call for an mpsrt storage.
bool host_visible(const c10::Storage& st) {
  const auto& dp = st.data_ptr();
  if (dp.get_deleter() != &free_buffer || dp.get_context() == nullptr) return true;
  return api().buffer_host_ptr(static_cast<const MpsrtBuffer*>(dp.get_context())) != nullptr;
}

// The mpsrt buffer under t's storage and the byte offset of t's first element in it (the data
// pointer is the buffer's host or device address plus that offset); nullptr when the storage is
// not mpsrt memory.
MpsrtBuffer* buffer_of(const at::Tensor& t, size_t* offset) {
  const auto& dp = t.storage().data_ptr();
  if (dp.get_deleter() != &free_buffer) return nullptr;
  *offset = static_cast<size_t>(static_cast<const char*>(t.const_data_ptr()) -
                                static_cast<const char*>(dp.get()));
  return static_cast<MpsrtBuffer*>(dp.get_context());
}

// ------------------------------------------------------------------ aliasing
// A CPU tensor over the same bytes as an mpsrt tensor (sizes, strides, offset and dtype kept;
// its storage is the whole device storage, not owned). Resizable: a CPU kernel that resizes an
// out= argument reallocates it in CPU memory, and the fallback copies the result back.
at::Tensor cpu_alias(const at::Tensor& t) {
  const auto& st = t.storage();
  // A tensor made before this process was forked: mpsrt's error (the memory is the parent's).
  if (st.data_ptr().get_deleter() == &free_buffer)
    check(api().buffer_check_owner(static_cast<const MpsrtBuffer*>(st.data_ptr().get_context())));
  void* base = const_cast<void*>(st.data());
  TORCH_CHECK((base != nullptr && host_visible(st)) || st.nbytes() == 0,
              "[torch] this mpsrt tensor's memory is not host-visible (discrete memory); copy it "
              "to the CPU (t.cpu())");
  c10::Storage cpu_storage(c10::Storage::use_byte_size_t(), st.nbytes(),
                           c10::DataPtr(base, c10::Device(c10::kCPU)), c10::GetCPUAllocator(),
                           /*resizable=*/true);
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      std::move(cpu_storage), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return out;
}

// A tensor on `dev`'s storage `storage` with another tensor's geometry (a view).
at::Tensor view_on(const c10::Storage& storage, const at::Tensor& geometry,
                   c10::DispatchKeySet keys) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(storage),
                                                      keys, geometry.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(geometry.sizes(), geometry.strides(),
                                                   geometry.storage_offset());
  return out;
}

bool is_mpsrt(const at::Tensor& t) {
  return t.defined() && t.device().type() == kDev;
}

// ------------------------------------------------------------------ staged host access
// Discrete memory: what the host reads or writes of an mpsrt tensor is a copy of the bytes the
// tensor spans (from its first element to its last), through mpsrt's staging path; dense
// tensors move exactly their bytes, strided ones their span (the gaps are read and written back
// unchanged).
struct HostSpan {
  at::Tensor view;   // CPU tensor with the mpsrt tensor's sizes, strides and dtype over `bytes`
  at::Tensor bytes;  // the span's bytes
  MpsrtBuffer* buffer = nullptr;
  size_t offset = 0;  // of the span (the tensor's first element) in the buffer
  size_t nbytes = 0;
};

HostSpan read_span(const at::Tensor& t) {
  HostSpan h;
  h.nbytes = t.numel() == 0 ? 0
                            : at::detail::computeStorageNbytes(t.sizes(), t.strides(),
                                                               t.dtype().itemsize(), 0);
  h.bytes = at::empty({static_cast<int64_t>(std::max<size_t>(h.nbytes, 1))},
                      c10::TensorOptions().dtype(at::kByte));
  if (h.nbytes > 0) {
    h.buffer = buffer_of(t, &h.offset);
    TORCH_CHECK(h.buffer != nullptr, "[torch] this mpsrt tensor's storage is not mpsrt memory");
    check(api().buffer_copy_to_host(h.buffer, h.offset, h.bytes.mutable_data_ptr(), h.nbytes));
  }
  h.view = at::empty({0}, c10::TensorOptions().dtype(t.dtype()));
  h.view.set_(h.bytes.storage(), 0, t.sizes(), t.strides());
  return h;
}

void write_span(const HostSpan& h) {
  if (h.nbytes > 0)
    check(api().buffer_copy_from_host(h.buffer, h.offset, h.bytes.const_data_ptr(), h.nbytes));
}

// t's values as a CPU tensor: an alias on unified memory (after the current stream's work), a
// host copy on discrete memory.
at::Tensor host_values(const at::Tensor& t) {
  if (host_visible(t.storage())) {
    sync_current(t.device().index());
    return cpu_alias(t);
  }
  return read_span(t).view;
}

// Writes `values` (a CPU tensor, broadcast and converted as copy_ does) into the mpsrt tensor
// dst, after the device's queued work.
void write_values(const at::Tensor& dst, const at::Tensor& values) {
  if (host_visible(dst.storage())) {
    sync_current(dst.device().index());
    cpu_alias(dst).copy_(values);
    return;
  }
  if (dst.numel() == 0) return;
  size_t off = 0;
  MpsrtBuffer* b = buffer_of(dst, &off);
  if (b != nullptr && dst.is_non_overlapping_and_dense()) {
    // The tensor's bytes in its own layout, in one staged copy.
    at::Tensor tmp =
        at::empty_strided(dst.sizes(), dst.strides(), c10::TensorOptions().dtype(dst.dtype()));
    tmp.copy_(values);
    check(api().buffer_copy_from_host(b, off, tmp.const_data_ptr(),
                                      static_cast<size_t>(dst.numel()) * dst.dtype().itemsize()));
    return;
  }
  HostSpan h = read_span(dst);
  h.view.copy_(values);
  write_span(h);
}

// Runs f on a CPU tensor standing for t and keeps what f writes: the alias on unified memory
// (after the current stream's work), a host copy written back on discrete memory.
template <class F>
void update_on_host(const at::Tensor& t, F&& f) {
  if (host_visible(t.storage())) {
    sync_current(t.device().index());
    f(cpu_alias(t));
    return;
  }
  HostSpan h = read_span(t);
  f(h.view);
  write_span(h);
}

// ------------------------------------------------------------------ native kernels
// The allocator serves the current device: a factory naming another device switches to it
// (restored when `guard` goes, on any exit); none or the current one costs no switch.
void guard_other_device(const std::optional<at::Device>& device,
                        std::optional<c10::DeviceGuard>& guard) {
  if (!device || !device->has_index()) return;
  const auto d = device->index();
  if (d == current_index()) return;
  check_index(d);
  guard.emplace(c10::Device(kDev, d));
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout>, std::optional<at::Device> device,
                               std::optional<bool>, std::optional<at::MemoryFormat> mf) {
  std::optional<c10::DeviceGuard> guard;
  guard_other_device(device, guard);
  return at::detail::empty_generic(size, &g_allocator,
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), mf);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                         std::optional<at::Device> device, std::optional<bool>) {
  std::optional<c10::DeviceGuard> guard;
  guard_other_device(device, guard);
  return at::detail::empty_strided_generic(size, stride, &g_allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> offset) {
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(self.storage()), self.key_set(), self.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride,
                                                   offset.value_or(self.storage_offset()));
  return out;
}

// Grows the storage (mpsrt's allocator, through the hooks) when the geometry needs more bytes.
void grow_storage_to_fit(const at::Tensor& self) {
  auto* impl = self.unsafeGetTensorImpl();
  size_t need = at::detail::computeStorageNbytes(impl->sizes(), impl->strides(),
                                                 self.dtype().itemsize(), impl->storage_offset());
  if (need > self.storage().nbytes()) {
    const c10::DeviceGuard guard(self.device());
    at::detail::getPrivateUse1Hooks().resizePrivateUse1Bytes(self.storage(), need);
  }
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> mf) {
  auto* impl = self.unsafeGetTensorImpl();
  for (auto s : size) TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s);
  impl->set_sizes_contiguous(size);
  if (mf) impl->empty_tensor_restride(*mf);
  grow_storage_to_fit(self);
  return self;
}

// set_: point `self` at (storage, offset, size, stride). torch.load rebuilds tensors with it and
// storage copies (storage.cpu(), UntypedStorage.copy_) wrap storages in tensors with it; the CPU
// kernel would refuse an mpsrt storage, so these are native, like resize_.
at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, int64_t offset,
                               c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(source.device() == self.device(),
              "Attempted to set the storage of a tensor on device \"", self.device(),
              "\" to a storage on different device \"", source.device(),
              "\".  This is no longer allowed; the devices must match.");
  TORCH_CHECK(offset >= 0, "Tensor: invalid storage offset ", offset);
  TORCH_CHECK(stride.empty() || stride.size() == size.size(),
              "set_: stride and size must have the same length");
  for (auto s : size) TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s);
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  if (stride.size() == size.size()) {  // strides given (or a 0-dim tensor)
    impl->set_sizes_and_strides(size, stride, offset);
  } else {  // stride=[]: contiguous
    impl->set_sizes_contiguous(size);
    impl->set_storage_offset(offset);
  }
  grow_storage_to_fit(self);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  auto n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return set_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(),
                            source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  return set_storage_offset(self, at::empty({0}, self.options()).storage(), 0, {0}, {});
}

// copy_ between cpu and mpsrt or within mpsrt. Same dtype, both dense in the same layout:
// mpsrt's copy kernel on the destination's current stream (device to device) or one memcpy
// after the stream's queued work (host <-> device; a staged copy on discrete memory);
// otherwise torch's CPU copy on aliases (on discrete memory: on host copies).
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  bool same_layout = self.dtype() == dst.dtype() && self.sizes() == dst.sizes() &&
                     self.strides() == dst.strides() && self.is_non_overlapping_and_dense();
  size_t nbytes = static_cast<size_t>(self.numel()) * self.dtype().itemsize();
  if (is_mpsrt(self) && is_mpsrt(dst) && same_layout && self.device() == dst.device() &&
      nbytes > 0) {
    size_t so = 0, dof = 0;
    MpsrtBuffer* sb = buffer_of(self, &so);
    MpsrtBuffer* db = buffer_of(dst, &dof);
    if (sb && db) {
      // dense, same strides: data_ptr is the lowest address both touch
      check(api().buffer_copy(db, dof, sb, so, nbytes, current_stream(dst.device().index())));
      return dst;
    }
  }
  if ((is_mpsrt(self) && !host_visible(self.storage())) ||
      (is_mpsrt(dst) && !host_visible(dst.storage()))) {
    // Discrete memory: through mpsrt's staging path. Dense tensors of one layout and dtype
    // move their bytes in one staged copy; the others through host copies.
    size_t off = 0;
    if (same_layout && nbytes > 0 && is_mpsrt(self) && !is_mpsrt(dst)) {
      if (MpsrtBuffer* b = buffer_of(self, &off)) {
        check(api().buffer_copy_to_host(b, off, dst.mutable_data_ptr(), nbytes));
        return dst;
      }
    }
    if (same_layout && nbytes > 0 && !is_mpsrt(self) && is_mpsrt(dst)) {
      if (MpsrtBuffer* b = buffer_of(dst, &off)) {
        check(api().buffer_copy_from_host(b, off, self.const_data_ptr(), nbytes));
        return dst;
      }
    }
    const at::Tensor values = is_mpsrt(self) ? host_values(self) : self;
    if (is_mpsrt(dst)) {
      write_values(dst, values);
    } else {
      dst.copy_(values);
    }
    return dst;
  }
  if (is_mpsrt(self)) sync_current(self.device().index());
  if (is_mpsrt(dst)) sync_current(dst.device().index());
  at::Tensor s = is_mpsrt(self) ? cpu_alias(self) : self;
  at::Tensor d = is_mpsrt(dst) ? cpu_alias(dst) : dst;
  if (same_layout && nbytes > 0 && s.device().is_cpu() && d.device().is_cpu()) {
    std::memcpy(d.mutable_data_ptr(), s.const_data_ptr(), nbytes);
  } else {
    d.copy_(s);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (is_mpsrt(dst)) {
    resize_(dst, self.sizes(), std::nullopt);
  } else {
    dst.resize_(self.sizes());
  }
  return copy_from(self, dst, false);
}

// fill_ with a scalar: mpsrt's fill kernel on the current stream for dense tensors.
at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  size_t item = self.dtype().itemsize();
  size_t off = 0;
  MpsrtBuffer* b = buffer_of(self, &off);
  // Dense (any order of dimensions): the elements are exactly the bytes from the first one on.
  if (b && self.is_non_overlapping_and_dense() &&
      (item == 1 || item == 2 || item == 4 || item == 8) && self.numel() > 0) {
    uint64_t pattern = 0;
    auto one = at::empty({1}, c10::TensorOptions().dtype(self.dtype()));
    one.fill_(value);
    std::memcpy(&pattern, one.const_data_ptr(), item);
    check(api().buffer_fill(b, off, self.numel() * item, pattern, static_cast<unsigned>(item),
                            current_stream(self.device().index())));
    return self;
  }
  update_on_host(self, [&](const at::Tensor& h) { h.fill_(value); });
  return self;
}

// t.item(), bool(t), int(t): the element read back to the host (after the queued work).
c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "_local_scalar_dense: Empty tensor not supported");
  return host_values(self).item();
}

at::Tensor& zero_(at::Tensor& self) {
  return fill_scalar(self, 0);
}

// fill_ with a 0-dim tensor: its value (read from the device when it is an mpsrt tensor).
at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  return fill_scalar(self, (is_mpsrt(value) ? value.cpu() : value).item());
}

// ------------------------------------------------------------------ random ops
// mpsrt's random kernels on the current stream, from mpsrt's generators: with
// torch.mpsrt.manual_seed(s), torch.rand(n, device="mpsrt") equals mpsrt.rand(n) bit for bit
// (same Philox words, same word-to-value mapping). Dtypes mpsrt cannot write (complex, ...)
// run torch's CPU kernel with a CPU generator seeded from the mpsrt generator.
enum RandomOp { kUniform = 1, kNormal = 2, kIntRange = 3, kBernoulli = 4 };

// torch's dtype as mpsrt's RandomSpec::DType value; -1 when mpsrt has none.
int random_dtype(at::ScalarType t) {
  switch (t) {
    case at::kByte:
      return 0;
    case at::kInt:
      return 1;
    case at::kLong:
      return 2;
    case at::kUInt32:
      return 3;
    case at::kHalf:
      return 4;
    case at::kBFloat16:
      return 5;
    case at::kFloat:
      return 6;
    case at::kDouble:
      return 7;
    case at::kBool:
      return 8;
    case at::kChar:
      return 9;
    case at::kShort:
      return 10;
    case at::kUInt16:
      return 11;
    case at::kUInt64:
      return 12;
    default:
      return -1;
  }
}

// Fills `self` with mpsrt's kernel when it can write self's dtype (true); false: it cannot.
bool mpsrt_random(const at::Tensor& self, MpsrtRandomSpec spec,
                  const std::optional<at::Generator>& gen) {
  spec.dtype = random_dtype(self.scalar_type());
  if (spec.dtype < 0 || api().random_supported(spec.op, spec.dtype) == 0) return false;
  MpsrtGeneratorImpl* g = generator_for(gen, self.device());
  if (self.numel() == 0) return true;
  const c10::DeviceGuard guard(self.device());
  MpsrtStream* stream = current_stream(self.device().index());
  size_t off = 0;
  MpsrtBuffer* b = buffer_of(self, &off);
  if (b != nullptr && self.is_contiguous()) {
    check(
        api().random_fill(b, off, static_cast<uint64_t>(self.numel()), &spec, g->handle(), stream));
    return true;
  }
  // Strided: the numbers in a contiguous tensor, then copied into place (in stream order).
  at::Tensor tmp = at::empty(self.sizes(), self.options());
  MpsrtBuffer* tb = buffer_of(tmp, &off);
  check(api().random_fill(tb, off, static_cast<uint64_t>(tmp.numel()), &spec, g->handle(), stream));
  const_cast<at::Tensor&>(self).copy_(tmp);
  return true;
}

// torch's CPU kernel on an alias of `self`, with a CPU generator seeded from the mpsrt one.
template <class F>
void cpu_random(const at::Tensor& self, const std::optional<at::Generator>& gen, F&& f) {
  at::Generator cg = cpu_generator_from(generator_for(gen, self.device()));
  update_on_host(self, [&](const at::Tensor& h) { f(h, cg); });
}

MpsrtRandomSpec random_spec(int op) {
  MpsrtRandomSpec s{};
  s.op = op;
  s.b = 1.0;
  s.range = 1;
  s.p = 0.5;
  return s;
}

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from,
              " > to=", to);
  MpsrtRandomSpec spec = random_spec(kUniform);
  spec.a = from;
  spec.b = to;
  if (!mpsrt_random(self, spec, gen))
    cpu_random(self, gen, [&](at::Tensor c, at::Generator cg) { c.uniform_(from, to, cg); });
  return self;
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  MpsrtRandomSpec spec = random_spec(kNormal);
  spec.a = mean;
  spec.b = std;
  if (!mpsrt_random(self, spec, gen))
    cpu_random(self, gen, [&](at::Tensor c, at::Generator cg) { c.normal_(mean, std, cg); });
  return self;
}

// random_(from, to): [from, to); to = None: up to torch's default bound for the dtype.
at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                        std::optional<at::Generator> gen) {
  MpsrtRandomSpec spec = random_spec(kIntRange);
  spec.low = from;
  const int d = random_dtype(self.scalar_type());
  if (to.has_value()) {
    TORCH_CHECK(from < *to, "random_ expects 'from' to be less than 'to', but got from=", from,
                " >= to=", *to);
    spec.range = static_cast<uint64_t>(*to) - static_cast<uint64_t>(from);
  } else if (d >= 0) {
    int64_t lo = 0;
    uint64_t hi = 0;
    check(api().random_int_bounds(d, &lo, &hi));
    TORCH_CHECK(from < 0 || static_cast<uint64_t>(from) < hi,
                "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", hi);
    spec.range = hi - static_cast<uint64_t>(from);
  }
  if (!mpsrt_random(self, spec, gen))
    cpu_random(self, gen, [&](at::Tensor c, at::Generator cg) { c.random_(from, to, cg); });
  return self;
}

at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  return random_from(self, 0, to, std::move(gen));
}

at::Tensor& random_default(at::Tensor& self, std::optional<at::Generator> gen) {
  if (random_dtype(self.scalar_type()) < 0) {
    cpu_random(self, gen, [&](at::Tensor c, at::Generator cg) { c.random_(cg); });
    return self;
  }
  return random_from(self, 0, std::nullopt, std::move(gen));
}

at::Tensor& bernoulli_float(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  MpsrtRandomSpec spec = random_spec(kBernoulli);
  spec.p = p;
  if (!mpsrt_random(self, spec, gen))
    cpu_random(self, gen, [&](at::Tensor c, at::Generator cg) { c.bernoulli_(p, cg); });
  return self;
}

// dropout's kernel (torch picks native_dropout for PrivateUse1 devices): the mask from mpsrt's
// bernoulli kernel (bool, 1 = kept), the output input * mask / (1 - p), as torch's CPU kernel.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  auto bool_opts = input.options().dtype(at::kBool);
  if (train.has_value() && !*train) return {input.clone(), at::ones_like(input, bool_opts)};
  if (input.numel() == 0) return {input, at::empty_like(input, bool_opts)};
  TORCH_CHECK(0 <= p && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  const double keep = 1.0 - p;
  const double scale = keep == 0 ? 0.0 : 1.0 / keep;
  at::Tensor mask = at::empty_like(input, bool_opts, at::MemoryFormat::Contiguous);
  mask.bernoulli_(keep);
  return {input.mul(mask).mul_(scale), mask};
}

// ------------------------------------------------------------------ the boxed fallback
struct Aliased {
  at::Tensor original;
  at::Tensor alias;
  bool written;
};

at::Tensor alias_arg(const at::Tensor& t, bool written, std::vector<Aliased>& seen,
                     const c10::FunctionSchema& schema) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      host_visible(t.storage()), "[torch] ", schema.name(),
      " has no kernel on the mpsrt device yet (its GPU kernels are later work), and the memory "
      "of ",
      t.device(), " is not host-visible (discrete memory, backend ", api().backend_name(),
      "), so the CPU kernel cannot run on it in place; run this op on CPU tensors (t.cpu()) and "
      "move the result back (.to(\"mpsrt\"))");
  auto a = cpu_alias(t);
  seen.push_back({t, a, written});
  return a;
}

// After a CPU kernel wrote an alias of an mpsrt out= argument: if it resized it into CPU
// memory, grow the mpsrt tensor and copy the result in; if it changed its geometry, mirror it.
void write_back(const Aliased& a) {
  auto* oimpl = a.original.unsafeGetTensorImpl();
  const void* abase = a.alias.storage().data();
  if (abase == a.original.storage().data()) {
    if (a.alias.sizes() != a.original.sizes() || a.alias.strides() != a.original.strides() ||
        a.alias.storage_offset() != a.original.storage_offset())
      oimpl->set_sizes_and_strides(a.alias.sizes(), a.alias.strides(), a.alias.storage_offset());
    return;
  }
  resize_(a.original, a.alias.sizes(), std::nullopt);
  oimpl->set_sizes_and_strides(a.alias.sizes(), a.alias.strides(), 0);
  if (!a.original.is_non_overlapping_and_dense()) oimpl->set_sizes_contiguous(a.alias.sizes());
  if (host_visible(a.original.storage())) {
    cpu_alias(a.original).copy_(a.alias);
  } else {
    // Discrete memory: an out= argument that had no bytes (so it could be aliased) and that the
    // kernel grew into host memory: staged in.
    write_values(a.original, a.alias);
  }
}

// CPU allocations made by a CPU kernel the fallback runs come from mpsrt's caching allocator
// (host-visible memory), so that a new output already lies in device memory and becomes the
// mpsrt tensor without a copy. Only on the thread running the kernel, only while it runs:
// c10's CPU allocator is replaced once by this one, which hands every other allocation to the
// allocator it replaced.
thread_local int t_capture_device = -1;

// What the fallback did, for tests and tuning (torch.ops.mpsrt_torch._fallback_counts()):
// operators run, new outputs that were already mpsrt memory, new outputs copied into it.
std::atomic<int64_t> g_fallback_ops{0}, g_outputs_adopted{0}, g_outputs_copied{0};

std::vector<int64_t> fallback_counts() {
  return {g_fallback_ops.load(), g_outputs_adopted.load(), g_outputs_copied.load()};
}

struct CaptureAllocator final : c10::Allocator {
  c10::Allocator* base = nullptr;
  c10::DataPtr allocate(size_t nbytes) override {
    const int d = t_capture_device;
    if (d >= 0 && nbytes > 0 && g_api != nullptr) {
      MpsrtBuffer* b = nullptr;
      void* host = nullptr;
      if (g_api->buffer_alloc(nbytes, d, &b, &host) == MPSRT_OK) {
        if (host != nullptr) return {host, b, &free_buffer, c10::Device(c10::kCPU)};
        g_api->buffer_free(b);
      }
      // Out of device memory (or not host-visible): the kernel's allocation goes to the host;
      // the fallback copies such an output into the device, where its own allocation reports
      // the out-of-memory error torch expects.
    }
    return base->allocate(nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return base->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};
CaptureAllocator g_capture;

struct CaptureScope {
  int previous;
  explicit CaptureScope(int device) : previous(t_capture_device) { t_capture_device = device; }
  ~CaptureScope() { t_capture_device = previous; }
};

bool is_generator_arg(const c10::Argument& a) {
  const auto& t = a.type();
  if (t->kind() == c10::TypeKind::GeneratorType) return true;
  return t->kind() == c10::TypeKind::OptionalType &&
         t->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

// Every aten operator without a kernel above: its CPU kernel on CPU tensors aliasing the device
// memory (zero-copy for inputs and for outputs that alias inputs; new outputs are allocated in
// mpsrt memory by the kernel itself, through CaptureAllocator). Device arguments naming mpsrt
// (factory ops) are run on cpu. A random op's generator (None or an mpsrt generator) becomes a
// CPU generator seeded from the mpsrt generator. In a profiler session the op is an interval
// named after it on the current stream's track.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& args = schema.arguments();
  const size_t n = args.size();
  const size_t begin = stack->size() - n;
  std::vector<Aliased> seen;
  std::optional<c10::Device> device;
  int generator_arg = -1;
  for (size_t i = 0; i < n; ++i) {
    auto& iv = (*stack)[begin + i];
    bool written = args[i].alias_info() && args[i].alias_info()->isWrite();
    if (iv.isTensor()) {
      const auto& t = iv.toTensor();
      if (is_mpsrt(t)) {
        device = t.device();
        iv = alias_arg(t, written, seen, schema);
      }
    } else if (iv.isTensorList()) {
      auto list = iv.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        at::Tensor t = list[j];
        if (is_mpsrt(t)) {
          device = t.device();
          list[j] = alias_arg(t, written, seen, schema);
        }
      }
      iv = list;
    } else if (iv.isOptionalTensorList()) {
      auto list = iv.toOptionalTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        std::optional<at::Tensor> t = list[j];
        if (t && is_mpsrt(*t)) {
          device = t->device();
          list[j] = alias_arg(*t, written, seen, schema);
        }
      }
      iv = list;
    } else if (iv.isDevice() && iv.toDevice().type() == kDev) {
      device = iv.toDevice();
      iv = c10::IValue(c10::Device(c10::kCPU));
    } else if ((iv.isNone() || (iv.isGenerator() && iv.toGenerator().device().type() == kDev)) &&
               is_generator_arg(args[i])) {
      generator_arg = static_cast<int>(i);
    }
  }
  if (!device) {
    // e.g. an optional device argument given as None with mpsrt tensors elsewhere: run on cpu.
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    return;
  }
  auto d = device->has_index() ? device->index() : current_index();
  if (generator_arg >= 0) {
    auto& iv = (*stack)[begin + generator_arg];
    std::optional<at::Generator> g;
    if (iv.isGenerator()) g = iv.toGenerator();
    iv = c10::IValue(cpu_generator_from(generator_for(g, c10::Device(kDev, d))));
  }
  MpsrtStream* stream = current_stream(d);
  check(api().stream_synchronize(stream));
  const int64_t t0 = api().host_op_begin();
  g_fallback_ops.fetch_add(1, std::memory_order_relaxed);
  {
    // New outputs straight into mpsrt memory where the host addresses it (every mpsrt argument
    // was checked above; a factory op with none asks the device).
    const bool capture = !seen.empty() || api().host_visible(d) == 1;
    const CaptureScope scope(capture ? d : -1);
    op.callBoxed(stack);
  }
  if (t0 != 0) api().host_op_end(schema.name().c_str(), stream, t0);

  for (const auto& a : seen)
    if (a.written) write_back(a);

  // Returns: an alias of an argument becomes a view of that argument's device storage (the
  // argument itself when the op returns it, as in-place and out= ops do); a new output in mpsrt
  // memory becomes an mpsrt tensor over that memory (its storage handed over, shared by every
  // return that views it); anything else (host memory) is copied into a new mpsrt tensor.
  const size_t nret = schema.returns().size();
  const size_t rbegin = stack->size() - nret;
  std::vector<std::pair<const c10::StorageImpl*, c10::Storage>> adopted;
  auto adopt = [&](const at::Tensor& r) -> std::optional<c10::Storage> {
    auto* simpl = r.storage().unsafeGetStorageImpl();
    for (const auto& [k, v] : adopted)
      if (k == simpl) return v;
    const auto& dp = r.storage().data_ptr();
    if (dp.get_deleter() != &free_buffer || r.storage().data() == nullptr) return std::nullopt;
    // Hand the memory over only when nothing but this op's returns holds the CPU storage.
    size_t holders = 0;
    for (size_t i = 0; i < nret; ++i) {
      const auto& iv = (*stack)[rbegin + i];
      if (iv.isTensor() && iv.toTensor().defined() &&
          iv.toTensor().storage().unsafeGetStorageImpl() == simpl)
        ++holders;
    }
    if (static_cast<size_t>(r.storage().use_count()) != holders) return std::nullopt;
    c10::DataPtr taken = simpl->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::kCPU)));
    taken.unsafe_set_device(c10::Device(kDev, d));
    c10::Storage st(c10::Storage::use_byte_size_t(), simpl->nbytes(), std::move(taken),
                    &g_allocator, /*resizable=*/true);
    adopted.emplace_back(simpl, st);
    return st;
  };
  auto to_device = [&](const at::Tensor& r) -> at::Tensor {
    if (!r.defined() || !r.device().is_cpu()) return r;
    for (const auto& a : seen) {
      if (r.storage().unsafeGetStorageImpl() != a.alias.storage().unsafeGetStorageImpl()) continue;
      if (r.unsafeGetTensorImpl() == a.alias.unsafeGetTensorImpl()) return a.original;
      if (a.alias.storage().data() != a.original.storage().data()) break;
      return view_on(a.original.storage(), r, a.original.key_set());
    }
    if (auto st = adopt(r)) {
      // Not a view (no base): the constructor that adds autograd's keys for the backend.
      auto out = at::detail::make_tensor<c10::TensorImpl>(
          c10::Storage(*st), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), r.dtype());
      out.unsafeGetTensorImpl()->set_sizes_and_strides(r.sizes(), r.strides(), r.storage_offset());
      g_outputs_adopted.fetch_add(1, std::memory_order_relaxed);
      return out;
    }
    g_outputs_copied.fetch_add(1, std::memory_order_relaxed);
    // Both allocate on device d under their own device guard.
    at::Tensor out = r.is_non_overlapping_and_dense()
                         ? empty_strided(r.sizes(), r.strides(), r.scalar_type(), std::nullopt,
                                         c10::Device(kDev, d), std::nullopt)
                         : empty_memory_format(r.sizes(), r.scalar_type(), std::nullopt,
                                               c10::Device(kDev, d), std::nullopt, std::nullopt);
    if (r.numel() > 0) {
      if (host_visible(out.storage())) {
        cpu_alias(out).copy_(r);
      } else {
        write_values(out, r);  // discrete memory: staged
      }
    }
    return out;
  };
  for (size_t i = 0; i < nret; ++i) {
    auto& iv = (*stack)[rbegin + i];
    if (iv.isTensor()) {
      iv = to_device(iv.toTensor());
    } else if (iv.isTensorList()) {
      auto list = iv.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) list[j] = to_device(list[j]);
      iv = list;
    }
  }
}

void init(int64_t api_address) {
  auto* table = reinterpret_cast<const MpsrtCApi*>(static_cast<intptr_t>(api_address));
  TORCH_CHECK(table != nullptr && table->version >= 3 && table->size >= sizeof(MpsrtCApi),
              "[torch] mpsrt's C API table is older than this glue (version ",
              table ? table->version : 0, ", need 3); reinstall mpsrt");
  g_api = table;
  static bool hooks_registered = [] {
    at::RegisterPrivateUse1HooksInterface(new Hooks());
    g_capture.base = c10::GetCPUAllocator();
    c10::SetCPUAllocator(&g_capture, /*priority=*/1);
    return true;
  }();
  (void)hooks_registered;
}

}  // namespace

TORCH_LIBRARY(mpsrt_torch, m) {
  m.def("_init(int api) -> ()", &init);
  m.def("_fallback_counts() -> int[]", &fallback_counts);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", &empty_memory_format);
  m.impl("empty_strided", &empty_strided);
  m.impl("as_strided", &as_strided);
  // Views torch implements per device (the others are composite): its own device-independent
  // kernels, which only set sizes and strides, so that views never need host access.
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("resize_", &resize_);
  m.impl("set_.source_Storage_storage_offset", &set_storage_offset);
  m.impl("set_.source_Storage", &set_storage);
  m.impl("set_.source_Tensor", &set_tensor);
  m.impl("set_", &set_empty);
  m.impl("_copy_from", &copy_from);
  m.impl("_copy_from_and_resize", &copy_from_and_resize);
  m.impl("fill_.Scalar", &fill_scalar);
  m.impl("fill_.Tensor", &fill_tensor);
  m.impl("zero_", &zero_);
  m.impl("_local_scalar_dense", &local_scalar_dense);
  m.impl("uniform_", &uniform_);
  m.impl("normal_", &normal_);
  m.impl("random_.from", &random_from);
  m.impl("random_.to", &random_to);
  m.impl("random_", &random_default);
  m.impl("bernoulli_.float", &bernoulli_float);
  m.impl("native_dropout", &native_dropout);
}

// Structured ops whose meta function resizes its output twice (elementwise, then reduced): the
// generic path for a backend without their kernels allocates the reduced output and calls the
// out= kernel, whose meta then warns that a non-empty output is resized. Their functional CPU
// kernels through the fallback allocate the output themselves (in mpsrt memory) instead.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* op : {"mse_loss", "smooth_l1_loss"})
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

// Autocast (torch.autocast("mpsrt", dtype=float16 / bfloat16)): torch's op lists and cast
// policies for an autocast key, as torch registers them for its own devices; every other op
// falls through to the device's kernels.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

// In at::autocast: the op lists name at:: types unqualified.
namespace at::autocast {
namespace {
TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define MPSRT_AUTOCAST_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define MPSRT_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define MPSRT_AUTOCAST_FP32_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define MPSRT_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(MPSRT_AUTOCAST_LOWER)
  AT_FORALL_FP32(MPSRT_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(MPSRT_AUTOCAST_FP32_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(MPSRT_AUTOCAST_PROMOTE)
#undef MPSRT_AUTOCAST_LOWER
#undef MPSRT_AUTOCAST_FP32
#undef MPSRT_AUTOCAST_FP32_OPT_DTYPE
#undef MPSRT_AUTOCAST_PROMOTE
}
}  // namespace
}  // namespace at::autocast
