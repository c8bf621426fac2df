// The mpsrt device's operators that move or set bytes: copy_ (between cpu and mpsrt or within
// mpsrt), fill_ and zero_ on mpsrt's fill kernel, and _local_scalar_dense (item()).
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstring>

#include "host_access.h"
#include "runtime.h"
#include "storage_ops.h"

namespace mpsrt::torch_glue {

// copy_kernels.cpp: an mpsrt -> mpsrt copy on the elementwise kernel (any dtypes and strides)
// where the device runs kernels; false where it did not copy.
bool copy_on_kernels(const at::Tensor& src, const at::Tensor& dst);

namespace {

// copy_ between cpu and mpsrt or within mpsrt. Same dtype, both dense in the same layout:
// mpsrt's copy kernel on the destination's current stream (device to device) or one memcpy
// after the stream's queued work (host <-> device; a staged copy on discrete memory); within
// a device that runs kernels, the elementwise kernel (other dtypes or layouts); otherwise
// torch's CPU copy on aliases (on discrete memory: on host copies).
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

// fill_ with a 0-dim tensor: its value (read from the device when it is an mpsrt tensor: an
// alias after the queued work on unified memory, a staged copy on discrete memory; no new
// tensor through the copy ops, as value.cpu() would make). Python's `t[i] = 3.0` comes here
// with the scalar made into an mpsrt tensor.
at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  return fill_scalar(self, (is_mpsrt(value) ? host_values(value) : value).item());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", &copy_from);
  m.impl("_copy_from_and_resize", &copy_from_and_resize);
  m.impl("fill_.Scalar", &fill_scalar);
  m.impl("fill_.Tensor", &fill_tensor);
  m.impl("zero_", &zero_);
  m.impl("_local_scalar_dense", &local_scalar_dense);
}

}  // namespace mpsrt::torch_glue
