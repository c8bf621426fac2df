// Element-wise operators on mpsrt's elementwise kernel (csrc/kernels/elementwise/): torch's
// TensorIterator decides the output's shape, dtype and memory layout, broadcasting and type
// promotion, and coalesces dims; the kernel reads each operand in its own dtype and strides.
// Scalars (CPU scalars of the op, alpha, clamp's bounds, ...) travel in push constants.
//
// What a kernel declines (float64 math, integer division, more than 4 dims after coalescing,
// arguments torch rejects with its own message) runs through the fallback.
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <ATen/ops/_prelu_kernel_backward_ops.h>
#include <ATen/ops/_prelu_kernel_ops.h>
#include <ATen/ops/abs_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/bitwise_and_ops.h>
#include <ATen/ops/bitwise_not_ops.h>
#include <ATen/ops/bitwise_or_ops.h>
#include <ATen/ops/bitwise_xor_ops.h>
#include <ATen/ops/clamp_max_ops.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/clamp_ops.h>
#include <ATen/ops/cos_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/elu_backward_ops.h>
#include <ATen/ops/elu_ops.h>
#include <ATen/ops/eq_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/floor_divide_ops.h>
#include <ATen/ops/ge_ops.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/gt_ops.h>
#include <ATen/ops/hardsigmoid_backward_ops.h>
#include <ATen/ops/hardsigmoid_ops.h>
#include <ATen/ops/hardswish_backward_ops.h>
#include <ATen/ops/hardswish_ops.h>
#include <ATen/ops/hardtanh_backward_ops.h>
#include <ATen/ops/hardtanh_ops.h>
#include <ATen/ops/le_ops.h>
#include <ATen/ops/leaky_relu_backward_ops.h>
#include <ATen/ops/leaky_relu_ops.h>
#include <ATen/ops/log_ops.h>
#include <ATen/ops/logical_not_ops.h>
#include <ATen/ops/lt_ops.h>
#include <ATen/ops/masked_fill_ops.h>
#include <ATen/ops/maximum_ops.h>
#include <ATen/ops/minimum_ops.h>
#include <ATen/ops/mish_backward_ops.h>
#include <ATen/ops/mish_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/ne_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/reciprocal_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/sigmoid_backward_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/silu_backward_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/sin_ops.h>
#include <ATen/ops/softplus_backward_ops.h>
#include <ATen/ops/softplus_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/tanh_backward_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <ATen/ops/where_ops.h>
#include <torch/library.h>

#include <optional>
#include <string>

#include "device/host_access.h"
#include "elementwise/elementwise.h"
#include "ops/common.h"
#include "ops/elementwise.h"
#include "ops/storage.h"

namespace mpsrt::torch_glue::ops::elementwise {
namespace {

using namespace mpsrt::kernels::elementwise;  // NOLINT: the kernel's interface

// How a launch departs from the iterator: the dtype the op computes in (Undefined: the
// iterator's common dtype), scalar inputs after the iterator's (alpha, a threshold, ...), the
// op's variant (elementwise.h's VARIANT).
struct EwOptions {
  at::ScalarType compute = at::ScalarType::Undefined;
  std::vector<c10::Scalar> scalars;
  uint32_t variant = 0;
  float p[3] = {0, 0, 0};  // the kernel's float parameters (elementwise.h)
};

// A scalar's push-constant bits: the 64-bit integer (integer math) or float32 bits.
void scalar_bits(const c10::Scalar& v, bool int_math, int32_t* slot) {
  if (int_math) {
    const int64_t x = v.isFloatingPoint() ? static_cast<int64_t>(v.toDouble()) : v.toLong();
    std::memcpy(slot, &x, 8);
  } else {
    const float x = static_cast<float>(v.toDouble());
    std::memcpy(slot, &x, 4);
  }
}

// Binds operand slots 0..3: the iterator's operands; a scalar or absent operand binds the
// output (never read).
void bind_operands(Launch& l, at::TensorIteratorBase& iter) {
  const int nt = iter.ntensors();
  for (int i = 0; i < 4; ++i) {
    const bool bound = i < nt && (i == 0 || !iter.is_cpu_scalar(i));
    const int k = bound ? i : 0;
    const at::Tensor& t = iter.tensor(k);
    int64_t last = 0;
    for (int d = 0; d < iter.ndim(); ++d) last += (iter.shape()[d] - 1) * iter.strides(k)[d];
    const int64_t first =
        static_cast<const char*>(iter.data_ptr(k)) - static_cast<const char*>(t.data_ptr());
    l.arg_bytes(t, first, static_cast<size_t>(last) + iter.element_size(k), i == 0);
  }
}

// The operands' dtypes and strides (in elements) and the scalars' bits into the push block;
// false where an operand has no kernel dtype or a stride does not fit.
bool fill_operands(at::TensorIteratorBase& iter, const EwOptions& o, bool bitwise, bool int_math,
                   Push& push, uint32_t (&dts)[4], uint32_t& scalars) {
  const int nt = iter.ntensors();
  for (int i = 0; i < nt; ++i) {
    if (i > 0 && iter.is_cpu_scalar(i)) {
      scalars |= 1u << i;
      scalar_bits(iter.tensor(i).item(), int_math, &push.strides[4 * i]);
      continue;
    }
    const int id = dtype_id(iter.dtype(i));
    if (id < 0 || (iter.dtype(i) == at::kDouble && !bitwise)) return false;
    dts[i] = static_cast<uint32_t>(bitwise ? bits_dtype(iter.dtype(i)) : id);
    const int64_t es = static_cast<int64_t>(iter.element_size(i));
    for (int k = 0; k < iter.ndim(); ++k) {
      const std::optional<int32_t> st = narrow<int32_t>(iter.strides(i)[k] / es);
      if (!st || *st < 0) return false;
      push.strides[4 * i + k] = *st;
    }
  }
  for (size_t j = 0; j < o.scalars.size(); ++j) {
    const size_t slot = static_cast<size_t>(nt) + j;
    scalars |= 1u << slot;
    scalar_bits(o.scalars[j], int_math, &push.strides[4 * slot]);
  }
  return true;
}

// Runs op over the iterator's operands (output first) and o's scalars. Declines (false) ranks
// over 4 after coalescing, more than 3 inputs, float64 math and dtypes mpsrt has no id for.
[[nodiscard]] bool launch_elementwise(at::TensorIteratorBase& iter, uint32_t op,
                                      const EwOptions& o = {}) {
  if (iter.numel() == 0) return true;
  const int nin = iter.ntensors() - 1 + static_cast<int>(o.scalars.size());
  if (iter.ndim() > 4 || nin > 3 || iter.noutputs() != 1 || !fits<int32_t>(iter.numel())) {
    return false;
  }
  const at::ScalarType compute =
      o.compute != at::ScalarType::Undefined ? o.compute : iter.common_dtype();
  // A copy within one dtype moves bits (exact for every dtype, NaN payloads included).
  const bool bitwise = op == OP_COPY && iter.dtype(0) == iter.dtype(1);
  const bool int_math = bitwise || !at::isFloatingType(compute);
  if ((!int_math && compute == at::kDouble) || at::isComplexType(compute)) return false;
  Push push{};
  uint32_t dts[4] = {MPSRT_DTYPE_FLOAT32, MPSRT_DTYPE_FLOAT32, MPSRT_DTYPE_FLOAT32,
                     MPSRT_DTYPE_FLOAT32};
  uint32_t scalars = 0;
  if (!fill_operands(iter, o, bitwise, int_math, push, dts, scalars)) return false;
  push.n = static_cast<uint32_t>(iter.numel());
  for (int k = 0; k < 3; ++k) push.p[k] = o.p[k];
  for (int k = 0; k < 4; ++k) {
    push.sizes[k] = k < iter.ndim() ? static_cast<uint32_t>(iter.shape()[k]) : 1;
  }
  Launch l("elementwise", iter.tensor(0).device().index());
  l.spec(SPEC_OP, op).spec(SPEC_NDIM, static_cast<uint32_t>(std::max<int>(iter.ndim(), 1)));
  l.spec(SPEC_DT0, dts[0]).spec(SPEC_DT1, dts[1]).spec(SPEC_DT2, dts[2]).spec(SPEC_DT3, dts[3]);
  l.spec(SPEC_NIN, static_cast<uint32_t>(nin)).spec(SPEC_INT_MATH, int_math ? 1 : 0);
  l.spec(SPEC_SCALARS, scalars).spec(SPEC_VARIANT, o.variant);
  bind_operands(l, iter);
  return l.push(push).grid(static_cast<uint64_t>(iter.numel()), 256).run();
}

// The iterator's output where the launch ran.
std::optional<at::Tensor> ran(at::TensorIteratorBase& iter, uint32_t op, const EwOptions& o = {}) {
  if (!launch_elementwise(iter, op, o)) return std::nullopt;
  return iter.output();
}

// ------------------------------------------------------------------ the direct path
// The commonest binary calls without a TensorIterator (building one is about a third of a small
// op's host cost): out (or a new tensor), a and b of one float dtype, contiguous, a's shape, b a
// tensor or a wrapped number (`t.add_(1)`), no partial overlap. The launch is the one
// the iterator would make, coalesced to one dim.

// A wrapped number's value without a dispatch (item() is an op call).
c10::Scalar wrapped_value(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kDouble:
      return *t.const_data_ptr<double>();
    case at::kLong:
      return *t.const_data_ptr<int64_t>();
    case at::kBool:
      return *t.const_data_ptr<bool>();
    default:
      return t.item();
  }
}

bool is_wrapped_real(const at::Tensor& t) {
  return t.unsafeGetTensorImpl()->is_wrapped_number() && !at::isComplexType(t.scalar_type());
}

// Whether out (when defined) may be written while x is read: the same memory or none of it.
bool no_partial_overlap(const at::Tensor& out, const at::Tensor& x) {
  if (!out.defined() || out.is_same(x)) return true;
  const at::MemOverlapStatus s = at::get_overlap_status(out, x);
  return s == at::MemOverlapStatus::Full || s == at::MemOverlapStatus::No;
}

bool direct_applies(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  const at::ScalarType t = a.scalar_type();
  if (!is_float(t) || !a.is_contiguous() || !fits<int32_t>(a.numel())) {
    return false;
  }
  const bool b_ok = is_wrapped_real(b) || (b.scalar_type() == t && b.device() == a.device() &&
                                           b.sizes() == a.sizes() && b.is_contiguous());
  const bool out_ok = !out.defined() || (out.scalar_type() == t && out.device() == a.device() &&
                                         out.sizes() == a.sizes() && out.is_contiguous());
  return b_ok && out_ok && no_partial_overlap(out, a) && no_partial_overlap(out, b);
}

// op over a (input 1), b (input 2: a tensor or the wrapped number) and `alpha` (input 3) when
// given, into out (a new tensor where undefined).
std::optional<at::Tensor> direct_binary(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                                        uint32_t op, const c10::Scalar* alpha) {
  at::Tensor fresh;
  if (!out.defined()) fresh = new_empty(a.sizes(), a.scalar_type(), a.device());
  const at::Tensor& result = out.defined() ? out : fresh;
  if (a.numel() == 0) return out.defined() ? in_out() : std::optional<at::Tensor>(std::move(fresh));
  const bool b_scalar = is_wrapped_real(b);
  Push push{};
  push.n = static_cast<uint32_t>(a.numel());
  push.sizes[0] = push.n;
  for (int k = 1; k < 4; ++k) push.sizes[k] = 1;
  push.strides[0] = push.strides[4] = push.strides[8] = 1;
  uint32_t scalars = 0;
  if (b_scalar) {
    scalars |= 1u << 2;
    scalar_bits(wrapped_value(b), false, &push.strides[8]);
  }
  if (alpha != nullptr) {
    scalars |= 1u << 3;
    scalar_bits(*alpha, false, &push.strides[12]);
  }
  const uint32_t d = dt(a);
  Launch l("elementwise", a.device().index());
  l.spec(SPEC_OP, op).spec(SPEC_NDIM, 1).spec(SPEC_DT0, d).spec(SPEC_DT1, d);
  l.spec(SPEC_DT2, b_scalar ? uint32_t{MPSRT_DTYPE_FLOAT32} : d)
      .spec(SPEC_DT3, MPSRT_DTYPE_FLOAT32);
  l.spec(SPEC_NIN, alpha != nullptr ? 3 : 2).spec(SPEC_INT_MATH, 0);
  l.spec(SPEC_SCALARS, scalars).spec(SPEC_VARIANT, 0);
  const size_t bytes = static_cast<size_t>(a.numel()) * a.element_size();
  l.arg_bytes(result, 0, bytes, true).arg_bytes(a, 0, bytes, false);
  l.arg_bytes(b_scalar ? result : b, 0, bytes, false).arg_bytes(result, 0, bytes, false);
  if (!l.push(push).grid(push.n, 256).run()) return std::nullopt;
  return out.defined() ? in_out() : std::optional<at::Tensor>(std::move(fresh));
}

// How TensorIterator builds the op: binary_op, binary_float_op, comparison_op.
enum class Kind { kBinary, kFloat, kCompare };

at::TensorIterator make_binary(Kind k, at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  if (k == Kind::kFloat) return at::TensorIterator::binary_float_op(out, a, b);
  if (k == Kind::kCompare) return at::TensorIterator::comparison_op(out, a, b);
  return at::TensorIterator::binary_op(out, a, b);
}

// Binary ops (Tensor or Scalar operands), comparisons included.
template <uint32_t Op, Kind K>
struct Binary {
  template <class X, class Y>
  static std::optional<at::Tensor> run(at::Tensor& out, const X& x, const Y& y) {
    const at::Tensor a = as_tensor(x), b = as_tensor(y);
    if (K != Kind::kCompare && Op != OP_POW && direct_applies(out, a, b)) {
      return direct_binary(out, a, b, Op, nullptr);
    }
    at::TensorIterator iter = make_binary(K, out, a, b);
    // torch refuses integer negative powers of a scalar exponent with its own message (the
    // fallback raises it).
    if (Op == OP_POW && !at::isFloatingType(iter.common_dtype()) && iter.is_cpu_scalar(2) &&
        iter.tensor(2).item().toDouble() < 0) {
      return std::nullopt;
    }
    return ran(iter, Op);
  }
};

// add / sub with alpha: exact in 64-bit integers for integer results.
template <uint32_t Op>
struct BinaryAlpha {
  template <class Y>
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& a, const Y& b,
                                       const c10::Scalar& alpha) {
    const at::Tensor bt = as_tensor(b);
    if (!alpha.isBoolean() && !alpha.isComplex() && direct_applies(out, a, bt)) {
      return direct_binary(out, a, bt, Op, &alpha);
    }
    at::TensorIterator iter = make_binary(Kind::kBinary, out, a, bt);
    const at::ScalarType common = iter.common_dtype();
    // torch's checks (alpha_check, bool subtraction) raise through the fallback.
    if (alpha.isBoolean() || (Op == OP_SUB && common == at::kBool) ||
        (!at::isFloatingType(common) && alpha.isFloatingPoint())) {
      return std::nullopt;
    }
    EwOptions o;
    // A bool sum is the logical or (torch converts alpha to bool too).
    o.scalars.push_back(common == at::kBool ? c10::Scalar(int64_t{alpha.toLong() != 0}) : alpha);
    return ran(iter, Op, o);
  }
};

// div with a rounding mode (None, "trunc", "floor"); integer division is left to the fallback
// (it raises on division by zero).
struct DivMode {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                                       const std::optional<c10::string_view>& mode) {
    const std::string m = mode ? std::string(*mode) : "";
    if (!m.empty() && m != "trunc" && m != "floor") return std::nullopt;
    at::TensorIterator iter = make_binary(m.empty() ? Kind::kFloat : Kind::kBinary, out, a, b);
    if (!at::isFloatingType(iter.common_dtype())) return std::nullopt;
    return ran(iter, m.empty() ? OP_DIV : (m == "trunc" ? OP_DIV_TRUNC : OP_DIV_FLOOR));
  }
};

// floor_divide: div with the "floor" mode.
struct FloorDivide {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
    return DivMode::run(out, a, b, c10::string_view("floor"));
  }
};

// Unary ops (Float: integer inputs give floats; FloatOnly: torch has no integer kernel, which
// the fallback reports).
template <uint32_t Op, bool Float, bool FloatOnly = false>
struct Unary {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self,
                                       const EwOptions& o = {}) {
    if (FloatOnly && !at::isFloatingType(self.scalar_type())) return std::nullopt;
    if ((Op == OP_NEG || Op == OP_RELU) && self.scalar_type() == at::kBool) return std::nullopt;
    at::TensorIterator iter = Float ? at::TensorIterator::unary_float_op(out, self)
                                    : at::TensorIterator::unary_op(out, self);
    return ran(iter, Op, o);
  }
};

// gelu's approximation as the kernel's variant ("none" 0, "tanh" 1).
std::optional<EwOptions> gelu_variant(c10::string_view approximate) {
  if (approximate != "none" && approximate != "tanh") return std::nullopt;
  EwOptions o;
  o.variant = approximate == "tanh" ? 1 : 0;
  return o;
}

struct Gelu {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self,
                                       c10::string_view approximate) {
    const std::optional<EwOptions> o = gelu_variant(approximate);
    if (!o) return std::nullopt;
    return Unary<OP_GELU, false, true>::run(out, self, *o);
  }
};

// Bitwise ops: integers and bools only (torch raises for floats, through the fallback).
template <uint32_t Op>
struct Bitwise {
  template <class Y>
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& a, const Y& y) {
    at::TensorIterator iter = make_binary(Kind::kBinary, out, a, as_tensor(y));
    if (at::isFloatingType(iter.common_dtype())) return std::nullopt;
    return ran(iter, Op);
  }
};

struct BitwiseNot {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self) {
    if (at::isFloatingType(self.scalar_type())) return std::nullopt;
    return Unary<OP_BITWISE_NOT, false>::run(out, self);
  }
};

// logical_not: a bool result (functional), or in self's or out's dtype.
struct LogicalNot {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self) {
    at::Tensor result = out.defined() ? out : at::empty({0}, self.options().dtype(at::kBool));
    at::TensorIterator iter = at::TensorIteratorConfig()
                                  .check_all_same_dtype(false)
                                  .add_output(result)
                                  .add_const_input(self)
                                  .build();
    EwOptions o;
    o.compute = at::isFloatingType(self.scalar_type()) ? at::kFloat : at::kLong;
    return ran(iter, OP_LOGICAL_NOT, o);
  }
};

// The configuration of torch's binary ops (type promotion with wrapped numbers, safe casts to
// the output) for more operands.
at::TensorIteratorConfig promoting_config() {
  at::TensorIteratorConfig c;
  c.set_check_mem_overlap(true)
      .allow_cpu_scalars(true)
      .promote_inputs_to_common_dtype(true)
      .cast_common_dtype_to_outputs(true)
      .enforce_safe_casting_to_output(true);
  return c;
}

// where(condition, self, other): the condition must be bool (torch deprecates uint8).
struct Where {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& cond, const at::Tensor& a,
                                       const at::Tensor& b) {
    if (cond.scalar_type() != at::kBool) return std::nullopt;
    at::TensorIterator iter = promoting_config()
                                  .add_output(out)
                                  .add_const_input(cond)
                                  .add_const_input(a)
                                  .add_const_input(b)
                                  .build();
    return ran(iter, OP_WHERE);
  }
};

// masked_fill_(self, mask, value): value a Scalar, a CPU scalar or a 0-dim mpsrt tensor,
// converted to self's dtype; the mask bool and broadcastable to self (else torch's message
// through the fallback).
template <class V>
at::Tensor* masked_fill(at::Tensor& self, const at::Tensor& mask, const V& value) {
  constexpr bool kTensor = std::is_same_v<V, at::Tensor>;
  if (mask.scalar_type() != at::kBool ||
      at::infer_size(self.sizes(), mask.sizes()) != self.sizes()) {
    return nullptr;
  }
  if constexpr (kTensor) {
    if (value.dim() != 0) return nullptr;
  }
  at::TensorIteratorConfig c;
  c.check_all_same_dtype(false)
      .resize_outputs(false)
      .add_output(self)
      .add_const_input(self)
      .add_const_input(mask);
  EwOptions o;
  o.compute = at::isFloatingType(self.scalar_type()) ? at::kFloat : at::kLong;
  if constexpr (kTensor) {
    if (is_mpsrt(value)) {
      c.add_const_input(value);
    } else {
      o.scalars.push_back(value.item());
    }
  } else {
    o.scalars.push_back(value);
  }
  at::TensorIterator iter = c.build();
  return launch_elementwise(iter, OP_MASKED_FILL, o) ? &self : nullptr;
}

// clamp(self, min, max) with Scalar bounds (either may be None), clamp_min, clamp_max: the
// bounds take part in type promotion (as torch's clamp: an integer tensor with a float bound
// is clamped as a float tensor) and travel as scalars. An in-place clamp that would change
// self's dtype is torch's error (the fallback raises it).
std::optional<at::Tensor> clamp_with(at::Tensor& out, const at::Tensor& self,
                                     const std::optional<c10::Scalar>* bounds, int count,
                                     uint32_t variant_bits) {
  EwOptions o;
  at::native::ResultTypeState state = at::native::update_result_type_state(self, {});
  for (int b = 0; b < count; ++b) {
    if (!bounds[b]) continue;
    o.variant |= count == 2 ? (1u << b) : variant_bits;
    o.scalars.push_back(*bounds[b]);
    state = at::native::update_result_type_state(*bounds[b], state);
  }
  const at::ScalarType type = at::native::result_type(state);
  const bool inplace = out.defined() && out.is_same(self);
  if (o.scalars.empty() || (inplace && type != self.scalar_type())) return std::nullopt;
  const at::Tensor in = type == self.scalar_type() ? self : self.to(type);
  at::TensorIterator iter = at::TensorIterator::unary_op(out, in);
  return ran(iter, OP_CLAMP, o);
}

struct Clamp {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self,
                                       const std::optional<c10::Scalar>& lo,
                                       const std::optional<c10::Scalar>& hi) {
    const std::optional<c10::Scalar> bounds[2] = {lo, hi};
    return clamp_with(out, self, bounds, 2, 0);
  }
};

template <uint32_t VariantBit>  // 1 clamp_min, 2 clamp_max
struct ClampOne {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self,
                                       const c10::Scalar& bound) {
    const std::optional<c10::Scalar> bounds[1] = {bound};
    return clamp_with(out, self, bounds, 1, VariantBit);
  }
};

// The backward ops autograd calls: (grad_output, self or output[, threshold or approximation])
// -> grad_input (functional, or out= as grad_input).
template <uint32_t Op>
struct Backward {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& grad,
                                       const at::Tensor& x) {
    at::TensorIterator iter = make_binary(Kind::kBinary, out, grad, x);
    if (!at::isFloatingType(iter.common_dtype())) return std::nullopt;
    return ran(iter, Op);
  }
};

struct ThresholdBackward {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& grad, const at::Tensor& x,
                                       const c10::Scalar& threshold) {
    at::TensorIterator iter = make_binary(Kind::kBinary, out, grad, x);
    EwOptions o;
    o.scalars.push_back(threshold);
    return ran(iter, OP_THRESHOLD_BWD, o);
  }
};

struct GeluBackward {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& grad, const at::Tensor& x,
                                       c10::string_view approximate) {
    at::TensorIterator iter = make_binary(Kind::kBinary, out, grad, x);
    std::optional<EwOptions> o = gelu_variant(approximate);
    if (!o || !at::isFloatingType(iter.common_dtype())) return std::nullopt;
    return ran(iter, OP_GELU_BWD, *o);
  }
};

// ---- activations (float operands only: torch has no integer kernels for them, which the
// fallback reports; float64 declines as everywhere here) with their parameters in p.

EwOptions params(float p0, float p1 = 0, float p2 = 0, uint32_t variant = 0) {
  EwOptions o;
  o.p[0] = p0;
  o.p[1] = p1;
  o.p[2] = p2;
  o.variant = variant;
  return o;
}

std::optional<at::Tensor> activation(at::Tensor& out, const at::Tensor& self, uint32_t op,
                                     const EwOptions& o = {}) {
  if (!is_float(self.scalar_type())) return std::nullopt;
  at::TensorIterator iter = at::TensorIterator::unary_op(out, self);
  return ran(iter, op, o);
}

// An activation's gradient: (grad_output, the forward's input or output) -> grad_input.
std::optional<at::Tensor> activation_bwd(at::Tensor& out, const at::Tensor& grad,
                                         const at::Tensor& x, uint32_t op,
                                         const EwOptions& o = {}) {
  at::TensorIterator iter = make_binary(Kind::kBinary, out, grad, x);
  if (!is_float(iter.common_dtype())) return std::nullopt;
  return ran(iter, op, o);
}

float f32(const c10::Scalar& s) {
  return static_cast<float>(s.toDouble());
}

template <uint32_t Op>  // hardsigmoid, mish
struct Act {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self) {
    return activation(out, self, Op);
  }
};

template <uint32_t Op>  // hardswish, hardsigmoid, mish backward
struct ActBackward {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& grad,
                                       const at::Tensor& x) {
    return activation_bwd(out, grad, x, Op);
  }
};

struct LeakyRelu {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self,
                                       const c10::Scalar& slope) {
    return activation(out, self, OP_LEAKY_RELU, params(f32(slope)));
  }
};

struct LeakyReluBackward {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& grad,
                                       const at::Tensor& self, const c10::Scalar& slope,
                                       bool self_is_result) {
    // A negative slope from the output is torch's error (the fallback raises it).
    if (self_is_result && slope.toDouble() < 0) return std::nullopt;
    return activation_bwd(out, grad, self, OP_LEAKY_RELU_BWD, params(f32(slope)));
  }
};

// elu's coefficients as torch's CPU kernel takes them: alpha * scale, scale, input_scale.
EwOptions elu_params(const c10::Scalar& alpha, const c10::Scalar& scale,
                     const c10::Scalar& input_scale, bool is_result = false) {
  return params(f32(alpha) * f32(scale), f32(scale), f32(input_scale), is_result ? 1 : 0);
}

struct Elu {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self,
                                       const c10::Scalar& alpha, const c10::Scalar& scale,
                                       const c10::Scalar& input_scale) {
    return activation(out, self, OP_ELU, elu_params(alpha, scale, input_scale));
  }
};

struct EluBackward {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& grad,
                                       const c10::Scalar& alpha, const c10::Scalar& scale,
                                       const c10::Scalar& input_scale, bool is_result,
                                       const at::Tensor& x) {
    // A negative alpha from the output is torch's error (the fallback raises it).
    if (is_result && alpha.toDouble() < 0) return std::nullopt;
    return activation_bwd(out, grad, x, OP_ELU_BWD,
                          elu_params(alpha, scale, input_scale, is_result));
  }
};

struct Softplus {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self,
                                       const c10::Scalar& beta, const c10::Scalar& threshold) {
    return activation(out, self, OP_SOFTPLUS, params(f32(beta), f32(threshold)));
  }
};

struct SoftplusBackward {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& grad,
                                       const at::Tensor& self, const c10::Scalar& beta,
                                       const c10::Scalar& threshold) {
    return activation_bwd(out, grad, self, OP_SOFTPLUS_BWD, params(f32(beta), f32(threshold)));
  }
};

// hardtanh is clamp (NaN kept) on float tensors.
struct Hardtanh {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& self,
                                       const c10::Scalar& lo, const c10::Scalar& hi) {
    if (!is_float(self.scalar_type())) return std::nullopt;
    return Clamp::run(out, self, lo, hi);
  }
};

struct HardtanhBackward {
  static std::optional<at::Tensor> run(at::Tensor& out, const at::Tensor& grad,
                                       const at::Tensor& self, const c10::Scalar& lo,
                                       const c10::Scalar& hi) {
    return activation_bwd(out, grad, self, OP_HARDTANH_BWD, params(f32(lo), f32(hi)));
  }
};

// _prelu_kernel(self, weight): weight broadcast to self by the caller (prelu); one dtype.
std::optional<at::Tensor> prelu(const at::Tensor& self, const at::Tensor& weight) {
  if (!is_float(self.scalar_type()) || weight.scalar_type() != self.scalar_type()) {
    return std::nullopt;
  }
  at::Tensor out;
  at::TensorIterator iter = make_binary(Kind::kBinary, out, self, weight);
  return ran(iter, OP_PRELU);
}

// _prelu_kernel_backward: the input's and the weight's gradients, both in the operands'
// broadcast shape (autograd sums the weight's down to the weight's shape), one launch each.
std::optional<std::tuple<at::Tensor, at::Tensor>> prelu_backward(const at::Tensor& grad,
                                                                 const at::Tensor& self,
                                                                 const at::Tensor& weight) {
  const at::ScalarType t = self.scalar_type();
  if (!is_float(t) || weight.scalar_type() != t || grad.scalar_type() != t) return std::nullopt;
  at::Tensor grad_in;
  at::Tensor grad_w;
  for (at::Tensor* out : {&grad_in, &grad_w}) {
    at::TensorIterator iter = promoting_config()
                                  .add_output(*out)
                                  .add_const_input(grad)
                                  .add_const_input(self)
                                  .add_const_input(weight)
                                  .build();
    if (!ran(iter, out == &grad_in ? OP_PRELU_BWD_IN : OP_PRELU_BWD_W)) return std::nullopt;
    *out = iter.output();
  }
  return std::make_tuple(grad_in, grad_w);
}

// The functional, in-place and out= forms of op `Core`; P: the host path of the first two, for
// the ops models call most (an out= form takes the fallback, which resizes `out`).
template <class F, class I, class O, class Core, HostPath P = HostPath::kBoxed>
void forms(torch::Library& m) {
  reg<F, Functional<Core>, P>(m);
  reg<I, Inplace<Core>, P>(m);
  reg<O, Out<Core>>(m);
}

}  // namespace

// A copy of src into dst (TensorIterator's geometry: broadcasting, strides, any pair of the
// kernel's dtypes) on the elementwise kernel; false where it cannot (nothing launched).
bool copy(const at::Tensor& dst, const at::Tensor& src) {
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .set_check_mem_overlap(false)
                                .check_all_same_dtype(false)
                                .resize_outputs(false)
                                .add_output(dst)
                                .add_const_input(src)
                                .build();
  EwOptions o;
  const bool floats =
      at::isFloatingType(dst.scalar_type()) || at::isFloatingType(src.scalar_type());
  o.compute = floats ? at::kFloat : at::kLong;
  return launch_elementwise(iter, OP_COPY, o);
}

namespace {

namespace A = at::_ops;
constexpr HostPath kTyped = HostPath::kTyped;

void register_arithmetic(torch::Library& m) {
  forms<A::add_Tensor, A::add__Tensor, A::add_out, BinaryAlpha<OP_ADD>, kTyped>(m);
  forms<A::sub_Tensor, A::sub__Tensor, A::sub_out, BinaryAlpha<OP_SUB>, kTyped>(m);
  forms<A::mul_Tensor, A::mul__Tensor, A::mul_out, Binary<OP_MUL, Kind::kBinary>, kTyped>(m);
  forms<A::div_Tensor, A::div__Tensor, A::div_out, Binary<OP_DIV, Kind::kFloat>, kTyped>(m);
  forms<A::div_Tensor_mode, A::div__Tensor_mode, A::div_out_mode, DivMode, kTyped>(m);
  forms<A::floor_divide, A::floor_divide__Tensor, A::floor_divide_out, FloorDivide, kTyped>(m);
  using Pow = Binary<OP_POW, Kind::kBinary>;
  forms<A::pow_Tensor_Tensor, A::pow__Tensor, A::pow_Tensor_Tensor_out, Pow, kTyped>(m);
  forms<A::pow_Tensor_Scalar, A::pow__Scalar, A::pow_Tensor_Scalar_out, Pow, kTyped>(m);
  reg<A::pow_Scalar, Functional<Pow>>(m);
  reg<A::pow_Scalar_out, Out<Pow>>(m);
  reg<A::maximum, Functional<Binary<OP_MAXIMUM, Kind::kBinary>>, kTyped>(m);
  reg<A::maximum_out, Out<Binary<OP_MAXIMUM, Kind::kBinary>>>(m);
  reg<A::minimum, Functional<Binary<OP_MINIMUM, Kind::kBinary>>, kTyped>(m);
  reg<A::minimum_out, Out<Binary<OP_MINIMUM, Kind::kBinary>>>(m);
}

void register_unary(torch::Library& m) {
  forms<A::neg, A::neg_, A::neg_out, Unary<OP_NEG, false>, kTyped>(m);
  forms<A::abs, A::abs_, A::abs_out, Unary<OP_ABS, false>, kTyped>(m);
  forms<A::relu, A::relu_, A::relu_out, Unary<OP_RELU, false>, kTyped>(m);
  forms<A::exp, A::exp_, A::exp_out, Unary<OP_EXP, true>, kTyped>(m);
  forms<A::log, A::log_, A::log_out, Unary<OP_LOG, true>, kTyped>(m);
  forms<A::sqrt, A::sqrt_, A::sqrt_out, Unary<OP_SQRT, true>, kTyped>(m);
  forms<A::rsqrt, A::rsqrt_, A::rsqrt_out, Unary<OP_RSQRT, true>, kTyped>(m);
  forms<A::reciprocal, A::reciprocal_, A::reciprocal_out, Unary<OP_RECIPROCAL, true>, kTyped>(m);
  forms<A::tanh, A::tanh_, A::tanh_out, Unary<OP_TANH, true>, kTyped>(m);
  forms<A::sigmoid, A::sigmoid_, A::sigmoid_out, Unary<OP_SIGMOID, true>, kTyped>(m);
  forms<A::sin, A::sin_, A::sin_out, Unary<OP_SIN, true>, kTyped>(m);
  forms<A::cos, A::cos_, A::cos_out, Unary<OP_COS, true>, kTyped>(m);
  forms<A::gelu, A::gelu_, A::gelu_out, Gelu, kTyped>(m);
  forms<A::silu, A::silu_, A::silu_out, Unary<OP_SILU, false, true>, kTyped>(m);
  forms<A::hardswish, A::hardswish_, A::hardswish_out, Unary<OP_HARDSWISH, false, true>, kTyped>(m);
  forms<A::logical_not, A::logical_not_, A::logical_not_out, LogicalNot, kTyped>(m);
  forms<A::bitwise_and_Tensor, A::bitwise_and__Tensor, A::bitwise_and_Tensor_out,
        Bitwise<OP_BITWISE_AND>, kTyped>(m);
  forms<A::bitwise_or_Tensor, A::bitwise_or__Tensor, A::bitwise_or_Tensor_out,
        Bitwise<OP_BITWISE_OR>, kTyped>(m);
  forms<A::bitwise_xor_Tensor, A::bitwise_xor__Tensor, A::bitwise_xor_Tensor_out,
        Bitwise<OP_BITWISE_XOR>, kTyped>(m);
  forms<A::bitwise_not, A::bitwise_not_, A::bitwise_not_out, BitwiseNot, kTyped>(m);
}

template <uint32_t Op, class T, class TI, class TO, class S, class SI, class SO>
void comparison(torch::Library& m) {
  forms<T, TI, TO, Binary<Op, Kind::kCompare>, kTyped>(m);
  forms<S, SI, SO, Binary<Op, Kind::kCompare>, kTyped>(m);
}

void register_comparisons(torch::Library& m) {
  comparison<OP_EQ, A::eq_Tensor, A::eq__Tensor, A::eq_Tensor_out, A::eq_Scalar, A::eq__Scalar,
             A::eq_Scalar_out>(m);
  comparison<OP_NE, A::ne_Tensor, A::ne__Tensor, A::ne_Tensor_out, A::ne_Scalar, A::ne__Scalar,
             A::ne_Scalar_out>(m);
  comparison<OP_LT, A::lt_Tensor, A::lt__Tensor, A::lt_Tensor_out, A::lt_Scalar, A::lt__Scalar,
             A::lt_Scalar_out>(m);
  comparison<OP_LE, A::le_Tensor, A::le__Tensor, A::le_Tensor_out, A::le_Scalar, A::le__Scalar,
             A::le_Scalar_out>(m);
  comparison<OP_GT, A::gt_Tensor, A::gt__Tensor, A::gt_Tensor_out, A::gt_Scalar, A::gt__Scalar,
             A::gt_Scalar_out>(m);
  comparison<OP_GE, A::ge_Tensor, A::ge__Tensor, A::ge_Tensor_out, A::ge_Scalar, A::ge__Scalar,
             A::ge_Scalar_out>(m);
}

void register_others(torch::Library& m) {
  reg<A::where_self, Functional<Where>, kTyped>(m);
  reg<A::where_self_out, Out<Where>>(m);
  reg<A::masked_fill__Scalar, &masked_fill<c10::Scalar>, kTyped>(m);
  reg<A::masked_fill__Tensor, &masked_fill<at::Tensor>, kTyped>(m);
  forms<A::clamp, A::clamp_, A::clamp_out, Clamp, kTyped>(m);
  forms<A::clamp_min, A::clamp_min_, A::clamp_min_out, ClampOne<1>, kTyped>(m);
  forms<A::clamp_max, A::clamp_max_, A::clamp_max_out, ClampOne<2>, kTyped>(m);
  reg<A::threshold_backward, Functional<ThresholdBackward>, kTyped>(m);
  reg<A::threshold_backward_grad_input, Out<ThresholdBackward>>(m);
  reg<A::gelu_backward, Functional<GeluBackward>, kTyped>(m);
  reg<A::gelu_backward_grad_input, Out<GeluBackward>>(m);
  reg<A::silu_backward, Functional<Backward<OP_SILU_BWD>>, kTyped>(m);
  reg<A::silu_backward_grad_input, Out<Backward<OP_SILU_BWD>>>(m);
  reg<A::sigmoid_backward, Functional<Backward<OP_SIGMOID_BWD>>, kTyped>(m);
  reg<A::sigmoid_backward_grad_input, Out<Backward<OP_SIGMOID_BWD>>>(m);
  reg<A::tanh_backward, Functional<Backward<OP_TANH_BWD>>, kTyped>(m);
  reg<A::tanh_backward_grad_input, Out<Backward<OP_TANH_BWD>>>(m);
}

void register_activations(torch::Library& m) {
  forms<A::hardsigmoid, A::hardsigmoid_, A::hardsigmoid_out, Act<OP_HARDSIGMOID>, kTyped>(m);
  forms<A::mish, A::mish_, A::mish_out, Act<OP_MISH>>(m);
  forms<A::leaky_relu, A::leaky_relu_, A::leaky_relu_out, LeakyRelu, kTyped>(m);
  forms<A::elu, A::elu_, A::elu_out, Elu>(m);
  forms<A::hardtanh, A::hardtanh_, A::hardtanh_out, Hardtanh, kTyped>(m);
  reg<A::softplus, Functional<Softplus>>(m);
  reg<A::softplus_out, Out<Softplus>>(m);
  reg<A::_prelu_kernel, &prelu>(m);
  reg<A::_prelu_kernel_backward, &prelu_backward>(m);
}

void register_activation_gradients(torch::Library& m) {
  using HardswishBwd = ActBackward<OP_HARDSWISH_BWD>;
  using HardsigmoidBwd = ActBackward<OP_HARDSIGMOID_BWD>;
  reg<A::hardswish_backward, Functional<HardswishBwd>, kTyped>(m);
  reg<A::hardswish_backward_out, Out<HardswishBwd>>(m);
  reg<A::hardsigmoid_backward, Functional<HardsigmoidBwd>, kTyped>(m);
  reg<A::hardsigmoid_backward_grad_input, Out<HardsigmoidBwd>>(m);
  reg<A::mish_backward, Functional<ActBackward<OP_MISH_BWD>>>(m);
  reg<A::leaky_relu_backward, Functional<LeakyReluBackward>>(m);
  reg<A::leaky_relu_backward_grad_input, Out<LeakyReluBackward>>(m);
  reg<A::elu_backward, Functional<EluBackward>>(m);
  reg<A::elu_backward_grad_input, Out<EluBackward>>(m);
  reg<A::softplus_backward, Functional<SoftplusBackward>>(m);
  reg<A::softplus_backward_grad_input, Out<SoftplusBackward>>(m);
  reg<A::hardtanh_backward, Functional<HardtanhBackward>>(m);
  reg<A::hardtanh_backward_grad_input, Out<HardtanhBackward>>(m);
}

}  // namespace
}  // namespace mpsrt::torch_glue::ops::elementwise

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  namespace e = mpsrt::torch_glue::ops::elementwise;
  e::register_arithmetic(m);
  e::register_unary(m);
  e::register_comparisons(m);
  e::register_others(m);
  e::register_activations(m);
  e::register_activation_gradients(m);
}
