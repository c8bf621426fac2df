// The mpsrt device's operators on storage and geometry: see storage.h.
#include "ops/storage.h"

#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/_has_compatible_shallow_copy_type_ops.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/_reshape_alias_ops.h>
#include <ATen/ops/as_strided_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_ops.h>
#include <ATen/ops/empty_strided_ops.h>
#include <ATen/ops/resize_ops.h>
#include <ATen/ops/set_ops.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/unfold_ops.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_complex_ops.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_as_real_ops.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/view_ops.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "device/allocator.h"
#include "device/runtime_client.h"
#include "ops/register.h"

namespace mpsrt::torch_glue {
namespace ops::storage {
namespace {

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
  ops::storage::grow_storage_to_fit(self);
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

}  // namespace
}  // namespace ops::storage

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout>, std::optional<at::Device> device,
                               std::optional<bool>, std::optional<at::MemoryFormat> mf) {
  std::optional<c10::DeviceGuard> guard;
  ops::storage::guard_other_device(device, guard);
  return at::detail::empty_generic(size, &device_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), mf);
}

at::Tensor new_empty(c10::IntArrayRef size, at::ScalarType dtype, c10::Device device,
                     at::MemoryFormat mf) {
  return empty_memory_format(size, dtype, std::nullopt, device, std::nullopt, mf);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                         std::optional<at::Device> device, std::optional<bool>) {
  std::optional<c10::DeviceGuard> guard;
  ops::storage::guard_other_device(device, guard);
  return at::detail::empty_strided_generic(size, stride, &device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<at::MemoryFormat> mf) {
  auto* impl = self.unsafeGetTensorImpl();
  for (auto s : size) TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s);
  impl->set_sizes_contiguous(size);
  if (mf) impl->empty_tensor_restride(*mf);
  ops::storage::grow_storage_to_fit(self);
  return self;
}

namespace ops::storage {
namespace {

// Whether `self.data = from` may shallow-copy from's tensor into self: torch's own answer, and
// also for two dense tensors of the CPU and mpsrt, as torch answers for the CPU and CUDA (its
// list of dense backends has no PrivateUse1), so that `param.data = param.data.to(...)` moves a
// parameter between the devices as on CUDA.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) return true;
  const auto dense = [](c10::DispatchKeySet ks) {
    constexpr c10::DispatchKeySet backends(
        {c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit});
    return ks.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && ks.has_any(backends);
  };
  return dense(self.key_set()) && dense(from.key_set());
}

}  // namespace
}  // namespace ops::storage
}  // namespace mpsrt::torch_glue

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  namespace g = mpsrt::torch_glue;
  namespace s = mpsrt::torch_glue::ops::storage;
  namespace A = at::_ops;
  using mpsrt::torch_glue::ops::reg;
  reg<A::_has_compatible_shallow_copy_type, &s::has_compatible_shallow_copy_type>(m);
  reg<A::empty_memory_format, &g::empty_memory_format>(m);
  reg<A::empty_strided, &g::empty_strided>(m);
  reg<A::as_strided, &s::as_strided>(m);
  // Views torch implements per device (the others are composite): its own device-independent
  // kernels, which only set sizes and strides, so that views never need host access.
  reg<A::view, &at::native::view>(m);
  reg<A::_reshape_alias, &at::native::_reshape_alias>(m);
  reg<A::unfold, &at::native::unfold>(m);
  reg<A::view_as_real, &at::native::view_as_real>(m);
  reg<A::view_as_complex, &at::native::view_as_complex>(m);
  reg<A::resize_, &g::resize_>(m);
  reg<A::set__source_Storage_storage_offset, &s::set_storage_offset>(m);
  reg<A::set__source_Storage, &s::set_storage>(m);
  reg<A::set__source_Tensor, &s::set_tensor>(m);
  reg<A::set_, &s::set_empty>(m);
}
