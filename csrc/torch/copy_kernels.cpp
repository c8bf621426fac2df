// Copies within the mpsrt device on the elementwise kernel (csrc/kernels/elementwise.comp's
// copy): copy_ between mpsrt tensors of different dtypes or layouts (copy_ops.cpp's copy_from
// asks copy_on_kernels first), and cat, which copies each input into its slice of the output.
#include <ATen/ExpandUtils.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <vector>

#include "host_access.h"
#include "kernels.h"

namespace mpsrt::torch_glue {

// elementwise_ops.cpp: src copied into dst on the elementwise kernel; throws kernels::Declined.
void elementwise_copy(const at::Tensor& dst, const at::Tensor& src);

// dst.copy_(src) for mpsrt tensors on one device where the device runs kernels: whether the
// kernel did it (false: the caller copies another way; nothing was launched).
bool copy_on_kernels(const at::Tensor& src, const at::Tensor& dst) {
  if (!is_mpsrt(src) || !is_mpsrt(dst) || src.device() != dst.device() || dst.numel() == 0 ||
      !kernels::enabled(dst.device().index())) {
    return false;
  }
  try {
    elementwise_copy(dst, src);
    return true;
  } catch (const kernels::Declined&) {
    return false;
  }
}

namespace {

using kernels::arg;
using kernels::Declined;

// The inputs cat concatenates (torch skips 1-D empty tensors, the legacy "no tensor"), all
// mpsrt tensors of one device and rank with equal sizes but along dim; declines the rest
// (torch's messages through the fallback).
std::vector<at::Tensor> cat_inputs(const std::vector<at::Tensor>& all, int64_t* dim) {
  std::vector<at::Tensor> in;
  for (const at::Tensor& t : all) {
    if (!is_mpsrt(t) || t.device() != all[0].device()) throw Declined{};
    if (!(t.dim() == 1 && t.numel() == 0)) in.push_back(t);
  }
  if (in.empty()) throw Declined{};
  *dim = c10::maybe_wrap_dim(*dim, in[0].dim());
  for (const at::Tensor& t : in) {
    if (t.dim() != in[0].dim() || kernels::dtype_id(t.scalar_type()) < 0) throw Declined{};
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (d != *dim && t.size(d) != in[0].size(d)) throw Declined{};
    }
  }
  return in;
}

// cat(tensors, dim) and cat.out: the output in the promoted dtype (torch's result_type) and the
// inputs' memory format where they share one; each input copied into its slice (copy_: the
// kernel, or a plain copy where the slice is dense in the input's dtype).
template <bool Out>
bool cat(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const std::vector<at::Tensor> all = arg(op, s, 0).toTensorVector();
  if (all.empty()) throw Declined{};
  int64_t dim = arg(op, s, 1).toInt();
  const std::vector<at::Tensor> in = cat_inputs(all, &dim);
  const at::ScalarType dtype = at::native::result_type(all);
  std::vector<int64_t> shape = in[0].sizes().vec();
  shape[dim] = 0;
  at::MemoryFormat format = in[0].suggest_memory_format();
  for (const at::Tensor& t : in) {
    shape[dim] += t.size(dim);
    if (t.suggest_memory_format() != format) format = at::MemoryFormat::Contiguous;
  }
  at::Tensor out;
  if constexpr (Out) {
    out = arg(op, s, 2).toTensor();
    if (!is_mpsrt(out) || out.device() != in[0].device() ||
        !at::canCast(dtype, out.scalar_type())) {
      throw Declined{};
    }
    for (const at::Tensor& t : all) {
      if (t.storage().is_alias_of(out.storage())) throw Declined{};
    }
    if (out.sizes() != c10::IntArrayRef(shape)) out.resize_(shape, format);
  } else {
    out = at::empty(shape, in[0].options().dtype(dtype).memory_format(format));
  }
  int64_t offset = 0;
  for (const at::Tensor& t : in) {
    if (t.size(dim) > 0) out.narrow(dim, offset, t.size(dim)).copy_(t);
    offset += t.size(dim);
  }
  kernels::finish(op, s, out);
  return true;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  kernels::impl(m, "cat", &cat<false>);
  kernels::impl(m, "cat.out", &cat<true>);
}

}  // namespace mpsrt::torch_glue
