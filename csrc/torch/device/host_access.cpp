// The host's access to mpsrt tensors in both memory models: see host_access.h.
#include "device/host_access.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/quantized/QTensorImpl.h>
#include <ATen/quantized/Quantizer.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <typeinfo>

#include "device/allocator.h"

namespace mpsrt::torch_glue {

bool host_visible(const c10::Storage& st) {
  const auto& dp = st.data_ptr();
  if (dp.get_deleter() != &free_buffer || dp.get_context() == nullptr) return true;
  return api().buffer_host_ptr(static_cast<const MpsrtBuffer*>(dp.get_context())) != nullptr;
}

MpsrtBuffer* buffer_of(const at::Tensor& t, size_t* offset) {
  const auto& dp = t.storage().data_ptr();
  if (dp.get_deleter() != &free_buffer) return nullptr;
  *offset = static_cast<size_t>(static_cast<const char*>(t.const_data_ptr()) -
                                static_cast<const char*>(dp.get()));
  return static_cast<MpsrtBuffer*>(dp.get_context());
}

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
  at::Tensor out;
  if (C10_LIKELY(!t.is_quantized())) {
    out = at::detail::make_tensor<c10::TensorImpl>(
        std::move(cpu_storage), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  } else {
    out = make_over(std::move(cpu_storage), t, On::kCpu);
  }
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return out;
}

namespace {

// A stand-in kept with an mpsrt tensor (its TensorImpl's backend meta, which lives and is
// shared as torch's shallow copies share it). Never changed once kept: a tensor whose geometry
// or memory changed no longer fits it and takes a new stand-in per op.
struct StandIn final : c10::BackendMeta {
  StandIn(at::Tensor c, uint64_t g) : cpu(std::move(c)), generation(g) {}
  const at::Tensor cpu;
  const uint64_t generation;
};

const StandIn* stand_in_kept(const at::Tensor& t) {
  c10::BackendMeta* m = t.unsafeGetTensorImpl()->get_backend_meta();
  return m != nullptr && typeid(*m) == typeid(StandIn) ? static_cast<const StandIn*>(m) : nullptr;
}

// Whether the stand-in `cpu` still covers t: the same bytes, dtype and geometry.
bool fits(const at::Tensor& cpu, const at::Tensor& t) {
  const c10::TensorImpl* c = cpu.unsafeGetTensorImpl();
  const c10::TensorImpl* d = t.unsafeGetTensorImpl();
  const c10::StorageImpl* cs = c->unsafe_storage().unsafeGetStorageImpl();
  const c10::StorageImpl* ds = d->unsafe_storage().unsafeGetStorageImpl();
  return cs->data_ptr().get() == ds->data_ptr().get() && cs->nbytes() == ds->nbytes() &&
         c->dtype() == d->dtype() && c->storage_offset() == d->storage_offset() &&
         c->sizes() == d->sizes() && c->strides() == d->strides();
}

// Keeping a stand-in with a tensor that others may use at the same time: one at a time, and
// only where none is kept yet (a kept one is never replaced, so a reader never sees it go).
std::mutex g_keep_mu;

}  // namespace

c10::MaybeOwned<at::Tensor> kept_stand_in(const at::Tensor& t, uint64_t generation) {
  if (const StandIn* k = stand_in_kept(t)) {
    if (C10_LIKELY(k->generation == generation && fits(k->cpu, t))) {
      return c10::MaybeOwned<at::Tensor>::borrowed(k->cpu);
    }
    return c10::MaybeOwned<at::Tensor>::owned(cpu_alias(t));
  }
  at::Tensor a = cpu_alias(t);
  if (!t.is_quantized() && !t.is_view()) {
    auto kept = c10::make_intrusive<StandIn>(a, generation);
    std::lock_guard<std::mutex> lock(g_keep_mu);
    if (t.unsafeGetTensorImpl()->get_backend_meta() == nullptr) {
      std::atomic_thread_fence(std::memory_order_release);  // kept whole before it is seen
      t.unsafeGetTensorImpl()->set_backend_meta(std::move(kept));
    }
  }
  return c10::MaybeOwned<at::Tensor>::owned(std::move(a));
}

void keep_stand_in(const at::Tensor& t, at::Tensor cpu) {
  if (t.is_quantized() || !fits(cpu, t)) return;
  const uint64_t generation = api().runtime_generation();
  t.unsafeGetTensorImpl()->set_backend_meta(
      c10::make_intrusive<StandIn>(std::move(cpu), generation));
}

at::Tensor view_on(const c10::Storage& storage, const at::Tensor& geometry,
                   c10::DispatchKeySet keys) {
  at::Tensor out = make_over(storage, geometry, On::kDevice, keys);
  out.unsafeGetTensorImpl()->set_sizes_and_strides(geometry.sizes(), geometry.strides(),
                                                   geometry.storage_offset());
  return out;
}

namespace {

// t's quantizer with a per-channel one's scales and zero points passed through f (the quantizer
// itself where f returns them as they are, and where it holds no tensor).
template <class F>
at::QuantizerPtr map_channel_tensors(const at::Tensor& t, F f) {
  at::QuantizerPtr q = at::get_qtensorimpl(t)->quantizer();
  const at::QScheme scheme = q->qscheme();
  if (scheme != at::kPerChannelAffine && scheme != at::kPerChannelAffineFloatQParams) return q;
  const auto* pc = static_cast<const at::PerChannelAffineQuantizer*>(q.get());
  const at::Tensor scales = f(pc->scales()), zero_points = f(pc->zero_points());
  if (scales.is_same(pc->scales()) && zero_points.is_same(pc->zero_points())) return q;
  if (scheme == at::kPerChannelAffine) {
    return at::make_per_channel_affine_quantizer(scales, zero_points, pc->axis(), q->scalar_type());
  }
  return c10::make_intrusive<at::PerChannelAffineFloatQParamsQuantizer>(q->scalar_type(), scales,
                                                                        zero_points, pc->axis());
}

// For a tensor on the CPU: the scales and zero points there (the CPU kernels read them there).
at::Tensor on_cpu(const at::Tensor& t) {
  return t.device().is_cpu() ? t : t.cpu();
}

// For a tensor on the device: a quantizer tensor that is a CPU stand-in of device memory (an
// alias: it owns nothing, and a CPU kernel that quantized on the device put it in its output's
// quantizer) copied, so that the quantizer keeps its values after the op; any other as it is.
at::Tensor owned(const at::Tensor& t) {
  const bool alias = t.device().is_cpu() && t.numel() > 0 &&
                     t.storage().data_ptr().get_deleter() == &c10::detail::deleteNothing;
  return alias ? t.clone() : t;
}

}  // namespace

at::Tensor make_over(c10::Storage storage, const at::Tensor& t, On on,
                     std::optional<c10::DispatchKeySet> view_keys) {
  const bool q = t.is_quantized();
  const c10::DispatchKeySet keys =
      view_keys
          ? *view_keys
          : c10::DispatchKeySet(
                on == On::kCpu
                    ? (q ? c10::DispatchKey::QuantizedCPU : c10::DispatchKey::CPU)
                    : (q ? c10::DispatchKey::QuantizedPrivateUse1 : c10::DispatchKey::PrivateUse1));
  if (!q) {
    if (view_keys) {
      return at::detail::make_tensor<c10::TensorImpl>(c10::TensorImpl::VIEW, std::move(storage),
                                                      keys, t.dtype());
    }
    return at::detail::make_tensor<c10::TensorImpl>(std::move(storage), keys, t.dtype());
  }
  at::QuantizerPtr quantizer =
      on == On::kCpu ? map_channel_tensors(t, on_cpu) : map_channel_tensors(t, owned);
  if (view_keys) {
    return at::detail::make_tensor<at::QTensorImpl>(c10::TensorImpl::VIEW, std::move(storage), keys,
                                                    t.dtype(), std::move(quantizer));
  }
  return at::detail::make_tensor<at::QTensorImpl>(std::move(storage), keys, t.dtype(),
                                                  std::move(quantizer));
}

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

HostSpan read_storage_bytes(const c10::Storage& st, size_t lo, size_t hi, bool resizable) {
  HostSpan h;
  h.nbytes = hi - lo;
  const size_t n = std::max<size_t>(h.nbytes, 1);
  c10::Allocator* cpu = c10::GetCPUAllocator();
  c10::Storage bytes(c10::Storage::use_byte_size_t(), n, cpu->allocate(n), cpu, resizable);
  h.bytes = at::empty({0}, c10::TensorOptions().dtype(at::kByte));
  h.bytes.set_(bytes, 0, {static_cast<int64_t>(n)}, {1});
  const auto& dp = st.data_ptr();
  TORCH_CHECK(dp.get_deleter() == &free_buffer, "[torch] this storage is not mpsrt memory");
  h.buffer = static_cast<MpsrtBuffer*>(dp.get_context());
  h.offset = lo;
  if (h.nbytes > 0)
    check(api().buffer_copy_to_host(h.buffer, h.offset, h.bytes.mutable_data_ptr(), h.nbytes));
  h.view = h.bytes;
  return h;
}

void write_span(const HostSpan& h) {
  if (h.nbytes > 0)
    check(api().buffer_copy_from_host(h.buffer, h.offset, h.bytes.const_data_ptr(), h.nbytes));
}

at::Tensor host_values(const at::Tensor& t) {
  if (host_visible(t.storage())) {
    sync_current(t.device().index());
    return cpu_alias(t);
  }
  return read_span(t).view;
}

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

}  // namespace mpsrt::torch_glue
