// Matrix products on mpsrt's gemm kernel (csrc/kernels/gemm/): mm, bmm, addmm, baddbmm,
// addmv (mv) and dot with their out= and in-place forms (vectors as one-column or one-row
// matrices). The kernel reads every operand through its own strides
// (batch, row, column), so transposed operands (the t() views of nn.Linear and its backward),
// expanded batches and broadcast biases (stride 0) run without copies. torch's composite ops
// (linear, matmul, ...) reach these. What the kernel does not take (other dtypes, mixed dtypes,
// overlapping outputs, sizes past its 32-bit indexing) declines to the fallback, which also
// raises torch's errors for bad arguments.
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/addmv_ops.h>
#include <ATen/ops/baddbmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/dot_ops.h>
#include <ATen/ops/mm_ops.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "device/host_access.h"
#include "gemm/gemm.h"
#include "ops/common.h"
#include "ops/storage.h"

namespace mpsrt::torch_glue::ops::gemm {
namespace {

using namespace mpsrt::kernels::gemm;  // NOLINT: the kernel's interface

// gemm.comp's tiling: BM x BN output tiles per workgroup of (BM / TM) * (BN / TN) invocations,
// each computing TM x TN outputs, K staged in chunks of BK (specialisation constants: a tuning
// run can change them here without touching the kernel).
struct Tiles {
  uint32_t bm = 64, bn = 64, bk = 16, tm = 4, tn = 4;
  uint32_t invocations() const { return (bm / tm) * (bn / tn); }
};
constexpr Tiles kTiles{};

constexpr uint32_t kMaxGroups = 65535;  // per grid dimension
// llvmpipe ends an invocation's loops once they ran 65535 iterations in all (every loop of the
// shader counts against one budget): gemm.comp unrolls its fixed loops, so an invocation runs
// (K chunks + a few) iterations per output tile it computes; kept under this, with a margin.
constexpr int64_t kLoopBudget = 65000;

// A matrix operand: its tensor and its element strides (batch, row, column).
struct Mat {
  at::Tensor t;
  int64_t sb = 0, sr = 0, sc = 0;
};

// One product: out[b] = alpha * a[b] @ b[b] + beta * c[b] over batch x (m x k) @ (k x n);
// c.t undefined where c is not read.
struct Gemm {
  Mat out, a, b, c;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
};

bool kernel_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

Mat mat_of(const at::Tensor& t) {
  if (t.dim() == 2) return {t, 0, t.stride(0), t.stride(1)};
  return {t, t.stride(0), t.stride(1), t.stride(2)};
}

// The shapes of a @ b (2-D, or 3-D with equal batches when `batched`) into g, where the kernel
// takes them: one supported dtype, real values without lazy negation, matching inner dims.
[[nodiscard]] bool shapes(const at::Tensor& a, const at::Tensor& b, bool batched, Gemm* g) {
  const int64_t dims = batched ? 3 : 2;
  if (a.dim() != dims || b.dim() != dims || a.scalar_type() != b.scalar_type()) return false;
  if (!kernel_dtype(a.scalar_type()) || a.is_neg() || b.is_neg()) return false;
  if (batched && a.size(0) != b.size(0)) return false;
  if (a.size(dims - 1) != b.size(dims - 2)) return false;
  g->batch = batched ? a.size(0) : 1;
  g->m = a.size(dims - 2);
  g->k = a.size(dims - 1);
  g->n = b.size(dims - 1);
  g->a = mat_of(a);
  g->b = mat_of(b);
  return true;
}

std::vector<int64_t> out_shape(const Gemm& g, bool batched) {
  if (batched) return {g.batch, g.m, g.n};
  return {g.m, g.n};
}

// Whether x's elements may share memory with out's (same storage, and not provably apart).
bool may_overlap(const at::Tensor& out, const at::Tensor& x) {
  if (!out.storage().is_alias_of(x.storage())) return false;
  return at::get_overlap_status(out, x) != at::MemOverlapStatus::No;
}

// Whether out may be written by the kernel: no element written twice, no input read after
// another invocation wrote over it (c may be out itself: each element is read, then written, by
// one invocation).
[[nodiscard]] bool out_ok(const Gemm& g) {
  const at::Tensor& o = g.out.t;
  if (at::has_internal_overlap(o) == at::MemOverlap::Yes) return false;
  if (g.k > 0 && (may_overlap(o, g.a.t) || may_overlap(o, g.b.t))) return false;
  if (g.c.t.defined() && may_overlap(o, g.c.t)) {
    return o.data_ptr() == g.c.t.data_ptr() && o.strides() == g.c.t.strides();
  }
  return true;
}

// x's strides (batch, row, column) as the kernel's 32-bit fields; false where one does not fit.
[[nodiscard]] bool strides(const Mat& x, uint32_t& sb, uint32_t& sr, uint32_t& sc) {
  const std::optional<uint32_t> b = narrow<uint32_t>(x.sb), r = narrow<uint32_t>(x.sr),
                                c = narrow<uint32_t>(x.sc);
  if (!b || !r || !c) return false;
  sb = *b;
  sr = *r;
  sc = *c;
  return true;
}

// g's push constants; false where a size or stride does not fit the kernel's 32-bit fields.
[[nodiscard]] bool fill_push(const Gemm& g, Push& p) {
  const std::optional<uint32_t> m = narrow<uint32_t>(g.m), n = narrow<uint32_t>(g.n),
                                k = narrow<uint32_t>(g.k), batch = narrow<uint32_t>(g.batch);
  if (!m || !n || !k || !batch) return false;
  p.M = *m;
  p.N = *n;
  p.K = *k;
  p.batch = *batch;
  if (!strides(g.a, p.sab, p.sam, p.sak) || !strides(g.b, p.sbb, p.sbk, p.sbn) ||
      !strides(g.c, p.scb, p.scm, p.scn) || !strides(g.out, p.sob, p.som, p.son)) {
    return false;
  }
  p.alpha = g.alpha;
  p.beta = g.beta;
  return true;
}

// The workgroups of g's grid (x: column tiles, y: row tiles, z: batches); nothing where an
// invocation would loop past llvmpipe's budget.
std::optional<std::array<uint32_t, 3>> grid_of(const Gemm& g, const Tiles& t) {
  const int64_t tiles[3] = {(g.n + t.bn - 1) / t.bn, (g.m + t.bm - 1) / t.bm, g.batch};
  std::array<uint32_t, 3> groups{};
  int64_t per_group = 1;  // output tiles per workgroup (the grid strides over the rest)
  for (int i = 0; i < 3; ++i) {
    groups[i] = static_cast<uint32_t>(std::min<int64_t>(tiles[i], kMaxGroups));
    per_group *= (tiles[i] + groups[i] - 1) / groups[i];
  }
  const int64_t chunks = (g.k + t.bk - 1) / t.bk;
  if (per_group * (chunks + 4) > kLoopBudget) return std::nullopt;
  return groups;
}

// Runs g on the gemm kernel (out's shape already set; nothing to do without outputs); false
// where the kernel does not take it (nothing launched).
[[nodiscard]] bool launch_gemm(const Gemm& g) {
  if (g.batch == 0 || g.m == 0 || g.n == 0) return true;
  const Tiles t = kTiles;
  const std::optional<std::array<uint32_t, 3>> groups = grid_of(g, t);
  Push push{};
  if (!groups || !fill_push(g, push)) return false;
  const at::Tensor& o = g.out.t;
  const bool has_c = g.c.t.defined();
  Launch l("gemm", o.device().index());
  l.spec(SPEC_DT, dt(o)).spec(SPEC_HAS_C, has_c ? 1 : 0);
  l.spec(SPEC_BM, t.bm).spec(SPEC_BN, t.bn).spec(SPEC_BK, t.bk);
  l.spec(SPEC_TM, t.tm).spec(SPEC_TN, t.tn).spec(SPEC_WG, t.invocations());
  // Without K, a and b are not read (and have no elements to bind): out stands in.
  l.arg(o, true).arg(g.k > 0 ? g.a.t : o, false).arg(g.k > 0 ? g.b.t : o, false);
  l.arg(has_c ? g.c.t : o, false);
  return l.push(push).groups((*groups)[0], (*groups)[1], (*groups)[2]).run();
}

// g's output where the kernel wrote it.
std::optional<at::Tensor> ran(const Gemm& g) {
  if (!out_ok(g) || !launch_gemm(g)) return std::nullopt;
  return g.out.t;
}

// The output of a result of `shape` like `like`: a new tensor (out undefined: the functional
// form), or out (out=) resized to it; false where out's dtype is not like's.
[[nodiscard]] bool output(at::Tensor& out, const std::vector<int64_t>& shape,
                          const at::Tensor& like) {
  if (!out.defined()) {
    out = new_empty(shape, like.scalar_type(), like.device());
    return true;
  }
  if (out.scalar_type() != like.scalar_type()) return false;
  at::native::resize_output(out, shape);
  return true;
}

// The output of addmm / baddbmm / addmv: self itself in place (its shape the result's), else as
// output() (like self).
template <bool InPlace>
[[nodiscard]] bool add_output(at::Tensor& out, const at::Tensor& self,
                              const std::vector<int64_t>& shape) {
  if constexpr (InPlace) {
    return self.sizes() == c10::IntArrayRef(shape);
  } else {
    return output(out, shape, self);
  }
}

// mm / bmm (self, mat2).
template <bool Batched>
struct Product {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
    Gemm g;
    if (!shapes(a, b, Batched, &g) || !output(out, out_shape(g, Batched), a)) return std::nullopt;
    g.out = mat_of(out);
    return ran(g);
  }
};

// beta and alpha into g; false for complex values.
[[nodiscard]] bool scalars(const c10::Scalar& beta, const c10::Scalar& alpha, Gemm* g) {
  if (beta.isComplex()) return false;
  g->beta = beta.toFloat();
  if (alpha.isComplex()) return false;
  g->alpha = alpha.toFloat();
  return true;
}

// The bias `self` of addmm / baddbmm as an operand of g's output shape (broadcast dims: stride
// 0); not read where beta is 0 (torch ignores it then, NaNs included).
[[nodiscard]] bool bias(const at::Tensor& self, const std::vector<int64_t>& shape, Gemm* g) {
  if (self.scalar_type() != g->a.t.scalar_type()) return false;
  if (!at::is_expandable_to(self.sizes(), shape)) return false;
  if (g->beta != 0.0f) g->c = mat_of(self.expand(shape));
  return true;
}

// addmm / baddbmm (self, mat1, mat2, beta, alpha); in place (InPlace: out is self): self is the
// output.
template <bool Batched, bool InPlace>
struct AddProduct {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self,
                                       const at::Tensor& mat1, const at::Tensor& mat2,
                                       const c10::Scalar& beta, const c10::Scalar& alpha) {
    Gemm g;
    if (!shapes(mat1, mat2, Batched, &g) || !scalars(beta, alpha, &g)) return std::nullopt;
    const std::vector<int64_t> shape = out_shape(g, Batched);
    if (!bias(self, shape, &g) || !add_output<InPlace>(out, self, shape)) return std::nullopt;
    g.out = mat_of(out);
    return ran(g);
  }
};

// A vector as a one-column matrix (its elements down the rows) or a one-row matrix.
Mat column(const at::Tensor& v) {
  return {v, 0, v.dim() > 0 ? v.stride(0) : 0, 0};
}
Mat row(const at::Tensor& v) {
  return {v, 0, 0, v.dim() > 0 ? v.stride(0) : 0};
}

// The shapes of mat @ vec (mat-vector: M x 1 output) into g.
[[nodiscard]] bool vector_shapes(const at::Tensor& mat, const at::Tensor& vec, Gemm* g) {
  if (mat.dim() != 2 || vec.dim() != 1 || mat.scalar_type() != vec.scalar_type()) return false;
  if (!kernel_dtype(mat.scalar_type()) || mat.is_neg() || vec.is_neg()) return false;
  if (mat.size(1) != vec.size(0)) return false;
  g->m = mat.size(0);
  g->k = mat.size(1);
  g->n = 1;
  g->a = mat_of(mat);
  g->b = column(vec);
  return true;
}

// addmv (self, mat, vec, beta, alpha): mm with a one-column B; in place (InPlace: out is self):
// self is the output.
template <bool InPlace>
struct AddMv {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self,
                                       const at::Tensor& mat, const at::Tensor& vec,
                                       const c10::Scalar& beta, const c10::Scalar& alpha) {
    Gemm g;
    if (!vector_shapes(mat, vec, &g) || !scalars(beta, alpha, &g)) return std::nullopt;
    const std::vector<int64_t> shape = {g.m};
    if (self.scalar_type() != g.a.t.scalar_type()) return std::nullopt;
    if (!at::is_expandable_to(self.sizes(), shape)) return std::nullopt;
    if (g.beta != 0.0f) g.c = column(self.expand(shape));
    if (!add_output<InPlace>(out, self, shape)) return std::nullopt;
    g.out = column(out);
    return ran(g);
  }
};

// dot (self, tensor): a 1 x K row times a K x 1 column, into a 0-dim tensor.
struct Dot {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& x, const at::Tensor& y) {
    if (x.dim() != 1 || y.dim() != 1 || x.size(0) != y.size(0)) return std::nullopt;
    if (x.scalar_type() != y.scalar_type() || !kernel_dtype(x.scalar_type())) return std::nullopt;
    if (x.is_neg() || y.is_neg()) return std::nullopt;
    Gemm g;
    g.m = g.n = 1;
    g.k = x.size(0);
    g.a = row(x);
    g.b = column(y);
    if (!output(out, {}, x)) return std::nullopt;
    g.out = column(out);
    return ran(g);
  }
};

namespace A = at::_ops;
constexpr HostPath kTyped = HostPath::kTyped;

// The functional form (with the typed host path where P says so) and the out= form of Core.
template <class F, class O, class Core, HostPath P = HostPath::kBoxed>
void forms(torch::Library& m) {
  reg<F, Functional<Core>, P>(m);
  reg<O, Out<Core>>(m);
}

void register_products(torch::Library& m) {
  forms<A::mm, A::mm_out, Product<false>, kTyped>(m);
  forms<A::bmm, A::bmm_out, Product<true>, kTyped>(m);
  forms<A::addmm, A::addmm_out, AddProduct<false, false>, kTyped>(m);
  reg<A::addmm_, Inplace<AddProduct<false, true>>>(m);
  forms<A::baddbmm, A::baddbmm_out, AddProduct<true, false>>(m);
  reg<A::baddbmm_, Inplace<AddProduct<true, true>>>(m);
  forms<A::addmv, A::addmv_out, AddMv<false>>(m);
  reg<A::addmv_, Inplace<AddMv<true>>>(m);
  forms<A::dot, A::dot_out, Dot>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::gemm

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::gemm::register_products(m);
}
