// Sorting on mpsrt's sort kernel (csrc/kernels/sort/): sort (stable or not: both give torch's
// stable order, equal values in input order; NaN largest), and so argsort, and topk (the first
// k of the sorted row, largest or smallest first). Rows of up to 1024 elements sort in one
// dispatch in shared memory; longer rows (a vocabulary's logits) merge in global memory, a
// dispatch per bitonic step. Values of float32 / float16 / bfloat16 and integer / bool dtypes;
// float64 and complex decline, as do rows * (row padded to a power of two) beyond 2^31.
#include <ATen/ops/empty.h>
#include <ATen/ops/sort_ops.h>
#include <ATen/ops/topk_ops.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "ops/common.h"
#include "sort/sort.h"

namespace mpsrt::torch_glue::ops::sort {
namespace {

using namespace mpsrt::kernels::sort;  // NOLINT: the kernel's interface

bool sort_dtype(at::ScalarType s) {
  return is_float(s) || s == at::kLong || s == at::kInt || s == at::kShort || s == at::kChar ||
         s == at::kByte || s == at::kBool;
}

// One launch of sort.comp (op, final) with geometry g.
bool launch_sort(uint32_t op, bool final, bool desc, const Push& g, const at::Tensor& values,
                 const at::Tensor& indices, const at::Tensor& x, const at::Tensor& keys,
                 const at::Tensor& pos) {
  Launch l("sort", x.device().index());
  l.spec(SPEC_OP, op).spec(SPEC_DTX, dt(x)).spec(SPEC_DESCENDING, desc ? 1 : 0);
  l.spec(SPEC_FINAL, final ? 1 : 0);
  l.arg(values, final).arg(indices, final).arg(x, false).arg(keys, !final).arg(pos, !final);
  l.push(g);
  if (op == OP_STEP) return l.grid(static_cast<uint64_t>(g.rows) * g.p / 2, LOCAL).run();
  const uint64_t items = static_cast<uint64_t>(g.rows) * (g.p / g.block);
  return l.groups(static_cast<uint32_t>(std::min<uint64_t>(items, 65535))).run();
}

// Sorts contiguous x's rows along dim into contiguous values and indices (x's sizes with m at
// dim: the first m sorted positions); false where it declines.
bool sort_rows(const at::Tensor& x, int64_t dim, bool desc, int64_t m, const at::Tensor& values,
               const at::Tensor& indices) {
  const int64_t n = x.size(dim);
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t rows = x.numel() / n;
  int64_t p = 1;
  while (p < n) p <<= 1;
  if (!fits<int32_t>(rows * p, x.numel())) return false;
  Push g{};
  g.rows = static_cast<uint32_t>(rows);
  g.n = static_cast<uint32_t>(n);
  g.m = static_cast<uint32_t>(m);
  g.p = static_cast<uint32_t>(p);
  g.block = static_cast<uint32_t>(std::min<int64_t>(p, BLOCK));
  g.inner = static_cast<uint32_t>(inner);
  const bool one = p <= BLOCK;
  const int64_t scratch = one ? 1 : rows * p;
  const at::Tensor keys = at::empty({scratch}, x.options().dtype(at::kLong));
  const at::Tensor pos = at::empty({scratch}, x.options().dtype(at::kInt));
  if (!launch_sort(OP_BLOCKS, one, desc, g, values, indices, x, keys, pos)) return false;
  for (int64_t k = 2 * g.block; k <= p; k <<= 1) {
    g.k = static_cast<uint32_t>(k);
    for (int64_t j = k / 2; j >= g.block; j >>= 1) {
      g.j = static_cast<uint32_t>(j);
      if (!launch_sort(OP_STEP, false, desc, g, values, indices, x, keys, pos)) return false;
    }
    if (!launch_sort(OP_MERGE, k == p, desc, g, values, indices, x, keys, pos)) return false;
  }
  return true;
}

// The first m sorted positions of self's rows along dim into (values, indices): new tensors,
// or the out= ones (of the right sizes and dtypes, contiguous); nothing where it declines.
std::optional<std::tuple<at::Tensor, at::Tensor>> sorted(const at::Tensor& self, int64_t dim_arg,
                                                         bool desc, int64_t m, at::Tensor values,
                                                         at::Tensor indices) {
  if (self.dim() == 0 || !sort_dtype(self.scalar_type())) return std::nullopt;
  const int64_t dim = c10::maybe_wrap_dim(dim_arg, self.dim());
  std::vector<int64_t> sizes = self.sizes().vec();
  sizes[dim] = m;
  if (values.defined()) {
    if (values.sizes() != at::IntArrayRef(sizes) || indices.sizes() != at::IntArrayRef(sizes) ||
        values.scalar_type() != self.scalar_type() || indices.scalar_type() != at::kLong ||
        !values.is_contiguous() || !indices.is_contiguous()) {
      return std::nullopt;
    }
  } else {
    values = at::empty(sizes, self.options());
    indices = at::empty(sizes, self.options().dtype(at::kLong));
  }
  if (values.numel() > 0 && !sort_rows(self.contiguous(), dim, desc, m, values, indices)) {
    return std::nullopt;
  }
  return std::make_tuple(values, indices);
}

std::optional<std::tuple<at::Tensor, at::Tensor>> sort_stable(const at::Tensor& self,
                                                              std::optional<bool> /*stable*/,
                                                              int64_t dim, bool descending) {
  if (self.dim() == 0) return std::nullopt;
  const int64_t d = c10::maybe_wrap_dim(dim, self.dim());
  return sorted(self, d, descending, self.size(d), at::Tensor(), at::Tensor());
}

std::optional<std::tuple<at::Tensor&, at::Tensor&>> sort_out(const at::Tensor& self,
                                                             std::optional<bool> /*stable*/,
                                                             int64_t dim, bool descending,
                                                             at::Tensor& values,
                                                             at::Tensor& indices) {
  if (self.dim() == 0) return std::nullopt;
  const int64_t d = c10::maybe_wrap_dim(dim, self.dim());
  if (!sorted(self, d, descending, self.size(d), values, indices)) return std::nullopt;
  return std::tuple<at::Tensor&, at::Tensor&>(values, indices);
}

// topk's checks as torch makes them; the sorted rows' first k (sorted or not: sorted).
bool topk_args(const at::Tensor& self, int64_t k, int64_t dim) {
  const int64_t n = self.dim() == 0 ? 1 : self.size(c10::maybe_wrap_dim(dim, self.dim()));
  TORCH_CHECK(k >= 0 && k <= n, "selected index k out of range");
  return self.dim() > 0;
}

std::optional<std::tuple<at::Tensor, at::Tensor>> topk(const at::Tensor& self, int64_t k,
                                                       int64_t dim, bool largest, bool /*sorted*/) {
  if (!topk_args(self, k, dim)) return std::nullopt;
  return sorted(self, dim, largest, k, at::Tensor(), at::Tensor());
}

std::optional<std::tuple<at::Tensor&, at::Tensor&>> topk_out(const at::Tensor& self, int64_t k,
                                                             int64_t dim, bool largest,
                                                             bool /*sorted*/, at::Tensor& values,
                                                             at::Tensor& indices) {
  if (!topk_args(self, k, dim) || !sorted(self, dim, largest, k, values, indices)) {
    return std::nullopt;
  }
  return std::tuple<at::Tensor&, at::Tensor&>(values, indices);
}

namespace A = at::_ops;

void register_sort(torch::Library& m) {
  reg<A::sort_stable, &sort_stable>(m);
  reg<A::sort_values_stable, &sort_out>(m);
  reg<A::topk, &topk>(m);
  reg<A::topk_values, &topk_out>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::sort

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::sort::register_sort(m);
}
