// Matrix products on mpsrt's gemm kernel (csrc/kernels/gemm.comp): mm, bmm, addmm, baddbmm,
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
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

#include "host_access.h"
#include "kernels.h"

namespace mpsrt::torch_glue {
namespace {

using kernels::arg;
using kernels::Declined;
using kernels::finish;
using kernels::Launch;

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
void shapes(const at::Tensor& a, const at::Tensor& b, bool batched, Gemm* g) {
  const int64_t dims = batched ? 3 : 2;
  if (a.dim() != dims || b.dim() != dims || a.scalar_type() != b.scalar_type()) throw Declined{};
  if (!kernel_dtype(a.scalar_type()) || a.is_neg() || b.is_neg()) throw Declined{};
  if (batched && a.size(0) != b.size(0)) throw Declined{};
  if (a.size(dims - 1) != b.size(dims - 2)) throw Declined{};
  g->batch = batched ? a.size(0) : 1;
  g->m = a.size(dims - 2);
  g->k = a.size(dims - 1);
  g->n = b.size(dims - 1);
  g->a = mat_of(a);
  g->b = mat_of(b);
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

// out may be written by the kernel: no element written twice, no input read after another
// invocation wrote over it (c may be out itself: each element is read, then written, by one
// invocation).
void check_out(const Gemm& g) {
  const at::Tensor& o = g.out.t;
  if (at::has_internal_overlap(o) == at::MemOverlap::Yes) throw Declined{};
  if (g.k > 0 && (may_overlap(o, g.a.t) || may_overlap(o, g.b.t))) throw Declined{};
  if (g.c.t.defined() && may_overlap(o, g.c.t)) {
    const bool same = o.data_ptr() == g.c.t.data_ptr() && o.strides() == g.c.t.strides();
    if (!same) throw Declined{};
  }
}

uint32_t u32(int64_t v) {
  if (v < 0 || v > static_cast<int64_t>(UINT32_MAX)) throw Declined{};
  return static_cast<uint32_t>(v);
}

void push_strides(Launch& l, const Mat& x) {
  l.push(u32(x.sb)).push(u32(x.sr)).push(u32(x.sc));
}

// Runs g on the gemm kernel (out's shape already set; nothing to do without outputs).
void launch_gemm(const Gemm& g) {
  if (g.batch == 0 || g.m == 0 || g.n == 0) return;
  const Tiles t = kTiles;
  const int64_t tiles[3] = {(g.n + t.bn - 1) / t.bn, (g.m + t.bm - 1) / t.bm, g.batch};
  uint32_t groups[3] = {};
  int64_t per_group = 1;  // output tiles per workgroup (the grid strides over the rest)
  for (int i = 0; i < 3; ++i) {
    groups[i] = static_cast<uint32_t>(std::min<int64_t>(tiles[i], kMaxGroups));
    per_group *= (tiles[i] + groups[i] - 1) / groups[i];
  }
  const int64_t chunks = (g.k + t.bk - 1) / t.bk;
  if (per_group * (chunks + 4) > kLoopBudget) throw Declined{};
  const at::Tensor& o = g.out.t;
  const bool has_c = g.c.t.defined();
  Launch l("gemm", o.device().index());
  l.spec(static_cast<uint32_t>(kernels::dtype_id(o.scalar_type())))
      .spec(has_c ? 1 : 0)
      .spec(t.bm)
      .spec(t.bn)
      .spec(t.bk)
      .spec(t.tm)
      .spec(t.tn)
      .spec(t.invocations());
  // Without K, a and b are not read (and have no elements to bind): out stands in.
  l.arg(o, true).arg(g.k > 0 ? g.a.t : o, false).arg(g.k > 0 ? g.b.t : o, false);
  l.arg(has_c ? g.c.t : o, false);
  l.push(u32(g.m)).push(u32(g.n)).push(u32(g.k)).push(u32(g.batch));
  push_strides(l, g.a);
  push_strides(l, g.b);
  push_strides(l, g.c);
  push_strides(l, g.out);
  l.push(g.alpha).push(g.beta);
  l.groups(groups[0], groups[1], groups[2]).run();
}

// The three forms of an op: functional, in place (self_) and out=.
enum class MatmulForm { kFunctional, kInplace, kOut };

// mm / bmm (self, mat2[, out]).
template <bool Batched, MatmulForm F>
bool product(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  Gemm g;
  const at::Tensor a = arg(op, s, 0).toTensor();
  shapes(a, arg(op, s, 1).toTensor(), Batched, &g);
  at::Tensor out;
  if constexpr (F == MatmulForm::kOut) {
    out = arg(op, s, 2).toTensor();
    if (out.scalar_type() != a.scalar_type()) throw Declined{};
    at::native::resize_output(out, out_shape(g, Batched));
  } else {
    out = at::empty(out_shape(g, Batched), a.options());
  }
  g.out = mat_of(out);
  check_out(g);
  launch_gemm(g);
  finish(op, s, out);
  return true;
}

// The bias `self` of addmm / baddbmm as an operand of g's output shape (broadcast dims: stride
// 0); not read where beta is 0 (torch ignores it then, NaNs included).
void bias(const at::Tensor& self, const std::vector<int64_t>& shape, Gemm* g) {
  if (self.scalar_type() != g->a.t.scalar_type()) throw Declined{};
  if (!at::is_expandable_to(self.sizes(), shape)) throw Declined{};
  if (g->beta == 0.0f) return;
  g->c = mat_of(self.expand(shape));
}

c10::Scalar real_scalar(const c10::IValue& v) {
  const c10::Scalar x = v.toScalar();
  if (x.isComplex()) throw Declined{};
  return x;
}

// addmm / baddbmm (self, mat1, mat2, beta, alpha[, out]); in place: self is the output.
template <bool Batched, MatmulForm F>
bool add_product(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  Gemm g;
  const at::Tensor self = arg(op, s, 0).toTensor();
  shapes(arg(op, s, 1).toTensor(), arg(op, s, 2).toTensor(), Batched, &g);
  g.beta = real_scalar(arg(op, s, 3)).toFloat();
  g.alpha = real_scalar(arg(op, s, 4)).toFloat();
  const std::vector<int64_t> shape = out_shape(g, Batched);
  bias(self, shape, &g);
  at::Tensor out;
  if constexpr (F == MatmulForm::kInplace) {
    if (self.sizes() != c10::IntArrayRef(shape)) throw Declined{};
    out = self;
  } else if constexpr (F == MatmulForm::kOut) {
    out = arg(op, s, 5).toTensor();
    if (out.scalar_type() != self.scalar_type()) throw Declined{};
    at::native::resize_output(out, shape);
  } else {
    out = at::empty(shape, self.options());
  }
  g.out = mat_of(out);
  check_out(g);
  launch_gemm(g);
  finish(op, s, out);
  return true;
}

// A vector as a one-column matrix (its elements down the rows) or a one-row matrix.
Mat column(const at::Tensor& v) {
  return {v, 0, v.dim() > 0 ? v.stride(0) : 0, 0};
}
Mat row(const at::Tensor& v) {
  return {v, 0, 0, v.dim() > 0 ? v.stride(0) : 0};
}

// The shapes of mat @ vec (mat-vector: M x 1 output) into g.
void vector_shapes(const at::Tensor& mat, const at::Tensor& vec, Gemm* g) {
  if (mat.dim() != 2 || vec.dim() != 1 || mat.scalar_type() != vec.scalar_type()) {
    throw Declined{};
  }
  if (!kernel_dtype(mat.scalar_type()) || mat.is_neg() || vec.is_neg()) throw Declined{};
  if (mat.size(1) != vec.size(0)) throw Declined{};
  g->m = mat.size(0);
  g->k = mat.size(1);
  g->n = 1;
  g->a = mat_of(mat);
  g->b = column(vec);
}

// addmv (self, mat, vec, beta, alpha[, out]): mm with a one-column B; in place: self is out.
template <MatmulForm F>
bool add_mv(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  Gemm g;
  const at::Tensor self = arg(op, s, 0).toTensor();
  vector_shapes(arg(op, s, 1).toTensor(), arg(op, s, 2).toTensor(), &g);
  g.beta = real_scalar(arg(op, s, 3)).toFloat();
  g.alpha = real_scalar(arg(op, s, 4)).toFloat();
  const std::vector<int64_t> shape = {g.m};
  if (self.scalar_type() != g.a.t.scalar_type()) throw Declined{};
  if (!at::is_expandable_to(self.sizes(), shape)) throw Declined{};
  if (g.beta != 0.0f) g.c = column(self.expand(shape));
  at::Tensor out;
  if constexpr (F == MatmulForm::kInplace) {
    if (self.sizes() != c10::IntArrayRef(shape)) throw Declined{};
    out = self;
  } else if constexpr (F == MatmulForm::kOut) {
    out = arg(op, s, 5).toTensor();
    if (out.scalar_type() != self.scalar_type()) throw Declined{};
    at::native::resize_output(out, shape);
  } else {
    out = at::empty(shape, self.options());
  }
  g.out = column(out);
  check_out(g);
  launch_gemm(g);
  finish(op, s, out);
  return true;
}

// dot (self, tensor[, out]): a 1 x K row times a K x 1 column, into a 0-dim tensor.
template <MatmulForm F>
bool dot(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor x = arg(op, s, 0).toTensor();
  const at::Tensor y = arg(op, s, 1).toTensor();
  if (x.dim() != 1 || y.dim() != 1 || x.size(0) != y.size(0)) throw Declined{};
  if (x.scalar_type() != y.scalar_type() || !kernel_dtype(x.scalar_type())) throw Declined{};
  if (x.is_neg() || y.is_neg()) throw Declined{};
  Gemm g;
  g.m = g.n = 1;
  g.k = x.size(0);
  g.a = row(x);
  g.b = column(y);
  at::Tensor out;
  if constexpr (F == MatmulForm::kOut) {
    out = arg(op, s, 2).toTensor();
    if (out.scalar_type() != x.scalar_type()) throw Declined{};
    at::native::resize_output(out, {});
  } else {
    out = at::empty({}, x.options());
  }
  g.out = column(out);
  check_out(g);
  launch_gemm(g);
  finish(op, s, out);
  return true;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using F = MatmulForm;
  kernels::impl(m, "mm", &product<false, F::kFunctional>);
  kernels::impl(m, "mm.out", &product<false, F::kOut>);
  kernels::impl(m, "bmm", &product<true, F::kFunctional>);
  kernels::impl(m, "bmm.out", &product<true, F::kOut>);
  kernels::impl(m, "addmm", &add_product<false, F::kFunctional>);
  kernels::impl(m, "addmm.out", &add_product<false, F::kOut>);
  kernels::impl(m, "addmm_", &add_product<false, F::kInplace>);
  kernels::impl(m, "baddbmm", &add_product<true, F::kFunctional>);
  kernels::impl(m, "baddbmm.out", &add_product<true, F::kOut>);
  kernels::impl(m, "baddbmm_", &add_product<true, F::kInplace>);
  kernels::impl(m, "addmv", &add_mv<F::kFunctional>);
  kernels::impl(m, "addmv.out", &add_mv<F::kOut>);
  kernels::impl(m, "addmv_", &add_mv<F::kInplace>);
  kernels::impl(m, "dot", &dot<F::kFunctional>);
  kernels::impl(m, "dot.out", &dot<F::kOut>);
}

}  // namespace mpsrt::torch_glue
