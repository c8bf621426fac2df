// The PyTorch device "mpsrt" (PrivateUse1): the glue torch calls. `import mpsrt.torch` compiles
// this one translation unit against the installed torch (torch.utils.cpp_extension.load), loads
// it with torch.ops.load_library and calls mpsrt_torch::_init with the address of mpsrt's C API
// table (the capsule mpsrt._C._c_api). Everything here reaches the runtime through that table
// only (include/mpsrt/c_api.h): the process keeps ONE runtime, the one mpsrt._C holds.
//
// What it registers: a DeviceGuardImpl (devices, torch.Stream <-> mpsrt streams, torch.Event
// <-> mpsrt events), a c10::DeviceAllocator over mpsrt's caching allocator, PrivateUse1 hooks,
// and operators: empty/empty_strided/as_strided/view/resize_/set_ natively, fills and
// device-to-device copies on mpsrt's own kernels, host<->device copies, and a boxed fallback
// that runs every other aten operator's CPU kernel on CPU tensors that alias the device memory
// (host-visible memory only), after the current stream's queued work.
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <cstring>
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
  return static_cast<c10::DeviceIndex>(api().current_device());
}

void check_index(c10::DeviceIndex d) {
  int n = api().device_count();
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
  check(api().stream_synchronize(api().stream_current(d)));
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
    if (host == nullptr) {
      api().buffer_free(b);
      TORCH_CHECK(false, "[torch] mpsrt device ", static_cast<int>(d), " (backend ",
                  api().backend_name(),
                  ") has device memory that is not host-visible; the PyTorch device needs "
                  "host-visible memory (the cpu backend, or vulkan where mpsrt maps memory)");
    }
    return {host, b, &free_buffer, dev};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
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
};

Allocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator)

// ------------------------------------------------------------------ device guard
struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDev; }
  c10::Device exchangeDevice(c10::Device d) const override {
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
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    TORCH_CHECK_NOT_IMPLEMENTED(false,
                                "[torch] generators on the mpsrt device are not supported yet; "
                                "random ops on mpsrt tensors draw from torch's CPU generator");
  }
  at::Device getDeviceFromPtr(void*) const override { return {kDev, current_index()}; }
  c10::Allocator* getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    size_t old = impl->nbytes();
    c10::DataPtr fresh = g_allocator.allocate(newsize);
    if (old > 0 && newsize > 0) {
      sync_current(fresh.device().index());
      std::memcpy(fresh.get(), impl->data(), std::min(old, newsize));
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

// ------------------------------------------------------------------ aliasing
// A CPU tensor over the same bytes as an mpsrt tensor (sizes, strides, offset and dtype kept;
// its storage is the whole device storage, not owned). Resizable: a CPU kernel that resizes an
// out= argument reallocates it in CPU memory, and the fallback copies the result back.
at::Tensor cpu_alias(const at::Tensor& t) {
  const auto& st = t.storage();
  void* base = const_cast<void*>(st.data());
  TORCH_CHECK(base != nullptr || st.nbytes() == 0,
              "[torch] this mpsrt tensor's memory is not host-visible");
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

// ------------------------------------------------------------------ native kernels
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout>, std::optional<at::Device> device,
                               std::optional<bool>, std::optional<at::MemoryFormat> mf) {
  auto d = device && device->has_index() ? device->index() : current_index();
  check_index(d);
  const c10::DeviceGuard guard(c10::Device(kDev, d));  // restores the device on any exit
  return at::detail::empty_generic(size, &g_allocator,
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), mf);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                         std::optional<at::Device> device, std::optional<bool>) {
  auto d = device && device->has_index() ? device->index() : current_index();
  check_index(d);
  const c10::DeviceGuard guard(c10::Device(kDev, d));  // restores the device on any exit
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

MpsrtBuffer* buffer_of(const at::Tensor& t, size_t* offset) {
  const auto& dp = t.storage().data_ptr();
  if (dp.get_deleter() != &free_buffer) return nullptr;
  *offset = static_cast<size_t>(static_cast<const char*>(t.const_data_ptr()) -
                                static_cast<const char*>(dp.get()));
  return static_cast<MpsrtBuffer*>(dp.get_context());
}

// copy_ between cpu and mpsrt or within mpsrt. Same dtype, both dense in the same layout:
// mpsrt's copy kernel on the destination's current stream (device to device) or one memcpy
// after the stream's queued work (host <-> device); otherwise torch's CPU copy on aliases.
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
      check(api().buffer_copy(db, dof, sb, so, nbytes, api().stream_current(dst.device().index())));
      return dst;
    }
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
  if (b && self.is_contiguous() && (item == 1 || item == 2 || item == 4 || item == 8) &&
      self.numel() > 0) {
    uint64_t pattern = 0;
    auto one = at::empty({1}, c10::TensorOptions().dtype(self.dtype()));
    one.fill_(value);
    std::memcpy(&pattern, one.const_data_ptr(), item);
    check(api().buffer_fill(b, off, self.numel() * item, pattern, static_cast<unsigned>(item),
                            api().stream_current(self.device().index())));
    return self;
  }
  sync_current(self.device().index());
  cpu_alias(self).fill_(value);
  return self;
}

// ------------------------------------------------------------------ the boxed fallback
struct Aliased {
  at::Tensor original;
  at::Tensor alias;
  bool written;
};

at::Tensor alias_arg(const at::Tensor& t, bool written, std::vector<Aliased>& seen) {
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
  cpu_alias(a.original).copy_(a.alias);
}

// Every aten operator without a kernel above: its CPU kernel on CPU tensors aliasing the device
// memory (zero-copy for inputs and for outputs that alias inputs); new outputs are copied once
// into mpsrt memory. Device arguments naming mpsrt (factory ops) are run on cpu and moved.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& args = schema.arguments();
  const size_t n = args.size();
  const size_t begin = stack->size() - n;
  std::vector<Aliased> seen;
  c10::optional<c10::Device> device;
  for (size_t i = 0; i < n; ++i) {
    auto& iv = (*stack)[begin + i];
    bool written = args[i].alias_info() && args[i].alias_info()->isWrite();
    if (iv.isTensor()) {
      const auto& t = iv.toTensor();
      if (is_mpsrt(t)) {
        device = t.device();
        iv = alias_arg(t, written, seen);
      }
    } else if (iv.isTensorList()) {
      auto list = iv.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        at::Tensor t = list[j];
        if (is_mpsrt(t)) {
          device = t.device();
          list[j] = alias_arg(t, written, seen);
        }
      }
      iv = list;
    } else if (iv.isOptionalTensorList()) {
      auto list = iv.toOptionalTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        std::optional<at::Tensor> t = list[j];
        if (t && is_mpsrt(*t)) {
          device = t->device();
          list[j] = alias_arg(*t, written, seen);
        }
      }
      iv = list;
    } else if (iv.isDevice() && iv.toDevice().type() == kDev) {
      device = iv.toDevice();
      iv = c10::IValue(c10::Device(c10::kCPU));
    }
  }
  if (!device) {
    // e.g. an optional device argument given as None with mpsrt tensors elsewhere: run on cpu.
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    return;
  }
  auto d = device->has_index() ? device->index() : current_index();
  sync_current(d);
  op.callBoxed(stack);

  for (const auto& a : seen)
    if (a.written) write_back(a);

  // Returns: an alias of an argument becomes a view of that argument's device storage (the
  // argument itself when the op returns it, as in-place and out= ops do); new memory is copied.
  const size_t nret = schema.returns().size();
  const size_t rbegin = stack->size() - nret;
  auto to_device = [&](const at::Tensor& r) -> at::Tensor {
    if (!r.defined() || !r.device().is_cpu()) return r;
    for (const auto& a : seen) {
      if (r.storage().unsafeGetStorageImpl() != a.alias.storage().unsafeGetStorageImpl()) continue;
      if (r.unsafeGetTensorImpl() == a.alias.unsafeGetTensorImpl()) return a.original;
      if (a.alias.storage().data() != a.original.storage().data()) break;
      return view_on(a.original.storage(), r, a.original.key_set());
    }
    // Both allocate on device d under their own device guard.
    at::Tensor out = r.is_non_overlapping_and_dense()
                         ? empty_strided(r.sizes(), r.strides(), r.scalar_type(), std::nullopt,
                                         c10::Device(kDev, d), std::nullopt)
                         : empty_memory_format(r.sizes(), r.scalar_type(), std::nullopt,
                                               c10::Device(kDev, d), std::nullopt, std::nullopt);
    if (r.numel() > 0) cpu_alias(out).copy_(r);
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
  TORCH_CHECK(table != nullptr && table->version >= 1 && table->size >= sizeof(MpsrtCApi),
              "[torch] mpsrt's C API table is older than this glue (version ",
              table ? table->version : 0, ", need 1); reinstall mpsrt");
  g_api = table;
  static bool hooks_registered = [] {
    at::RegisterPrivateUse1HooksInterface(new Hooks());
    return true;
  }();
  (void)hooks_registered;
}

}  // namespace

TORCH_LIBRARY(mpsrt_torch, m) {
  m.def("_init(int api) -> ()", &init);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", &empty_memory_format);
  m.impl("empty_strided", &empty_strided);
  m.impl("as_strided", &as_strided);
  m.impl("resize_", &resize_);
  m.impl("set_.source_Storage_storage_offset", &set_storage_offset);
  m.impl("set_.source_Storage", &set_storage);
  m.impl("set_.source_Tensor", &set_tensor);
  m.impl("set_", &set_empty);
  m.impl("_copy_from", &copy_from);
  m.impl("_copy_from_and_resize", &copy_from_and_resize);
  m.impl("fill_.Scalar", &fill_scalar);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}
