// Indexing operators on mpsrt's index kernel (csrc/kernels/index.comp): index_select (and so
// embedding, which torch composes from it), gather, scatter_add and embedding's backward.
// Every operand may be strided (up to 5 dims); the data dtypes are float32, float16, bfloat16,
// int32 and int64 for the reads, float32 and int32 for the atomic adds; indices int64 (and
// int32 where torch takes them). An index out of range reads 0 / adds nothing on the device
// (torch's CPU kernels raise; a kernel cannot).
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "host_access.h"
#include "kernels.h"

namespace mpsrt::torch_glue {
namespace {

using kernels::arg;
using kernels::Declined;
using kernels::finish;
using kernels::Launch;

// index.comp's ops.
enum IndexOp : uint32_t { kGather = 0, kScatterAddF32 = 1, kScatterAddI32 = 2 };
constexpr int kMaxDims = 5;

// index.comp's push constants after base[8]: the iteration shape innermost first, the strides
// of the indexed operand (x), the other data operand (y) and the index, in elements.
struct IndexGeom {
  uint32_t n = 1;
  uint32_t dim = 0;
  uint32_t limit = 0;
  int32_t skip = 0;
  uint32_t sizes[kMaxDims] = {1, 1, 1, 1, 1};
  int32_t xs[kMaxDims] = {};
  int32_t ys[kMaxDims] = {};
  int32_t is[kMaxDims] = {};
};
static_assert(sizeof(IndexGeom) == 96, "index.comp's push constants");

int32_t narrow(int64_t v) {
  if (v < 0 || v > INT32_MAX) throw Declined{};
  return static_cast<int32_t>(v);
}

// The dtype id of a data operand the gather reads; declines the others.
uint32_t data_dtype(const at::Tensor& t) {
  const at::ScalarType s = t.scalar_type();
  if (s != at::kFloat && s != at::kHalf && s != at::kBFloat16 && s != at::kInt && s != at::kLong)
    throw Declined{};
  return static_cast<uint32_t>(kernels::dtype_id(s));
}

uint32_t index_dtype(const at::Tensor& t, bool int32_ok) {
  if (t.scalar_type() == at::kLong) return MPSRT_DTYPE_INT64;
  if (int32_ok && t.scalar_type() == at::kInt) return MPSRT_DTYPE_INT32;
  throw Declined{};
}

// The geometry over `shape` (torch's dim order) with x, y and index strides given per torch dim
// (an empty stride list: all 0) and torch dim `dim` indexed in x.
IndexGeom geometry(at::IntArrayRef shape, int64_t dim, at::IntArrayRef xs, at::IntArrayRef ys,
                   at::IntArrayRef is, int64_t limit) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  if (nd > kMaxDims || nd == 0) throw Declined{};
  IndexGeom g;
  int64_t n = 1;
  for (int64_t k = 0; k < nd; ++k) {
    const int64_t d = nd - 1 - k;  // innermost first
    g.sizes[d] = static_cast<uint32_t>(narrow(shape[k]));
    g.xs[d] = narrow(xs[k]);
    g.ys[d] = narrow(ys[k]);
    g.is[d] = is.empty() ? 0 : narrow(is[k]);
    n *= shape[k];
  }
  g.n = static_cast<uint32_t>(narrow(n));
  g.dim = static_cast<uint32_t>(nd - 1 - dim);
  g.limit = static_cast<uint32_t>(narrow(limit));
  return g;
}

// One launch of index.comp: binding 0 `out` (written), 1 `data`, 2 `index`.
void launch_index(IndexOp op, const IndexGeom& g, uint32_t ndim, const at::Tensor& out,
                  const at::Tensor& data, const at::Tensor& index, uint32_t index_dt, bool skip) {
  Launch l("index", out.device().index());
  l.spec(op).spec(ndim);
  l.spec(static_cast<uint32_t>(kernels::dtype_id(out.scalar_type())));
  l.spec(static_cast<uint32_t>(kernels::dtype_id(data.scalar_type())));
  l.spec(index_dt).spec(skip ? 1 : 0);
  l.arg(out, true).arg(data, false).arg(index, false);
  l.push(g).grid(g.n, 256).run();
}

// index_select(self, dim, index): the rows of self along dim that index names.
bool index_select(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  const at::Tensor index = arg(op, s, 2).toTensor();
  if (self.dim() == 0 || index.dim() > 1) throw Declined{};
  const int64_t dim = c10::maybe_wrap_dim(arg(op, s, 1).toInt(), self.dim());
  const uint32_t dt = index_dtype(index, true);
  data_dtype(self);
  std::vector<int64_t> sizes = self.sizes().vec();
  sizes[dim] = index.numel();
  at::Tensor out = at::empty(sizes, self.options());
  if (out.numel() > 0) {
    std::vector<int64_t> is(sizes.size(), 0);
    is[dim] = index.dim() == 1 ? index.stride(0) : 0;
    const IndexGeom g =
        geometry(out.sizes(), dim, self.strides(), out.strides(), is, self.size(dim));
    launch_index(kGather, g, static_cast<uint32_t>(self.dim()), out, self, index, dt, false);
  }
  finish(op, s, out);
  return true;
}

// gather(self, dim, index, sparse_grad[, out]): out[c] = self[c with c[dim] = index[c]].
// Shapes torch refuses (index larger than self off dim) decline, and the fallback raises.
template <bool Out>
bool gather(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  const at::Tensor index = arg(op, s, 2).toTensor();
  if (self.dim() == 0 || index.dim() != self.dim()) throw Declined{};
  const int64_t dim = c10::maybe_wrap_dim(arg(op, s, 1).toInt(), self.dim());
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (d != dim && index.size(d) > self.size(d)) throw Declined{};
  }
  const uint32_t dt = index_dtype(index, false);
  data_dtype(self);
  at::Tensor out;
  if constexpr (Out) {
    out = arg(op, s, 4).toTensor();
    if (out.sizes() != index.sizes() || out.scalar_type() != self.scalar_type() ||
        at::has_internal_overlap(out) == at::MemOverlap::Yes)
      throw Declined{};
  } else {
    out = at::empty(index.sizes(), self.options());
  }
  if (out.numel() > 0) {
    const IndexGeom g = geometry(index.sizes(), dim, self.strides(), out.strides(), index.strides(),
                                 self.size(dim));
    launch_index(kGather, g, static_cast<uint32_t>(self.dim()), out, self, index, dt, false);
  }
  finish(op, s, out);
  return true;
}

// scatter_add's three forms: out = self + the src elements added at the positions index names
// along dim (functional: a copy of self; in place: self; out=: out after copying self in).
enum class IndexForm { kFunctional, kInplace, kOut };

template <IndexForm F>
bool scatter_add(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  const at::Tensor index = arg(op, s, 2).toTensor();
  const at::Tensor src = arg(op, s, 3).toTensor();
  if (self.dim() == 0 || index.dim() != self.dim() || src.dim() != self.dim()) throw Declined{};
  const int64_t dim = c10::maybe_wrap_dim(arg(op, s, 1).toInt(), self.dim());
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (index.size(d) > src.size(d) || (d != dim && index.size(d) > self.size(d))) throw Declined{};
  }
  const uint32_t dt = index_dtype(index, false);
  const at::ScalarType st = self.scalar_type();
  if ((st != at::kFloat && st != at::kInt) || src.scalar_type() != st) throw Declined{};
  at::Tensor out;
  if constexpr (F == IndexForm::kOut) {
    out = arg(op, s, 4).toTensor();
    if (out.sizes() != self.sizes() || out.scalar_type() != st) throw Declined{};
  } else if constexpr (F == IndexForm::kInplace) {
    out = self;
  }
  if (out.defined() && at::has_internal_overlap(out) == at::MemOverlap::Yes) throw Declined{};
  if (F == IndexForm::kFunctional) {
    out = self.clone();
  } else if (!out.is_same(self)) {
    out.copy_(self);
  }
  if (index.numel() > 0) {
    const IndexGeom g =
        geometry(index.sizes(), dim, out.strides(), src.strides(), index.strides(), out.size(dim));
    launch_index(st == at::kFloat ? kScatterAddF32 : kScatterAddI32, g,
                 static_cast<uint32_t>(self.dim()), out, src, index, dt, false);
  }
  finish(op, s, out);
  return true;
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
// scale_grad_by_freq): grad_weight[indices[i]] += grad_output[i] (rows of the last dim), the
// padding row left 0. float32 gradients; scale_grad_by_freq declines.
bool embedding_backward(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor grad = arg(op, s, 0).toTensor();
  const at::Tensor indices = arg(op, s, 1).toTensor();
  const int64_t num_weights = arg(op, s, 2).toInt();
  const int64_t padding_idx = arg(op, s, 3).toInt();
  if (arg(op, s, 4).toBool() || grad.scalar_type() != at::kFloat || grad.dim() == 0)
    throw Declined{};
  const uint32_t dt = index_dtype(indices, true);
  const int64_t n = indices.numel();
  const int64_t width = grad.size(-1);
  if (grad.numel() != n * width || padding_idx > INT32_MAX) throw Declined{};
  at::Tensor gw = at::zeros({num_weights, width}, grad.options());
  if (n > 0 && width > 0 && num_weights > 0) {
    const at::Tensor g2 = grad.reshape({n, width});
    const at::Tensor i1 = indices.reshape({n});
    const int64_t is[2] = {i1.stride(0), 0};
    IndexGeom g = geometry(g2.sizes(), 0, gw.strides(), g2.strides(), is, num_weights);
    g.skip = static_cast<int32_t>(padding_idx);
    launch_index(kScatterAddF32, g, 2, gw, g2, i1, dt, padding_idx >= 0);
  }
  finish(op, s, gw);
  return true;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  kernels::impl(m, "index_select", &index_select);
  kernels::impl(m, "gather", &gather<false>);
  kernels::impl(m, "gather.out", &gather<true>);
  kernels::impl(m, "scatter_add", &scatter_add<IndexForm::kFunctional>);
  kernels::impl(m, "scatter_add_", &scatter_add<IndexForm::kInplace>);
  kernels::impl(m, "scatter_add.out", &scatter_add<IndexForm::kOut>);
  kernels::impl(m, "embedding_dense_backward", &embedding_backward);
}

}  // namespace mpsrt::torch_glue
