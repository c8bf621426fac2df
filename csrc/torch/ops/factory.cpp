// Factories and index-conditioned copies on mpsrt's factory kernel (csrc/kernels/factory/):
//   arange.start_out, linspace.out, eye.out / eye.m_out: tensors written from the index, with
//   torch's arithmetic (arange: float64 for float32 / float64, float32 for float16 / bfloat16,
//   int64 for integers; linspace: the output's own dtype, float64 for integers);
//   tril / triu (functional, in place, out=): a batch of matrices copied where col - row is on
//   the kept side of the diagonal;
//   roll: a gather along each rolled dim (one launch per dim).
// The copies move bits, so they take every dtype of 1, 2, 4 or 8 bytes. What the kernel does
// not take (complex and bool ranges, more than 2^31 elements, strides that do not fit 32 bits,
// batch dims that do not merge, arguments torch rejects with its own message) declines to the
// fallback.
#include <ATen/core/Tensor.h>
#include <ATen/native/RangeUtils.h>
#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <ATen/ops/arange_ops.h>
#include <ATen/ops/eye_ops.h>
#include <ATen/ops/linspace_ops.h>
#include <ATen/ops/roll_ops.h>
#include <ATen/ops/tril_ops.h>
#include <ATen/ops/triu_ops.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "factory/factory.h"
#include "ops/common.h"

namespace mpsrt::torch_glue::ops::factory {
namespace {

using namespace mpsrt::kernels::factory;  // NOLINT: the kernel's interface

// Up to 3 dims (innermost first: cols, rows, batch) of the output and the input, in elements.
struct Geometry {
  int64_t sizes[3] = {1, 1, 1};
  int64_t out[3] = {0, 0, 0};
  int64_t in[3] = {0, 0, 0};
};

// g into the push block; false where it does not fit the kernel's 32-bit fields (the element
// count stays below 2^31: roll adds a row count to a row index).
bool fill_geometry(const Geometry& g, Push& p) {
  const int64_t n = g.sizes[0] * g.sizes[1] * g.sizes[2];
  if (!fits<int32_t>(n)) return false;
  p.n = static_cast<uint32_t>(n);
  for (int k = 0; k < 3; ++k) {
    const std::optional<int32_t> o = narrow<int32_t>(g.out[k]);
    const std::optional<int32_t> i = narrow<int32_t>(g.in[k]);
    if (!o || !i || *o < 0 || *i < 0) return false;
    p.sizes[k] = static_cast<uint32_t>(g.sizes[k]);
    p.ostrides[k] = *o;
    p.istrides[k] = *i;
  }
  return true;
}

// Runs op over g (p: its parameters) writing out (dtype id dt_out) from in (the output itself
// where the op reads nothing); false where it declines.
[[nodiscard]] bool launch(uint32_t op, const at::Tensor& out, const at::Tensor& in,
                          const Geometry& g, Push p, int64_t dt_out, uint32_t math = 0) {
  if (dt_out < 0 || !fill_geometry(g, p)) return false;
  if (p.n == 0) return true;
  const int64_t dt_in =
      op == OP_TRIL || op == OP_TRIU || op == OP_ROLL ? dt_out : int64_t{MPSRT_DTYPE_UINT8};
  Launch l("factory", out.device().index());
  l.spec(SPEC_OP, op).spec(SPEC_DT0, static_cast<uint32_t>(dt_out));
  l.spec(SPEC_DT1, static_cast<uint32_t>(dt_in)).spec(SPEC_MATH, math);
  l.arg(out, true).arg(in, false);
  return l.push(p).grid(p.n, 256).run();
}

template <class T>
void put(uint32_t (&slot)[2], T v) {
  static_assert(sizeof(T) <= 8, "a parameter is 8 bytes at most");
  slot[0] = slot[1] = 0;
  std::memcpy(slot, &v, sizeof(T));
}

// A 1-D range output's geometry: a contiguous tensor (any shape, in its linear order) or a
// 1-D strided one; nothing otherwise.
std::optional<Geometry> range_geometry(const at::Tensor& out) {
  if (out.dim() > 1 && !out.is_contiguous()) return std::nullopt;
  Geometry g;
  g.sizes[0] = out.numel();
  g.out[0] = out.dim() == 1 ? out.stride(0) : 1;
  return g;
}

bool range_dtype(at::ScalarType t) {
  return t != at::kBool && !at::isComplexType(t) && dtype_id(t) >= 0;
}

// ------------------------------------------------------------------ arange
// The size of a range of dtype t as torch computes it (its messages for bad ranges).
int64_t arange_size(at::ScalarType t, const c10::Scalar& start, const c10::Scalar& end,
                    const c10::Scalar& step) {
  return t == at::kLong ? at::native::compute_arange_size<int64_t>(start, end, step)
                        : at::native::compute_arange_size<double>(start, end, step);
}

// The range written into out (dtype t, `size` elements: out has them) on the kernel; false
// where it declines (more than 2^31 elements, a geometry it does not take).
bool arange_kernel(const c10::Scalar& start, const c10::Scalar& step, at::ScalarType t,
                   int64_t size, const at::Tensor& out) {
  if (!fits<int32_t>(size)) return false;
  const std::optional<Geometry> g = range_geometry(out);
  if (!g) return false;
  Push p{};
  uint32_t math = MATH_F64;
  if (at::isIntegralType(t, /*includeBool=*/false)) {
    math = MATH_I64;
    put(p.a, start.toLong());
    put(p.b, step.toLong());
  } else if (t == at::kHalf || t == at::kBFloat16) {
    math = MATH_F32;  // torch's accumulate type of the half types
    put(p.a, start.toFloat());
    put(p.b, step.toFloat());
  } else {
    put(p.a, start.toDouble());
    put(p.b, step.toDouble());
  }
  return launch(OP_ARANGE, out, out, *g, p, dtype_id(t), math);
}

// arange.start_out: the range's size as torch computes it (its messages for bad ranges), an
// empty out= resized to it (as torch's kernel would); then the kernel where the device runs
// kernels, else the CPU kernel on out's stand-in (the typed host path: models make position
// indices with arange in every forward). The CPU kernel must find out's shape final there (it
// would resize the stand-in, not out), so what is not 1-d of the range's size by then (a
// non-empty out= of another shape: torch keeps one of the range's size, and warns as it resizes
// any other; the dtypes no range takes) goes to the fallback, as does what the kernel declines.
at::Tensor& arange_entry(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step,
                         at::Tensor& out) {
  using Op = at::_ops::arange_start_out;
  const at::ScalarType t = out.scalar_type();
  if (range_dtype(t)) {
    const int64_t size = arange_size(t, start, end, step);
    if (out.numel() == 0 && size > 0) out.resize_({size});
    if (enabled(out.device().index())) {
      if (out.numel() == size && arange_kernel(start, step, t, size, out)) return out;
    } else if (out.dim() == 1 && out.size(0) == size) {
      return detail::Entry<Op, NoKernel, HostPath::kTyped>::call(start, end, step, out);
    }
  }
  return detail::Entry<Op, NoKernel, HostPath::kBoxed>::call(start, end, step, out);
}

// ------------------------------------------------------------------ linspace
// The start, end and step in T's arithmetic (torch's: step = (end - start) / (steps - 1)).
template <class T>
void linspace_params(const c10::Scalar& start, const c10::Scalar& end, int64_t steps, Push& p) {
  const T s = start.to<T>();
  const T e = end.to<T>();
  const T step = (e - s) / static_cast<T>(steps - 1);
  using Wire = std::conditional_t<std::is_same_v<T, double>, double, float>;
  put(p.a, static_cast<Wire>(s));
  put(p.b, static_cast<Wire>(step));
  put(p.c, static_cast<Wire>(e));
}

// Integer outputs: a float64 step from the integer ends (values rounded toward zero).
void linspace_int_params(const c10::Scalar& start, const c10::Scalar& end, int64_t steps, Push& p) {
  const int64_t s = start.toLong();
  const int64_t e = end.toLong();
  put(p.a, static_cast<double>(s));
  put(p.b, (static_cast<double>(e) - static_cast<double>(s)) / static_cast<double>(steps - 1));
  put(p.c, static_cast<double>(e));
}

at::Tensor* linspace_out(const c10::Scalar& start, const c10::Scalar& end, int64_t steps,
                         at::Tensor& out) {
  const at::ScalarType t = out.scalar_type();
  if (steps < 0 || !range_dtype(t) || !fits<int32_t>(steps)) return nullptr;
  if (out.numel() != steps) out.resize_({steps});
  if (steps <= 1) {
    if (steps == 1) out.fill_(start);
    return &out;
  }
  const std::optional<Geometry> g = range_geometry(out);
  if (!g) return nullptr;
  Push p{};
  p.mid = static_cast<uint32_t>(steps / 2);
  p.steps = static_cast<uint32_t>(steps);
  uint32_t math = MATH_F32;
  if (t == at::kFloat) {
    linspace_params<float>(start, end, steps, p);
  } else if (t == at::kHalf) {
    linspace_params<c10::Half>(start, end, steps, p);
  } else if (t == at::kBFloat16) {
    linspace_params<c10::BFloat16>(start, end, steps, p);
  } else if (t == at::kDouble) {
    math = MATH_F64;
    linspace_params<double>(start, end, steps, p);
  } else {
    math = MATH_F64;
    linspace_int_params(start, end, steps, p);
  }
  return launch(OP_LINSPACE, out, out, *g, p, dtype_id(t), math) ? &out : nullptr;
}

// ------------------------------------------------------------------ eye
at::Tensor* eye_m_out(int64_t n, int64_t m, at::Tensor& out) {
  const at::ScalarType t = out.scalar_type();
  if (!fits<int32_t>(n) || !fits<int32_t>(m) || !fits<int32_t>(n * m) || at::isComplexType(t) ||
      dtype_id(t) < 0) {
    return nullptr;
  }
  out.resize_({n, m});
  Geometry g;
  g.sizes[0] = m;
  g.sizes[1] = n;
  g.out[0] = out.stride(1);
  g.out[1] = out.stride(0);
  return launch(OP_EYE, out, out, g, Push{}, dtype_id(t)) ? &out : nullptr;
}

at::Tensor* eye_out(int64_t n, at::Tensor& out) {
  return eye_m_out(n, n, out);
}

// ------------------------------------------------------------------ tril / triu
// The matrices of t (its dims before the last two, merged): their count and stride; nothing
// where those dims do not merge into one.
std::optional<std::pair<int64_t, int64_t>> batch_of(const at::Tensor& t) {
  int64_t count = 1;
  int64_t stride = 0;
  for (int64_t d = t.dim() - 3; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (count > 1 && t.stride(d) != stride * count) return std::nullopt;
    if (count == 1) stride = t.stride(d);
    count *= t.size(d);
  }
  return std::make_pair(count, stride);
}

// The output of tril / triu: self (in place), out (resized where empty) or a new tensor;
// nothing where out cannot take the result as torch writes it.
std::optional<at::Tensor> tri_output(at::Tensor& out, const at::Tensor& self) {
  if (!out.defined()) return at::empty(self.sizes(), self.options());
  if (out.is_same(self)) return out;
  if (out.scalar_type() != self.scalar_type() || out.storage().is_alias_of(self.storage())) {
    return std::nullopt;
  }
  if (out.sizes() != self.sizes()) {
    if (out.numel() != 0) return std::nullopt;  // torch warns and resizes (the fallback)
    out.resize_(self.sizes());
  }
  return out;
}

template <uint32_t Op>
struct Tri {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self, int64_t k) {
    if (self.dim() < 2 || bits_dtype(self.scalar_type()) < 0) return std::nullopt;
    std::optional<at::Tensor> result = tri_output(out, self);
    if (!result) return std::nullopt;
    const at::Tensor in = result->is_same(self) || batch_of(self) ? self : self.contiguous();
    const auto bo = batch_of(*result);
    const auto bi = batch_of(in);
    if (!bo || !bi) return std::nullopt;
    const int64_t rows = self.size(-2);
    const int64_t cols = self.size(-1);
    Geometry g;
    g.sizes[0] = cols;
    g.sizes[1] = rows;
    g.sizes[2] = bo->first;
    g.out[0] = result->stride(-1);
    g.out[1] = result->stride(-2);
    g.out[2] = bo->second;
    g.in[0] = in.stride(-1);
    g.in[1] = in.stride(-2);
    g.in[2] = bi->second;
    Push p{};
    // Any diagonal beyond the matrix keeps all or nothing, as one just beyond it does.
    p.k = static_cast<int32_t>(std::clamp<int64_t>(k, -rows - 1, cols + 1));
    if (!launch(Op, *result, in, g, p, bits_dtype(self.scalar_type()))) return std::nullopt;
    return result;
  }
};

// ------------------------------------------------------------------ roll
// A contiguous tensor rolled by `shift` along dim, into a new contiguous tensor.
std::optional<at::Tensor> roll_dim(const at::Tensor& in, int64_t shift, int64_t dim) {
  const int64_t size = in.size(dim);
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < in.dim(); ++d) inner *= in.size(d);
  at::Tensor out = at::empty(in.sizes(), in.options());
  Geometry g;
  g.sizes[0] = inner;
  g.sizes[1] = size;
  g.sizes[2] = in.numel() / (inner * size);
  g.out[0] = g.in[0] = 1;
  g.out[1] = g.in[1] = inner;
  g.out[2] = g.in[2] = inner * size;
  Push p{};
  p.k = static_cast<int32_t>(((shift % size) + size) % size);
  if (!launch(OP_ROLL, out, in, g, p, bits_dtype(in.scalar_type()))) return std::nullopt;
  return out;
}

// roll(self, shifts, dims): no dims rolls the flattened tensor. Bad arguments (no shifts,
// shifts and dims of different lengths, a dim out of range) are torch's errors, and 0-dim
// tensors its special case (the fallback).
std::optional<at::Tensor> roll(const at::Tensor& self, at::IntArrayRef shifts,
                               at::IntArrayRef dims) {
  const bool flat = dims.empty();
  if (self.dim() == 0 || shifts.empty() || shifts.size() != (flat ? 1 : dims.size()) ||
      bits_dtype(self.scalar_type()) < 0 || !fits<int32_t>(self.numel())) {
    return std::nullopt;
  }
  for (const int64_t d : dims) {
    if (d < -self.dim() || d >= self.dim()) return std::nullopt;
  }
  if (self.numel() == 0) return self.clone(at::MemoryFormat::Preserve);
  at::Tensor cur = self.contiguous();
  if (flat) {
    std::optional<at::Tensor> r = roll_dim(cur.view({-1}), shifts[0], 0);
    if (!r) return std::nullopt;
    return r->view(self.sizes());
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    std::optional<at::Tensor> r =
        roll_dim(cur, shifts[i], dims[i] < 0 ? dims[i] + self.dim() : dims[i]);
    if (!r) return std::nullopt;
    cur = *r;
  }
  return cur;
}

namespace A = at::_ops;

template <class F, class I, class O, class Core>
void forms(torch::Library& m) {
  reg<F, Functional<Core>>(m);
  reg<I, Inplace<Core>>(m);
  reg<O, Out<Core>>(m);
}

}  // namespace

void register_factory(torch::Library& m) {
  reg_listed<A::arange_start_out, &arange_entry>(m);
  reg<A::linspace_out, &linspace_out>(m);
  reg<A::eye_out, &eye_out>(m);
  reg<A::eye_m_out, &eye_m_out>(m);
  forms<A::tril, A::tril_, A::tril_out, Tri<OP_TRIL>>(m);
  forms<A::triu, A::triu_, A::triu_out, Tri<OP_TRIU>>(m);
  // The typed host path keeps roll's CPU kernel on borrowed aliases where kernels do not run
  // (the cpu backend).
  reg<A::roll, &roll, HostPath::kTyped>(m);
}

}  // namespace mpsrt::torch_glue::ops::factory

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  mpsrt::torch_glue::ops::factory::register_factory(m);
}
