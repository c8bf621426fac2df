// Indexing operators on mpsrt's index kernels (csrc/kernels/index/): index_select (and so
// embedding, which torch composes from it), gather, scatter, scatter_add, embedding's backward,
// advanced indexing (index.Tensor, index_put_), masked_scatter_, and embedding_bag (sum, mean,
// max; offsets, per_sample_weights, padding_idx) with its dense backward. Every operand of the
// index kernel may be strided (up to 5 dims); the data dtypes are float32, float16, bfloat16
// and the integer and bool dtypes for the reads and stores, float32 and int32 for the atomic
// adds; indices int64 (and int32 where torch takes them). An index out of range reads 0 / adds
// nothing on the device (torch's CPU kernels raise; a kernel cannot), except for index.Tensor
// and index_put_, which count them first and raise.
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <ATen/ExpandUtils.h>
#include <ATen/native/IndexingUtils.h>
#include <ATen/ops/_embedding_bag_backward_ops.h>
#include <ATen/ops/_embedding_bag_forward_only_ops.h>
#include <ATen/ops/_embedding_bag_ops.h>
#include <ATen/ops/embedding_dense_backward.h>
#include <ATen/ops/embedding_dense_backward_ops.h>
#include <ATen/ops/gather_ops.h>
#include <ATen/ops/index_ops.h>
#include <ATen/ops/index_put_ops.h>
#include <ATen/ops/index_select_ops.h>
#include <ATen/ops/masked_scatter_ops.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/scatter_add_ops.h>
#include <ATen/ops/scatter_ops.h>
#include <ATen/ops/scatter_reduce_ops.h>
#include <ATen/ops/where.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <optional>
#include <vector>

#include "device/host_access.h"
#include "index/embedding_bag.h"
#include "index/index.h"
#include "ops/common.h"

namespace mpsrt::torch_glue::ops::index {
namespace {

using namespace mpsrt::kernels::index;  // NOLINT: the kernel's interface

// v as the kernel's 32-bit size, stride or count: 0 or more, and fits an int32.
std::optional<int32_t> count(int64_t v) {
  if (v < 0) return std::nullopt;
  return narrow<int32_t>(v);
}

// Whether the gather reads t's dtype.
bool data_dtype(const at::Tensor& t) {
  const at::ScalarType s = t.scalar_type();
  return s == at::kFloat || s == at::kHalf || s == at::kBFloat16 || s == at::kInt ||
         s == at::kLong || s == at::kShort || s == at::kChar || s == at::kByte || s == at::kBool;
}

// The index's dtype id (int64, or int32 where int32_ok); nothing for other dtypes.
std::optional<uint32_t> index_dtype(const at::Tensor& t, bool int32_ok) {
  if (t.scalar_type() == at::kLong) return MPSRT_DTYPE_INT64;
  if (int32_ok && t.scalar_type() == at::kInt) return MPSRT_DTYPE_INT32;
  return std::nullopt;
}

// The push constants over `shape` (torch's dim order) with x, y and index strides given per
// torch dim (an empty index stride list: all 0) and torch dim `dim` indexed in x; nothing where
// the shape has no dims or more than the kernel's, or a value does not fit.
std::optional<Push> geometry(at::IntArrayRef shape, int64_t dim, at::IntArrayRef xs,
                             at::IntArrayRef ys, at::IntArrayRef is, int64_t limit) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  if (nd > MAX_DIMS || nd == 0) return std::nullopt;
  Push g{};
  std::fill(std::begin(g.sizes), std::end(g.sizes), 1u);
  int64_t n = 1;
  for (int64_t k = 0; k < nd; ++k) {
    const int64_t d = nd - 1 - k;  // innermost first
    const std::optional<int32_t> size = count(shape[k]), x = count(xs[k]), y = count(ys[k]),
                                 i = is.empty() ? std::optional<int32_t>(0) : count(is[k]);
    if (!size || !x || !y || !i) return std::nullopt;
    g.sizes[d] = static_cast<uint32_t>(*size);
    g.xs[d] = *x;
    g.ys[d] = *y;
    g.is[d] = *i;
    n *= shape[k];
  }
  const std::optional<int32_t> total = count(n), lim = count(limit);
  if (!total || !lim) return std::nullopt;
  g.n = static_cast<uint32_t>(*total);
  g.dim = static_cast<uint32_t>(nd - 1 - dim);
  g.limit = static_cast<uint32_t>(*lim);
  return g;
}

// One launch of index.comp: binding 0 `out` (written), 1 `data`, 2 `index`; false where the
// launch declines (nothing launched).
[[nodiscard]] bool launch_index(uint32_t op, const Push& g, uint32_t ndim, const at::Tensor& out,
                                const at::Tensor& data, const at::Tensor& index, uint32_t index_dt,
                                bool skip, uint32_t reduce = REDUCE_SUM) {
  Launch l("index", out.device().index());
  l.spec(SPEC_OP, op).spec(SPEC_NDIM, ndim).spec(SPEC_DT0, dt(out)).spec(SPEC_DT1, dt(data));
  l.spec(SPEC_DTI, index_dt).spec(SPEC_SKIP, skip ? 1 : 0).spec(SPEC_REDUCE, reduce);
  l.arg(out, true).arg(data, false).arg(index, false);
  return l.push(g).grid(g.n, LOCAL).run();
}

// index_select(self, dim, index): the rows of self along dim that index names.
std::optional<at::Tensor> index_select(const at::Tensor& self, int64_t dim_arg,
                                       const at::Tensor& index) {
  if (self.dim() == 0 || index.dim() > 1) return std::nullopt;
  const int64_t dim = c10::maybe_wrap_dim(dim_arg, self.dim());
  const std::optional<uint32_t> dt = index_dtype(index, true);
  if (!dt || !data_dtype(self)) return std::nullopt;
  std::vector<int64_t> sizes = self.sizes().vec();
  sizes[dim] = index.numel();
  at::Tensor out = at::empty(sizes, self.options());
  if (out.numel() > 0) {
    std::vector<int64_t> is(sizes.size(), 0);
    is[dim] = index.dim() == 1 ? index.stride(0) : 0;
    const std::optional<Push> g =
        geometry(out.sizes(), dim, self.strides(), out.strides(), is, self.size(dim));
    if (!g || !launch_index(OP_GATHER, *g, static_cast<uint32_t>(self.dim()), out, self, index, *dt,
                            false)) {
      return std::nullopt;
    }
  }
  return out;
}

// gather(self, dim, index, sparse_grad): out[c] = self[c with c[dim] = index[c]] (out
// undefined: a new tensor; out=: its shape the index's). Shapes torch refuses (index larger
// than self off dim) decline, and the fallback raises.
struct Gather {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self, int64_t dim_arg,
                                       const at::Tensor& index, bool /*sparse_grad*/) {
    if (self.dim() == 0 || index.dim() != self.dim()) return std::nullopt;
    const int64_t dim = c10::maybe_wrap_dim(dim_arg, self.dim());
    for (int64_t d = 0; d < self.dim(); ++d) {
      if (d != dim && index.size(d) > self.size(d)) return std::nullopt;
    }
    const std::optional<uint32_t> dt = index_dtype(index, false);
    if (!dt || !data_dtype(self)) return std::nullopt;
    if (out.defined()) {
      if (out.sizes() != index.sizes() || out.scalar_type() != self.scalar_type() ||
          at::has_internal_overlap(out) == at::MemOverlap::Yes)
        return std::nullopt;
    } else {
      out = at::empty(index.sizes(), self.options());
    }
    if (out.numel() > 0) {
      const std::optional<Push> g = geometry(index.sizes(), dim, self.strides(), out.strides(),
                                             index.strides(), self.size(dim));
      if (!g || !launch_index(OP_GATHER, *g, static_cast<uint32_t>(self.dim()), out, self, index,
                              *dt, false)) {
        return std::nullopt;
      }
    }
    return out;
  }
};

// scatter_add's checks: ranks, index within src (and within self off dim), dtypes; the index's
// dtype id where the kernel takes them.
std::optional<uint32_t> scatter_add_args(const at::Tensor& self, int64_t dim,
                                         const at::Tensor& index, const at::Tensor& src) {
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (index.size(d) > src.size(d) || (d != dim && index.size(d) > self.size(d))) {
      return std::nullopt;
    }
  }
  const std::optional<uint32_t> dt = index_dtype(index, false);
  const at::ScalarType st = self.scalar_type();
  if (!dt || (st != at::kFloat && st != at::kInt) || src.scalar_type() != st) return std::nullopt;
  return dt;
}

// out (self's clone where undefined) holding self's values, for a scatter into it; false where
// an out= tensor cannot take them (another shape or dtype, or overlapping itself).
[[nodiscard]] bool start_from_self(at::Tensor& out, const at::Tensor& self) {
  if (out.defined() && (out.sizes() != self.sizes() || out.scalar_type() != self.scalar_type() ||
                        at::has_internal_overlap(out) == at::MemOverlap::Yes)) {
    return false;
  }
  if (!out.defined()) {
    out = self.clone();
  } else if (!out.is_same(self)) {
    out.copy_(self);
  }
  return true;
}

// scatter_add: out = self + the src elements added at the positions index names along dim
// (functional, out undefined: a copy of self; in place: out is self; out=: out after copying
// self in).
struct ScatterAdd {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self, int64_t dim_arg,
                                       const at::Tensor& index, const at::Tensor& src) {
    if (self.dim() == 0 || index.dim() != self.dim() || src.dim() != self.dim()) {
      return std::nullopt;
    }
    const int64_t dim = c10::maybe_wrap_dim(dim_arg, self.dim());
    const std::optional<uint32_t> dt = scatter_add_args(self, dim, index, src);
    if (!dt) return std::nullopt;
    const at::ScalarType st = self.scalar_type();
    if (!start_from_self(out, self)) return std::nullopt;
    if (index.numel() > 0) {
      const std::optional<Push> g = geometry(index.sizes(), dim, out.strides(), src.strides(),
                                             index.strides(), out.size(dim));
      if (!g || !launch_index(st == at::kFloat ? OP_SCATTER_ADD_F32 : OP_SCATTER_ADD_I32, *g,
                              static_cast<uint32_t>(self.dim()), out, src, index, *dt, false)) {
        return std::nullopt;
      }
    }
    return out;
  }
};

// scatter(self, dim, index, src): out = self with src's elements stored at the positions index
// names along dim (functional, in place, out=), for the gather's data dtypes; a Scalar src
// (scatter.value) as a one-element device tensor read at every position.
struct Scatter {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self, int64_t dim_arg,
                                       const at::Tensor& index, const at::Tensor& src) {
    if (self.dim() == 0 || index.dim() != self.dim()) return std::nullopt;
    const bool scalar = src.dim() == 0;
    if (!scalar && src.dim() != self.dim()) return std::nullopt;
    const int64_t dim = c10::maybe_wrap_dim(dim_arg, self.dim());
    for (int64_t d = 0; d < self.dim(); ++d) {
      if ((!scalar && index.size(d) > src.size(d)) || (d != dim && index.size(d) > self.size(d)))
        return std::nullopt;
    }
    const std::optional<uint32_t> dt = index_dtype(index, false);
    if (!dt || !data_dtype(self) || src.scalar_type() != self.scalar_type()) return std::nullopt;
    if (!start_from_self(out, self)) return std::nullopt;
    if (index.numel() > 0) {
      const std::vector<int64_t> none(self.dim(), 0);
      const std::optional<Push> g =
          geometry(index.sizes(), dim, out.strides(),
                   scalar ? at::IntArrayRef(none) : src.strides(), index.strides(), out.size(dim));
      if (!g || !launch_index(OP_SCATTER, *g, static_cast<uint32_t>(self.dim()), out, src, index,
                              *dt, false)) {
        return std::nullopt;
      }
    }
    return out;
  }
};

// scatter_reduce(self, dim, index, src, reduce, include_self) for float32: sum, prod, amax,
// amin and mean as compare-and-swap reductions into a copy of self (positions that receive
// src first reset to the reduction's identity where !include_self); mean divides by the
// count of what reached each position (an int32 scatter_add of ones).
struct ScatterReduce {
  static std::optional<uint32_t> reduction(c10::string_view r) {
    if (r == "sum" || r == "mean") return REDUCE_SUM;
    if (r == "prod") return REDUCE_PROD;
    if (r == "amax") return REDUCE_AMAX;
    if (r == "amin") return REDUCE_AMIN;
    return std::nullopt;
  }

  static double identity(uint32_t red) {
    if (red == REDUCE_PROD) return 1.0;
    if (red == REDUCE_AMAX) return -std::numeric_limits<double>::infinity();
    if (red == REDUCE_AMIN) return std::numeric_limits<double>::infinity();
    return 0.0;
  }

  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self, int64_t dim_arg,
                                       const at::Tensor& index, const at::Tensor& src,
                                       c10::string_view reduce, bool include_self) {
    const std::optional<uint32_t> red = reduction(reduce);
    if (!red || self.scalar_type() != at::kFloat || self.dim() == 0) return std::nullopt;
    const int64_t dim = c10::maybe_wrap_dim(dim_arg, self.dim());
    const std::optional<uint32_t> dt = scatter_add_args(self, dim, index, src);
    if (!dt || index.dim() != self.dim() || src.dim() != self.dim()) return std::nullopt;
    if (out.defined() && (out.sizes() != self.sizes() || out.scalar_type() != at::kFloat ||
                          at::has_internal_overlap(out) == at::MemOverlap::Yes)) {
      return std::nullopt;
    }
    at::Tensor r = out.defined() ? out : self.clone();
    if (out.defined() && !out.is_same(self)) r.copy_(self);
    if (index.numel() == 0) return out = r;
    const std::optional<Push> g =
        geometry(index.sizes(), dim, r.strides(), src.strides(), index.strides(), r.size(dim));
    if (!g) return std::nullopt;
    const uint32_t nd = static_cast<uint32_t>(self.dim());
    if (!include_self) {
      const at::Tensor id = at::full({}, identity(*red), r.options());
      std::optional<Push> g0 = geometry(index.sizes(), dim, r.strides(),
                                        std::vector<int64_t>(nd, 0), index.strides(), r.size(dim));
      if (!g0 || !launch_index(OP_SCATTER, *g0, nd, r, id, index, *dt, false)) return std::nullopt;
    }
    if (!launch_index(OP_SCATTER_REDUCE_F32, *g, nd, r, src, index, *dt, false, *red)) {
      return std::nullopt;
    }
    if (reduce == "mean") {
      at::Tensor counts = at::zeros(self.sizes(), self.options().dtype(at::kInt));
      const at::Tensor ones = at::ones(index.sizes(), counts.options());
      const std::optional<Push> gc = geometry(index.sizes(), dim, counts.strides(), ones.strides(),
                                              index.strides(), counts.size(dim));
      if (!gc || !launch_index(OP_SCATTER_ADD_I32, *gc, nd, counts, ones, index, *dt, false)) {
        return std::nullopt;
      }
      r.copy_(at::where(counts.gt(0), r.div(counts.add(include_self ? 1 : 0)), r));
    }
    return out = r;
  }
};

// scatter.reduce / scatter.value_reduce ("add", "multiply"): scatter_reduce with self included.
struct ScatterReduceOld {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self, int64_t dim,
                                       const at::Tensor& index, const at::Tensor& src,
                                       c10::string_view reduce) {
    if (reduce != "add" && reduce != "multiply") return std::nullopt;
    return ScatterReduce::run(out, self, dim, index, src, reduce == "add" ? "sum" : "prod", true);
  }
};

// scatter.value: the Scalar as a one-element tensor on self's device.
struct ScatterValue {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self, int64_t dim,
                                       const at::Tensor& index, const at::Scalar& value) {
    if (!data_dtype(self)) return std::nullopt;
    const at::Tensor v = at::full({}, value, self.options());
    return Scatter::run(out, self, dim, index, v);
  }
};

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
// scale_grad_by_freq): grad_weight[indices[i]] += grad_output[i] (rows of the last dim), the
// padding row left 0. float32 gradients; scale_grad_by_freq declines.
std::optional<at::Tensor> embedding_backward(const at::Tensor& grad, const at::Tensor& indices,
                                             int64_t num_weights, int64_t padding_idx,
                                             bool scale_grad_by_freq) {
  if (scale_grad_by_freq || grad.scalar_type() != at::kFloat || grad.dim() == 0) {
    return std::nullopt;
  }
  const std::optional<uint32_t> dt = index_dtype(indices, true);
  if (!dt) return std::nullopt;
  const int64_t n = indices.numel();
  const int64_t width = grad.size(-1);
  if (grad.numel() != n * width || (padding_idx >= 0 && !fits<int32_t>(padding_idx))) {
    return std::nullopt;
  }
  at::Tensor gw = at::zeros({num_weights, width}, grad.options());
  if (n > 0 && width > 0 && num_weights > 0) {
    const at::Tensor g2 = grad.reshape({n, width});
    const at::Tensor i1 = indices.reshape({n});
    const int64_t is[2] = {i1.stride(0), 0};
    std::optional<Push> g = geometry(g2.sizes(), 0, gw.strides(), g2.strides(), is, num_weights);
    if (!g) return std::nullopt;
    g->skip = static_cast<int32_t>(padding_idx);  // read only where padding_idx >= 0
    if (!launch_index(OP_SCATTER_ADD_F32, *g, 2, gw, g2, i1, *dt, padding_idx >= 0)) {
      return std::nullopt;
    }
  }
  return gw;
}

// ------------------------------------------------------------------ advanced indexing
// index.Tensor and index_put_: the index tensors (bool / byte masks as their nonzero positions,
// as torch expands them; int32 or int64) broadcast together and become one element offset per
// position, lin = sum_k wrap(idx_k) * self.stride(k), which the index kernel reads along one dim
// of stride 1. Indexed dims side by side keep their place in the result; apart, the index's
// dims come first (torch's rule). An index out of range raises IndexError (one read of the
// device's count of them).
struct Flat {
  at::Tensor lin;                      // int64, 1-D: the element offsets
  std::vector<int64_t> shape;          // the broadcast index shape
  std::vector<int64_t> before, after;  // the dims of self not indexed, before / after the index's
  int64_t limit = 1;                   // 1 + the largest offset the indexed dims reach
};

// The indices as one offset per position; nothing where the kernel does not take them.
std::optional<Flat> flatten(const at::Tensor& self,
                            const c10::List<std::optional<at::Tensor>>& in) {
  TORCH_CHECK_INDEX(static_cast<int64_t>(in.size()) <= self.dim(),
                    "too many indices for tensor of dimension ", self.dim(), " (got ", in.size(),
                    ")");
  at::native::checkIndexTensorTypes(in, true);
  std::vector<at::Tensor> idx = at::native::expandTensors(self, in);
  TORCH_CHECK_INDEX(static_cast<int64_t>(idx.size()) <= self.dim(),
                    "too many indices for tensor of dimension ", self.dim(), " (got ", idx.size(),
                    ")");
  idx.resize(self.dim());
  Flat f;
  at::DimVector shape;
  bool any = false;
  for (const at::Tensor& t : idx) {
    if (!t.defined()) continue;
    shape = any ? at::infer_size_dimvector(shape, t.sizes()) : at::DimVector(t.sizes());
    any = true;
  }
  if (!any) return std::nullopt;
  f.shape.assign(shape.begin(), shape.end());
  const bool adjacent = at::native::hasContiguousSubspace(idx);
  bool seen = false;
  at::Tensor bad;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!idx[d].defined()) {
      (adjacent && !seen ? f.before : f.after).push_back(d);
      continue;
    }
    seen = true;
    const int64_t size = self.size(d);
    const at::Tensor w = idx[d].to(at::kLong).expand(shape);
    const at::Tensor out_of_range = w.lt(-size).sum().add(w.ge(size).sum());
    bad = bad.defined() ? bad.add(out_of_range) : out_of_range;
    const at::Tensor term = at::where(w.lt(0), w.add(size), w).mul(self.stride(d));
    f.lin = f.lin.defined() ? f.lin.add(term) : term;
    f.limit += std::max<int64_t>(size - 1, 0) * self.stride(d);
  }
  f.lin = f.lin.reshape({-1}).contiguous();
  TORCH_CHECK_INDEX(f.lin.numel() == 0 || bad.item<int64_t>() == 0,
                    "index out of range for a tensor of size ", self.sizes());
  return f;
}

// The iteration shape [before..., L, after...] and self's strides over it (the index dim's
// stride 1), and the result's shape [before..., index shape..., after...].
struct FlatGeometry {
  std::vector<int64_t> iter, self_strides, result;
  int64_t dim = 0;
};

FlatGeometry flat_geometry(const at::Tensor& self, const Flat& f) {
  FlatGeometry g;
  for (const int64_t d : f.before) {
    g.iter.push_back(self.size(d));
    g.self_strides.push_back(self.stride(d));
    g.result.push_back(self.size(d));
  }
  g.dim = static_cast<int64_t>(g.iter.size());
  g.iter.push_back(f.lin.numel());
  g.self_strides.push_back(1);
  g.result.insert(g.result.end(), f.shape.begin(), f.shape.end());
  for (const int64_t d : f.after) {
    g.iter.push_back(self.size(d));
    g.self_strides.push_back(self.stride(d));
    g.result.push_back(self.size(d));
  }
  return g;
}

// The index strides over the iteration shape: 1 along the index dim, else 0.
std::vector<int64_t> lin_strides(const FlatGeometry& g) {
  std::vector<int64_t> is(g.iter.size(), 0);
  is[g.dim] = 1;
  return is;
}

std::optional<at::Tensor> index_tensor(const at::Tensor& self,
                                       const c10::List<std::optional<at::Tensor>>& indices) {
  if (self.dim() == 0 || !data_dtype(self)) return std::nullopt;
  const std::optional<Flat> f = flatten(self, indices);
  if (!f) return std::nullopt;
  const FlatGeometry g = flat_geometry(self, *f);
  at::Tensor out = at::empty(g.iter, self.options());
  if (out.numel() > 0) {
    const std::optional<Push> p =
        geometry(g.iter, g.dim, g.self_strides, out.strides(), lin_strides(g), f->limit);
    if (!p || !launch_index(OP_GATHER, *p, static_cast<uint32_t>(g.iter.size()), out, self, f->lin,
                            MPSRT_DTYPE_INT64, false)) {
      return std::nullopt;
    }
  }
  return out.view(g.result);
}

// _index_put_impl_(self, indices, values, accumulate, unsafe): values (broadcast to the
// indexed result's shape) stored, or added (float32 and int32 self), at the positions.
at::Tensor* index_put(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                      const at::Tensor& values, bool accumulate, bool /*unsafe*/) {
  const at::ScalarType st = self.scalar_type();
  if (self.dim() == 0 || !data_dtype(self) || values.scalar_type() != st) return nullptr;
  if (accumulate && st != at::kFloat && st != at::kInt) return nullptr;
  if (!is_mpsrt(values) || values.storage().is_alias_of(self.storage()) ||
      at::has_internal_overlap(self) == at::MemOverlap::Yes) {
    return nullptr;
  }
  const std::optional<Flat> f = flatten(self, indices);
  if (!f) return nullptr;
  const FlatGeometry g = flat_geometry(self, *f);
  if (c10::multiply_integers(g.iter) == 0) return &self;
  const at::Tensor v = values.expand(g.result).contiguous().view(g.iter);
  const std::optional<Push> p =
      geometry(g.iter, g.dim, g.self_strides, v.strides(), lin_strides(g), f->limit);
  const uint32_t op =
      !accumulate ? OP_SCATTER : (st == at::kFloat ? OP_SCATTER_ADD_F32 : OP_SCATTER_ADD_I32);
  if (!p || !launch_index(op, *p, static_cast<uint32_t>(g.iter.size()), self, v, f->lin,
                          MPSRT_DTYPE_INT64, false)) {
    return nullptr;
  }
  return &self;
}

// masked_scatter_(self, mask, source): the positions where mask (broadcast to self) is true
// take source's elements in order: each such position's rank among them from a running sum
// of the mask (the scan kernel), then a gather from source and a select.
at::Tensor* masked_scatter(at::Tensor& self, const at::Tensor& mask, const at::Tensor& source) {
  if (mask.scalar_type() != at::kBool || mask.dim() > self.dim() ||
      source.scalar_type() != self.scalar_type() || !data_dtype(self) || !is_mpsrt(source) ||
      !is_mpsrt(mask)) {
    return nullptr;
  }
  const at::Tensor m = mask.expand(self.sizes()).reshape({-1});
  if (m.numel() == 0) return &self;
  const at::Tensor rank = m.cumsum(0);
  const int64_t ones = rank.select(0, m.numel() - 1).item<int64_t>();
  TORCH_CHECK(ones <= source.numel(), "masked_scatter: expected source to have at least as many ",
              "elements as the ones in mask");
  if (source.numel() == 0) return &self;
  const at::Tensor take = rank.sub(1).clamp_min(0);
  const at::Tensor picked = source.reshape({-1}).index_select(0, take).view(self.sizes());
  self.copy_(at::where(m.view(self.sizes()), picked, self));
  return &self;
}

// ------------------------------------------------------------------ embedding_bag
namespace eb = mpsrt::kernels::embedding_bag;
using Bags = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// Whether the bag kernel takes the arguments: 2-D float weight, 1-D int32 / int64 indices and
// offsets of one dtype, per_sample_weights (mode sum) of weight's dtype, at most 60000 indices
// (an invocation loops over its bag: llvmpipe's bound is 65535 iterations).
bool bag_args(const at::Tensor& w, const at::Tensor& idx, const at::Tensor& off, int64_t mode,
              const std::optional<at::Tensor>& psw) {
  if (w.dim() != 2 || !is_float(w.scalar_type()) || idx.dim() != 1 || off.dim() != 1) return false;
  if (!index_dtype(idx, true) || off.scalar_type() != idx.scalar_type()) return false;
  if (mode < 0 || mode > 2 || idx.numel() > 60000 || off.numel() == 0) return false;
  if (psw && psw->defined() &&
      (mode != 0 || psw->scalar_type() != w.scalar_type() || psw->numel() != idx.numel())) {
    return false;
  }
  return fits<int32_t>(w.numel(), off.numel() * w.size(1)) &&
         fits<int32_t>(w.stride(0), w.stride(1));
}

// One launch of embedding_bag.comp.
bool launch_bags(uint32_t op, int64_t mode, const eb::Push& g, const at::Tensor& a0,
                 const at::Tensor& w, const at::Tensor& idx, const at::Tensor& off,
                 const std::optional<at::Tensor>& psw, const at::Tensor& a5, bool pad) {
  const bool has_psw = psw && psw->defined();
  Launch l("embedding_bag", w.device().index());
  l.spec(eb::SPEC_OP, op)
      .spec(eb::SPEC_MODE, static_cast<uint32_t>(mode))
      .spec(eb::SPEC_DTW, dt(w));
  l.spec(eb::SPEC_DTI, dt(idx)).spec(eb::SPEC_HAS_PSW, has_psw ? 1 : 0).spec(eb::SPEC_HAS_PAD, pad);
  l.arg(a0, true).arg(w, false).arg(idx, false).arg(off, false).arg(has_psw ? *psw : w, false);
  l.arg(a5, op == eb::OP_AUX || mode == eb::MODE_MAX);
  const uint64_t items = op == eb::OP_BAGS ? uint64_t{g.bags} * g.width : uint64_t{g.n} + g.bags;
  return l.push(g).grid(std::max<uint64_t>(items, 1), eb::LOCAL).run();
}

// _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
// per_sample_weights, include_last_offset, padding_idx): (out, offset2bag, bag_size,
// max_indices; the last [bags, width] in mode max, else empty).
std::optional<Bags> embedding_bag(const at::Tensor& w, const at::Tensor& idx_arg,
                                  const at::Tensor& off_arg, bool /*scale_grad_by_freq*/,
                                  int64_t mode, bool /*sparse*/,
                                  const std::optional<at::Tensor>& psw_arg,
                                  bool include_last_offset, int64_t padding_idx) {
  if (!bag_args(w, idx_arg, off_arg, mode, psw_arg) || !fits<int32_t>(padding_idx)) {
    return std::nullopt;
  }
  // The kernel reads indices, offsets and per_sample_weights as contiguous rows.
  const at::Tensor idx = idx_arg.contiguous(), off = off_arg.contiguous();
  std::optional<at::Tensor> psw;
  if (psw_arg && psw_arg->defined()) psw = psw_arg->contiguous();
  const int64_t bags = include_last_offset ? off.numel() - 1 : off.numel();
  const auto lopts = idx.options().dtype(at::kLong);
  at::Tensor out = at::empty({bags, w.size(1)}, w.options());
  at::Tensor o2b = at::empty({idx.numel()}, lopts), size = at::empty({bags}, lopts);
  at::Tensor maxi = at::empty({mode == eb::MODE_MAX ? bags : 0, w.size(1)}, lopts);
  eb::Push g{};
  g.bags = static_cast<uint32_t>(std::max<int64_t>(bags, 0));
  g.width = static_cast<uint32_t>(w.size(1));
  g.n = static_cast<uint32_t>(idx.numel());
  g.n_offsets = static_cast<uint32_t>(off.numel());
  g.num_weights = static_cast<uint32_t>(w.size(0));
  g.padding_idx = static_cast<int32_t>(padding_idx);
  g.ws0 = static_cast<uint32_t>(w.stride(0));
  g.ws1 = static_cast<uint32_t>(w.stride(1));
  const bool pad = padding_idx >= 0;
  const at::Tensor m5 = mode == eb::MODE_MAX ? maxi : size;
  if (bags > 0 && w.size(1) > 0 &&
      !launch_bags(eb::OP_BAGS, mode, g, out, w, idx, off, psw, m5, pad)) {
    return std::nullopt;
  }
  if (bags > 0 && !launch_bags(eb::OP_AUX, mode, g, o2b, w, idx, off, psw, size, pad)) {
    return std::nullopt;
  }
  return Bags(out, o2b, size, maxi);
}

// _embedding_bag_backward (dense): sum / mean as the bags' gradient rows gathered per index
// (weighted, or divided by the bag's size) and added into their weight rows (embedding's
// backward kernel); max as the gradient added at each (bag, column)'s argmax.
std::optional<at::Tensor> embedding_bag_backward(const at::Tensor& grad, const at::Tensor& idx,
                                                 const at::Tensor& /*offsets*/,
                                                 const at::Tensor& o2b, const at::Tensor& bag_size,
                                                 const at::Tensor& maxi, int64_t num_weights,
                                                 bool scale_grad_by_freq, int64_t mode, bool sparse,
                                                 const std::optional<at::Tensor>& psw,
                                                 int64_t padding_idx) {
  if (sparse || scale_grad_by_freq || grad.scalar_type() != at::kFloat || grad.dim() != 2 ||
      o2b.numel() != idx.numel() || mode < 0 || mode > 2) {
    return std::nullopt;
  }
  if (mode == eb::MODE_MAX) {
    if (maxi.sizes() != grad.sizes()) return std::nullopt;
    const at::Tensor valid = maxi.ge(0);
    at::Tensor gw = at::zeros({num_weights, grad.size(1)}, grad.options());
    return gw.scatter_add_(0, maxi.clamp_min(0), grad.masked_fill(valid.logical_not(), 0));
  }
  at::Tensor rows = grad.index_select(0, o2b);
  if (psw && psw->defined()) rows = rows.mul(psw->unsqueeze(1));
  if (mode == eb::MODE_MEAN) {
    rows = rows.div(bag_size.index_select(0, o2b).clamp_min(1).unsqueeze(1).to(at::kFloat));
  }
  return at::embedding_dense_backward(rows, idx, num_weights, padding_idx, false);
}

namespace A = at::_ops;

void register_index(torch::Library& m) {
  reg<A::index_select, &index_select, HostPath::kTyped>(m);
  reg<A::gather, Functional<Gather>, HostPath::kTyped>(m);
  reg<A::gather_out, Out<Gather>>(m);
  reg<A::scatter_add, Functional<ScatterAdd>>(m);
  reg<A::scatter_add_, Inplace<ScatterAdd>>(m);
  reg<A::scatter_add_out, Out<ScatterAdd>>(m);
  reg<A::scatter_src, Functional<Scatter>>(m);
  reg<A::scatter__src, Inplace<Scatter>>(m);
  reg<A::scatter_src_out, Out<Scatter>>(m);
  reg<A::scatter_value, Functional<ScatterValue>>(m);
  reg<A::scatter__value, Inplace<ScatterValue>>(m);
  reg<A::scatter_value_out, Out<ScatterValue>>(m);
  reg<A::index_Tensor, &index_tensor, HostPath::kTyped>(m);
  reg<A::_index_put_impl_, &index_put, HostPath::kTyped>(m);
  reg<A::masked_scatter_, &masked_scatter>(m);
  reg<A::_embedding_bag, &embedding_bag>(m);
  reg<A::_embedding_bag_forward_only, &embedding_bag>(m);
  reg<A::_embedding_bag_backward, &embedding_bag_backward>(m);
  reg<A::scatter_reduce_two, Functional<ScatterReduce>>(m);
  reg<A::scatter_reduce__two, Inplace<ScatterReduce>>(m);
  reg<A::scatter_reduce_two_out, Out<ScatterReduce>>(m);
  reg<A::scatter_reduce, Functional<ScatterReduceOld>>(m);
  reg<A::scatter__reduce, Inplace<ScatterReduceOld>>(m);
  reg<A::scatter_reduce_out, Out<ScatterReduceOld>>(m);
  reg<A::embedding_dense_backward, &embedding_backward, HostPath::kTyped>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::index

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::index::register_index(m);
}
