// The mpsrt device's operators that move or set bytes: copy_ (between cpu and mpsrt or within
// mpsrt: mpsrt's copy kernel, the elementwise kernel for other dtypes or layouts), fill_ and
// zero_ on mpsrt's fill kernel, _local_scalar_dense (item()), and cat, which copies each input
// into its slice of the output.
#include <ATen/ExpandUtils.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/_copy_from_and_resize_ops.h>
#include <ATen/ops/_copy_from_ops.h>
#include <ATen/ops/_local_scalar_dense_ops.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/fill_ops.h>
#include <ATen/ops/zero_ops.h>
#include <ATen/quantized/QTensorImpl.h>
#include <ATen/quantized/Quantizer.h>
#include <torch/library.h>

#include <cstring>
#include <vector>

#include "device/host_access.h"
#include "device/runtime_client.h"
#include "fallback/fallback.h"
#include "ops/common.h"
#include "ops/elementwise.h"
#include "ops/storage.h"

namespace mpsrt::torch_glue::ops::copy {
namespace {

// dst.copy_(src) for mpsrt tensors on one device where the device runs kernels: whether the
// kernel did it (false: the caller copies another way; nothing was launched).
bool copy_on_kernels(const at::Tensor& src, const at::Tensor& dst) {
  return is_mpsrt(src) && is_mpsrt(dst) && src.device() == dst.device() && dst.numel() != 0 &&
         enabled(dst.device().index()) && elementwise::copy(dst, src);
}

// copy_ between cpu and mpsrt or within mpsrt. Same dtype, both dense in the same layout:
// mpsrt's copy kernel on the destination's current stream (device to device) or one memcpy
// after the stream's queued work (host <-> device; a staged copy on discrete memory); within
// a device that runs kernels, the elementwise kernel (other dtypes or layouts); otherwise
// torch's CPU copy on aliases (on discrete memory: on host copies).
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  bool same_layout = self.dtype() == dst.dtype() && self.sizes() == dst.sizes() &&
                     self.strides() == dst.strides() && self.is_non_overlapping_and_dense();
  size_t nbytes = static_cast<size_t>(self.numel()) * self.dtype().itemsize();
  // No elements, one shape and dtype: nothing to move or check (`torch.tensor([], device=...)`
  // copies its empty CPU tensor here).
  if (same_layout && nbytes == 0) return dst;
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
  if (copy_on_kernels(self, dst)) return dst;
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
  if (is_mpsrt(dst) && !(is_mpsrt(self) && self.device() == dst.device())) {
    sync_current(dst.device().index());
  }
  // The tensors' kept stand-ins (host_access.h: no new alias per copy).
  const uint64_t generation = api().runtime_generation();
  const c10::MaybeOwned<at::Tensor> s = ops::detail::stand_in(self, generation);
  const c10::MaybeOwned<at::Tensor> d = ops::detail::stand_in(dst, generation);
  if (same_layout && nbytes > 0 && s->device().is_cpu() && d->device().is_cpu()) {
    std::memcpy(d->mutable_data_ptr(), s->const_data_ptr(), nbytes);
  } else {
    d->copy_(*s);
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

// fill_ with a scalar: where the device runs CPU kernels on host-visible memory (no kernels of
// its own), the CPU's fill on the tensor's stand-in, in stream order as the ops around it run (a
// fill command queued on the stream would make the next op wait for it); else mpsrt's fill
// kernel on the current stream for dense tensors.
at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  const DeviceMode mode = device_mode(self.device().index());
  if (!mode.kernels && (mode.unified || host_visible(self.storage()))) {
    return ops::detail::Entry<at::_ops::fill__Scalar, ops::NoKernel, ops::HostPath::kTyped>::call(
        self, value);
  }
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

// fill_ with a 0-dim tensor: its value (read from the device when it is an mpsrt tensor: an
// alias after the queued work on unified memory, a staged copy on discrete memory; no new
// tensor through the copy ops, as value.cpu() would make). Python's `t[i] = 3.0` comes here
// with the scalar made into an mpsrt tensor.
at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  return fill_scalar(self, (is_mpsrt(value) ? host_values(value) : value).item());
}

// The inputs cat concatenates (torch skips 1-D empty tensors, the legacy "no tensor"), all
// mpsrt tensors of one device and rank with equal sizes but along dim (wrapped); nothing for
// the rest (torch's messages through the fallback).
std::optional<std::vector<at::Tensor>> cat_inputs(const at::ITensorListRef& all, int64_t* dim) {
  std::vector<at::Tensor> in;
  std::optional<at::Device> device;
  for (const at::Tensor& t : all) {
    if (!is_mpsrt(t) || (device && t.device() != *device)) return std::nullopt;
    device = t.device();
    if (!(t.dim() == 1 && t.numel() == 0)) in.push_back(t);
  }
  if (in.empty()) return std::nullopt;
  *dim = c10::maybe_wrap_dim(*dim, in[0].dim());
  for (const at::Tensor& t : in) {
    if (t.dim() != in[0].dim() || dtype_id(t.scalar_type()) < 0) return std::nullopt;
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (d != *dim && t.size(d) != in[0].size(d)) return std::nullopt;
    }
  }
  return in;
}

// Whether `out` can take cat's result (an mpsrt tensor of the inputs' device that the result
// dtype casts to, no input on its storage).
bool cat_out_takes(const at::ITensorListRef& all, const at::Tensor& first, at::ScalarType dtype,
                   const at::Tensor& out) {
  if (!is_mpsrt(out) || out.device() != first.device() || !at::canCast(dtype, out.scalar_type())) {
    return false;
  }
  for (const at::Tensor& t : all) {
    if (t.storage().is_alias_of(out.storage())) return false;
  }
  return true;
}

// cat(tensors, dim) and cat.out: the output in the promoted dtype (torch's result_type) and the
// inputs' memory format where they share one; each input copied into its slice (copy_: the
// kernel, or a plain copy where the slice is dense in the input's dtype).
struct Cat {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::ITensorListRef& all,
                                       int64_t dim) {
    const std::optional<std::vector<at::Tensor>> in = cat_inputs(all, &dim);
    if (!in) return std::nullopt;
    const std::vector<at::Tensor> materialized(all.begin(), all.end());
    const at::ScalarType dtype = at::native::result_type(materialized);
    std::vector<int64_t> shape = (*in)[0].sizes().vec();
    shape[dim] = 0;
    at::MemoryFormat format = (*in)[0].suggest_memory_format();
    for (const at::Tensor& t : *in) {
      shape[dim] += t.size(dim);
      if (t.suggest_memory_format() != format) format = at::MemoryFormat::Contiguous;
    }
    at::Tensor result = out;
    if (out.defined()) {
      if (!cat_out_takes(all, (*in)[0], dtype, out)) return std::nullopt;
      if (out.sizes() != c10::IntArrayRef(shape)) result.resize_(shape, format);
    } else {
      result = at::empty(shape, (*in)[0].options().dtype(dtype).memory_format(format));
    }
    int64_t offset = 0;
    for (const at::Tensor& t : *in) {
      if (t.size(dim) > 0) result.narrow(dim, offset, t.size(dim)).copy_(t);
      offset += t.size(dim);
    }
    return result;
  }
};

}  // namespace
}  // namespace mpsrt::torch_glue::ops::copy

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  namespace c = mpsrt::torch_glue::ops::copy;
  namespace ops = mpsrt::torch_glue::ops;
  namespace A = at::_ops;
  ops::reg<A::_copy_from, &c::copy_from>(m);
  ops::reg<A::_copy_from_and_resize, &c::copy_from_and_resize>(m);
  ops::reg<A::fill__Scalar, &c::fill_scalar>(m);
  ops::reg<A::fill__Tensor, &c::fill_tensor>(m);
  ops::reg<A::zero_, &c::zero_>(m);
  ops::reg<A::_local_scalar_dense, &c::local_scalar_dense>(m);
  ops::reg<A::cat, ops::Functional<c::Cat>, ops::HostPath::kTyped>(m);
  ops::reg<A::cat_out, ops::Out<c::Cat>>(m);
}

namespace mpsrt::torch_glue::ops::copy {
namespace {

// The bytes of a contiguous tensor of a packed quantized dtype (quint4x2: two elements a byte,
// quint2x4: four) as a uint8 tensor over its storage, on its device.
at::Tensor packed_bytes(const at::Tensor& t, int bits) {
  TORCH_CHECK(t.is_contiguous() && t.storage_offset() == 0, "[torch] a copy of a ", t.scalar_type(),
              " tensor between the CPU and the mpsrt device takes a contiguous tensor at the "
              "start of its storage (its elements are not whole bytes)");
  const int64_t n = (t.numel() * bits + 7) / 8;
  auto b = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(t.storage()),
      c10::DispatchKeySet(is_mpsrt(t) ? c10::DispatchKey::PrivateUse1 : c10::DispatchKey::CPU),
      caffe2::TypeMeta::Make<uint8_t>());
  b.unsafeGetTensorImpl()->set_sizes_contiguous({n});
  return b;
}

// _copy_from where a quantized tensor is on the device: torch's copy_ hands a device's copies
// to _copy_from before its quantized checks, so they are made here, with its words. Between two
// quantized tensors (one scheme and dtype): dst takes src's quantizer and the bytes move as any
// dtype's do (the integer representation is the data), a packed dtype's as the bytes its
// elements fill. A float source is quantized into dst by torch's CPU copy_ (on stand-ins,
// through the fallback).
at::Tensor copy_from_quantized(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(dst.is_quantized() || !self.is_quantized(),
              "Copying from quantized Tensor to non-quantized Tensor is not allowed, please use "
              "dequantize to get a float Tensor from a quantized Tensor");
  if (!self.is_quantized()) {
    static const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow("aten::copy_", "");
    torch::jit::Stack stack = c10::impl::boxArgs(dst, self, non_blocking);
    quantized_cpu_fallback(op, &stack);
    return dst;
  }
  TORCH_CHECK(dst.qscheme() == self.qscheme(), "Quantized Copy only works with same qscheme");
  TORCH_CHECK(dst.scalar_type() == self.scalar_type(),
              "Quantized Copy only works with same dtype, got ", self.scalar_type(), " into ",
              dst.scalar_type());
  at::set_quantizer_(dst, at::get_qtensorimpl(self)->quantizer());
  const at::ScalarType t = self.scalar_type();
  if (t == at::kQUInt4x2 || t == at::kQUInt2x4) {
    TORCH_CHECK(self.sizes() == dst.sizes(), "[torch] copy_: a ", t,
                " copy takes tensors of one shape");
    const int bits = t == at::kQUInt4x2 ? 4 : 2;
    copy_from(packed_bytes(self, bits), packed_bytes(dst, bits), non_blocking);
    return dst;
  }
  return copy_from(self, dst, non_blocking);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::copy

// Quantized tensors on the device (see fallback.cpp): their copies between the CPU and the
// device, and within it.
TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  namespace c = mpsrt::torch_glue::ops::copy;
  m.impl("_copy_from", TORCH_FN(c::copy_from_quantized));
}
