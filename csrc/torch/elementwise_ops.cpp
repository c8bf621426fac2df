// Element-wise operators on mpsrt's elementwise kernel (csrc/kernels/elementwise.comp): torch's
// TensorIterator decides the output's shape, dtype and memory layout, broadcasting and type
// promotion, and coalesces dims; the kernel reads each operand in its own dtype and strides.
// Scalars (CPU scalars of the op, alpha, clamp's bounds, ...) travel in push constants.
//
// What a kernel declines (float64 math, integer division, more than 4 dims after coalescing,
// arguments torch rejects with its own message) runs through the fallback.
#include <ATen/ExpandUtils.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>
#include <string>

#include "host_access.h"
#include "kernels.h"

namespace mpsrt::torch_glue {
namespace {

using kernels::arg;
using kernels::Declined;
using kernels::finish;
using kernels::Launch;

// elementwise.comp's ops.
enum EwOp : uint32_t {
  kCopy = 0,
  kAdd = 1,
  kSub = 2,
  kMul = 3,
  kDiv = 4,
  kNeg = 5,
  kRelu = 6,
  kAbs = 7,
  kExp = 8,
  kLog = 9,
  kSqrt = 10,
  kRsqrt = 11,
  kReciprocal = 12,
  kPow = 13,
  kTanh = 14,
  kSigmoid = 15,
  kGelu = 16,
  kSilu = 17,
  kWhere = 18,
  kEq = 19,
  kNe = 20,
  kLt = 21,
  kLe = 22,
  kGt = 23,
  kGe = 24,
  kClamp = 25,
  kMaximum = 26,
  kMinimum = 27,
  kSin = 28,
  kCos = 29,
  kLogicalNot = 30,
  kThresholdBwd = 31,
  kGeluBwd = 32,
  kSiluBwd = 33,
  kSigmoidBwd = 34,
  kTanhBwd = 35,
  kDivTrunc = 36,
  kDivFloor = 37,
  kMaskedFill = 38,
};

// How a launch departs from the iterator: the dtype the op computes in (Undefined: the
// iterator's common dtype), scalar inputs after the iterator's (alpha, a threshold, ...), the
// op's variant (elementwise.comp's VARIANT).
struct EwOptions {
  at::ScalarType compute = at::ScalarType::Undefined;
  std::vector<c10::Scalar> scalars;
  uint32_t variant = 0;
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

// The same dtype as an integer of its width: a copy within one dtype moves bits.
uint32_t bits_dtype(at::ScalarType t) {
  switch (c10::elementSize(t)) {
    case 1:
      return MPSRT_DTYPE_UINT8;
    case 2:
      return MPSRT_DTYPE_UINT16;
    case 4:
      return MPSRT_DTYPE_UINT32;
    default:
      return MPSRT_DTYPE_UINT64;
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

// Runs op over the iterator's operands (output first) and o's scalars. Declines ranks over 4
// after coalescing, more than 3 inputs, float64 math and dtypes mpsrt has no id for.
void launch_elementwise(at::TensorIteratorBase& iter, uint32_t op, const EwOptions& o = {}) {
  if (iter.numel() == 0) return;
  const int nt = iter.ntensors();
  const int nin = nt - 1 + static_cast<int>(o.scalars.size());
  if (iter.ndim() > 4 || nin > 3 || iter.noutputs() != 1 || iter.numel() > INT32_MAX) {
    throw Declined{};
  }
  const at::ScalarType compute =
      o.compute != at::ScalarType::Undefined ? o.compute : iter.common_dtype();
  // A copy within one dtype moves bits (exact for every dtype, NaN payloads included).
  const bool bitwise = op == kCopy && iter.dtype(0) == iter.dtype(1);
  const bool int_math = bitwise || !at::isFloatingType(compute);
  if ((!int_math && compute == at::kDouble) || at::isComplexType(compute)) throw Declined{};
  int32_t strides[16] = {};
  uint32_t dts[4] = {MPSRT_DTYPE_FLOAT32, MPSRT_DTYPE_FLOAT32, MPSRT_DTYPE_FLOAT32,
                     MPSRT_DTYPE_FLOAT32};
  uint32_t scalars = 0;
  for (int i = 0; i < nt; ++i) {
    if (i > 0 && iter.is_cpu_scalar(i)) {
      scalars |= 1u << i;
      scalar_bits(iter.tensor(i).item(), int_math, &strides[4 * i]);
      continue;
    }
    const int id = kernels::dtype_id(iter.dtype(i));
    if (id < 0 || (iter.dtype(i) == at::kDouble && !bitwise)) throw Declined{};
    dts[i] = bitwise ? bits_dtype(iter.dtype(i)) : static_cast<uint32_t>(id);
    const int64_t es = static_cast<int64_t>(iter.element_size(i));
    for (int k = 0; k < iter.ndim(); ++k) {
      const int64_t s = iter.strides(i)[k] / es;
      if (s < 0 || s > INT32_MAX) throw Declined{};
      strides[4 * i + k] = static_cast<int32_t>(s);
    }
  }
  for (size_t j = 0; j < o.scalars.size(); ++j) {
    const size_t slot = static_cast<size_t>(nt) + j;
    scalars |= 1u << slot;
    scalar_bits(o.scalars[j], int_math, &strides[4 * slot]);
  }
  Launch l("elementwise", iter.tensor(0).device().index());
  l.spec(op).spec(static_cast<uint32_t>(std::max<int>(iter.ndim(), 1)));
  for (uint32_t dt : dts) l.spec(dt);
  l.spec(static_cast<uint32_t>(nin)).spec(int_math ? 1 : 0).spec(scalars).spec(o.variant);
  bind_operands(l, iter);
  uint32_t sizes[4] = {1, 1, 1, 1};
  for (int k = 0; k < iter.ndim(); ++k) sizes[k] = static_cast<uint32_t>(iter.shape()[k]);
  const float params[3] = {0.0f, 0.0f, 0.0f};
  l.push(static_cast<uint32_t>(iter.numel())).push(sizes).push(strides).push(params);
  l.grid(static_cast<uint64_t>(iter.numel()), 256).run();
}

// The forms of an op: functional, in place (self_) and out= (the last argument).
enum class Form { kFunctional, kInplace, kOut };
// How TensorIterator builds the op: binary_op, binary_float_op, comparison_op.
enum class Kind { kBinary, kFloat, kCompare };

template <Form F>
at::Tensor out_arg(const c10::OperatorHandle& op, const torch::jit::Stack& s) {
  if constexpr (F == Form::kInplace) return arg(op, s, 0).toTensor();
  if constexpr (F == Form::kOut) return arg(op, s, op.schema().arguments().size() - 1).toTensor();
  return at::Tensor();
}

template <Form F>
void finish_iter(const c10::OperatorHandle& op, torch::jit::Stack& s, at::TensorIteratorBase& it,
                 const at::Tensor& out) {
  finish(op, s, F == Form::kFunctional ? it.output() : out);
}

// Argument i as a tensor: a Scalar argument as a wrapped number (as torch's .Scalar overloads).
at::Tensor tensor_arg(const c10::OperatorHandle& op, const torch::jit::Stack& s, size_t i) {
  const c10::IValue& v = arg(op, s, i);
  return v.isTensor() ? v.toTensor() : at::native::wrapped_scalar_tensor(v.toScalar());
}

at::TensorIterator make_binary(Kind k, at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  if (k == Kind::kFloat) return at::TensorIterator::binary_float_op(out, a, b);
  if (k == Kind::kCompare) return at::TensorIterator::comparison_op(out, a, b);
  return at::TensorIterator::binary_op(out, a, b);
}

// Binary ops (Tensor or Scalar other), comparisons included.
template <uint32_t Op, Form F, Kind K>
bool binary(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  at::Tensor out = out_arg<F>(op, s);
  at::TensorIterator iter = make_binary(K, out, tensor_arg(op, s, 0), tensor_arg(op, s, 1));
  const at::ScalarType common = iter.common_dtype();
  // torch refuses these with its own messages: bool subtraction, integer negative powers of a
  // scalar exponent (the fallback raises them).
  if (Op == kPow && !at::isFloatingType(common) && iter.is_cpu_scalar(2) &&
      iter.tensor(2).item().toDouble() < 0) {
    throw Declined{};
  }
  launch_elementwise(iter, Op);
  finish_iter<F>(op, s, iter, out);
  return true;
}

// add / sub with alpha (the third argument): exact in 64-bit integers for integer results.
template <uint32_t Op, Form F>
bool binary_alpha(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  at::Tensor out = out_arg<F>(op, s);
  at::TensorIterator iter =
      make_binary(Kind::kBinary, out, tensor_arg(op, s, 0), tensor_arg(op, s, 1));
  const c10::Scalar alpha = arg(op, s, 2).toScalar();
  const at::ScalarType common = iter.common_dtype();
  // torch's checks (alpha_check, bool subtraction) raise through the fallback.
  if (alpha.isBoolean() || (Op == kSub && common == at::kBool) ||
      (!at::isFloatingType(common) && alpha.isFloatingPoint())) {
    throw Declined{};
  }
  EwOptions o;
  // A bool sum is the logical or (torch converts alpha to bool too).
  o.scalars.push_back(common == at::kBool ? c10::Scalar(int64_t{alpha.toLong() != 0}) : alpha);
  launch_elementwise(iter, Op, o);
  finish_iter<F>(op, s, iter, out);
  return true;
}

// div with rounding_mode (None, "trunc", "floor"); integer division is left to the fallback
// (it raises on division by zero).
// FloorDivide: floor_divide (no mode argument, "floor").
template <Form F, bool FloorDivide = false>
bool div_mode(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const c10::IValue& mode = FloorDivide ? c10::IValue("floor") : arg(op, s, 2);
  const std::string m = mode.isNone() ? "" : mode.toStringRef();
  if (!m.empty() && m != "trunc" && m != "floor") throw Declined{};
  at::Tensor out = out_arg<F>(op, s);
  at::TensorIterator iter = make_binary(m.empty() ? Kind::kFloat : Kind::kBinary, out,
                                        tensor_arg(op, s, 0), tensor_arg(op, s, 1));
  if (!at::isFloatingType(iter.common_dtype())) throw Declined{};
  launch_elementwise(iter, m.empty() ? kDiv : (m == "trunc" ? kDivTrunc : kDivFloor));
  finish_iter<F>(op, s, iter, out);
  return true;
}

// Unary ops (Float: integer inputs give floats; FloatOnly: torch has no integer kernel, which
// the fallback reports). Gelu reads its approximation (argument 1).
template <uint32_t Op, Form F, bool Float, bool FloatOnly = false>
bool unary(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  if (FloatOnly && !at::isFloatingType(self.scalar_type())) throw Declined{};
  EwOptions o;
  if constexpr (Op == kGelu) {
    const std::string approximate = arg(op, s, 1).toStringRef();
    if (approximate != "none" && approximate != "tanh") throw Declined{};
    o.variant = approximate == "tanh" ? 1 : 0;
  }
  if ((Op == kNeg || Op == kRelu) && self.scalar_type() == at::kBool) throw Declined{};
  at::Tensor out = out_arg<F>(op, s);
  at::TensorIterator iter = Float ? at::TensorIterator::unary_float_op(out, self)
                                  : at::TensorIterator::unary_op(out, self);
  launch_elementwise(iter, Op, o);
  finish_iter<F>(op, s, iter, out);
  return true;
}

// logical_not: a bool result (functional), or in self's or out's dtype.
template <Form F>
bool logical_not(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  at::Tensor out = out_arg<F>(op, s);
  if (F == Form::kFunctional) out = at::empty({0}, self.options().dtype(at::kBool));
  at::TensorIterator iter = at::TensorIteratorConfig()
                                .check_all_same_dtype(false)
                                .add_output(out)
                                .add_const_input(self)
                                .build();
  EwOptions o;
  o.compute = at::isFloatingType(self.scalar_type()) ? at::kFloat : at::kLong;
  launch_elementwise(iter, kLogicalNot, o);
  finish(op, s, out);
  return true;
}

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
template <Form F>
bool where(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor cond = arg(op, s, 0).toTensor();
  const at::Tensor a = tensor_arg(op, s, 1);
  const at::Tensor b = tensor_arg(op, s, 2);
  if (cond.scalar_type() != at::kBool) throw Declined{};
  at::Tensor out = out_arg<F>(op, s);
  at::TensorIterator iter = promoting_config()
                                .add_output(out)
                                .add_const_input(cond)
                                .add_const_input(a)
                                .add_const_input(b)
                                .build();
  launch_elementwise(iter, kWhere);
  finish_iter<F>(op, s, iter, out);
  return true;
}

// masked_fill_(self, mask, value): value a Scalar, a CPU scalar or a 0-dim mpsrt tensor,
// converted to self's dtype; the mask bool and broadcastable to self (else torch's message
// through the fallback).
bool masked_fill(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  at::Tensor self = arg(op, s, 0).toTensor();
  const at::Tensor mask = arg(op, s, 1).toTensor();
  const c10::IValue& v = arg(op, s, 2);
  if (mask.scalar_type() != at::kBool || (v.isTensor() && v.toTensor().dim() != 0) ||
      at::infer_size(self.sizes(), mask.sizes()) != self.sizes()) {
    throw Declined{};
  }
  at::TensorIteratorConfig c;
  c.check_all_same_dtype(false)
      .resize_outputs(false)
      .add_output(self)
      .add_const_input(self)
      .add_const_input(mask);
  EwOptions o;
  o.compute = at::isFloatingType(self.scalar_type()) ? at::kFloat : at::kLong;
  if (v.isTensor() && is_mpsrt(v.toTensor())) {
    c.add_const_input(v.toTensor());
  } else {
    o.scalars.push_back(v.isTensor() ? v.toTensor().item() : v.toScalar());
  }
  at::TensorIterator iter = c.build();
  launch_elementwise(iter, kMaskedFill, o);
  finish(op, s, self);
  return true;
}

// clamp(self, min, max) with Scalar bounds (either may be None), clamp_min, clamp_max: the
// bounds take part in type promotion (as torch's clamp: an integer tensor with a float bound
// is clamped as a float tensor) and travel as scalars.
template <Form F, int Bounds>  // Bounds: 3 clamp (min, max), 1 clamp_min, 2 clamp_max
bool clamp(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  at::Tensor self = arg(op, s, 0).toTensor();
  EwOptions o;
  at::native::ResultTypeState state = at::native::update_result_type_state(self, {});
  for (int b = 0; b < (Bounds == 3 ? 2 : 1); ++b) {
    const c10::IValue& v = arg(op, s, 1 + b);
    if (v.isNone()) continue;
    o.variant |= Bounds == 3 ? (1u << b) : Bounds;
    o.scalars.push_back(v.toScalar());
    state = at::native::update_result_type_state(v.toScalar(), state);
  }
  const at::ScalarType type = at::native::result_type(state);
  // No bounds, and an in-place clamp that would change self's dtype: torch raises.
  if (o.scalars.empty() || (F == Form::kInplace && type != self.scalar_type())) throw Declined{};
  at::Tensor out = out_arg<F>(op, s);
  const at::Tensor in = type == self.scalar_type() ? self : self.to(type);
  at::TensorIterator iter = at::TensorIterator::unary_op(out, in);
  launch_elementwise(iter, kClamp, o);
  finish_iter<F>(op, s, iter, out);
  return true;
}

// The backward ops autograd calls: (grad_output, self or output[, threshold]) -> grad_input
// (functional, or out= as grad_input). gelu_backward reads its approximation.
template <uint32_t Op, Form F>
bool backward(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  at::Tensor out = out_arg<F>(op, s);
  at::TensorIterator iter =
      make_binary(Kind::kBinary, out, arg(op, s, 0).toTensor(), arg(op, s, 1).toTensor());
  EwOptions o;
  if constexpr (Op == kThresholdBwd) {
    o.scalars.push_back(arg(op, s, 2).toScalar());
  } else {
    if (!at::isFloatingType(iter.common_dtype())) throw Declined{};
  }
  if constexpr (Op == kGeluBwd) {
    const std::string approximate = arg(op, s, 2).toStringRef();
    if (approximate != "none" && approximate != "tanh") throw Declined{};
    o.variant = approximate == "tanh" ? 1 : 0;
  }
  launch_elementwise(iter, Op, o);
  finish_iter<F>(op, s, iter, out);
  return true;
}

}  // namespace

// A copy of src into dst (TensorIterator's geometry: broadcasting, strides, any pair of the
// kernel's dtypes) on the elementwise kernel; throws kernels::Declined where it cannot
// (copy_kernels.cpp).
void elementwise_copy(const at::Tensor& dst, const at::Tensor& src) {
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
  launch_elementwise(iter, kCopy, o);
}

namespace {

// Registers the functional, in-place and out= forms of a binary op.
template <uint32_t Op, Kind K>
void register_binary(torch::Library& m, const std::string& name, const std::string& overload,
                     const std::string& out_overload) {
  const std::string f = name + "." + overload;
  const std::string i = name + "_." + overload;
  const std::string o = name + "." + out_overload;
  kernels::impl(m, f.c_str(), &binary<Op, Form::kFunctional, K>);
  kernels::impl(m, i.c_str(), &binary<Op, Form::kInplace, K>);
  kernels::impl(m, o.c_str(), &binary<Op, Form::kOut, K>);
}

template <uint32_t Op, bool Float, bool FloatOnly = false>
void register_unary(torch::Library& m, const std::string& name) {
  const std::string i = name + "_";
  const std::string o = name + ".out";
  kernels::impl(m, name.c_str(), &unary<Op, Form::kFunctional, Float, FloatOnly>);
  kernels::impl(m, i.c_str(), &unary<Op, Form::kInplace, Float, FloatOnly>);
  kernels::impl(m, o.c_str(), &unary<Op, Form::kOut, Float, FloatOnly>);
}

template <uint32_t Op>
void register_comparison(torch::Library& m, const std::string& name) {
  register_binary<Op, Kind::kCompare>(m, name, "Tensor", "Tensor_out");
  register_binary<Op, Kind::kCompare>(m, name, "Scalar", "Scalar_out");
}

template <int Bounds>
void register_clamp(torch::Library& m, const std::string& name) {
  const std::string i = name + "_";
  const std::string o = name + ".out";
  kernels::impl(m, name.c_str(), &clamp<Form::kFunctional, Bounds>);
  kernels::impl(m, i.c_str(), &clamp<Form::kInplace, Bounds>);
  kernels::impl(m, o.c_str(), &clamp<Form::kOut, Bounds>);
}

template <uint32_t Op>
void register_backward(torch::Library& m, const std::string& name) {
  const std::string o = name + ".grad_input";
  kernels::impl(m, name.c_str(), &backward<Op, Form::kFunctional>);
  kernels::impl(m, o.c_str(), &backward<Op, Form::kOut>);
}

void register_arithmetic(torch::Library& m) {
  using F = Form;
  kernels::impl(m, "add.Tensor", &binary_alpha<kAdd, F::kFunctional>);
  kernels::impl(m, "add_.Tensor", &binary_alpha<kAdd, F::kInplace>);
  kernels::impl(m, "add.out", &binary_alpha<kAdd, F::kOut>);
  kernels::impl(m, "sub.Tensor", &binary_alpha<kSub, F::kFunctional>);
  kernels::impl(m, "sub_.Tensor", &binary_alpha<kSub, F::kInplace>);
  kernels::impl(m, "sub.out", &binary_alpha<kSub, F::kOut>);
  register_binary<kMul, Kind::kBinary>(m, "mul", "Tensor", "out");
  register_binary<kDiv, Kind::kFloat>(m, "div", "Tensor", "out");
  kernels::impl(m, "div.Tensor_mode", &div_mode<F::kFunctional>);
  kernels::impl(m, "div_.Tensor_mode", &div_mode<F::kInplace>);
  kernels::impl(m, "div.out_mode", &div_mode<F::kOut>);
  kernels::impl(m, "floor_divide", &div_mode<F::kFunctional, true>);
  kernels::impl(m, "floor_divide_.Tensor", &div_mode<F::kInplace, true>);
  kernels::impl(m, "floor_divide.out", &div_mode<F::kOut, true>);
  kernels::impl(m, "pow.Tensor_Tensor", &binary<kPow, F::kFunctional, Kind::kBinary>);
  kernels::impl(m, "pow.Tensor_Scalar", &binary<kPow, F::kFunctional, Kind::kBinary>);
  kernels::impl(m, "pow.Scalar", &binary<kPow, F::kFunctional, Kind::kBinary>);
  kernels::impl(m, "pow_.Tensor", &binary<kPow, F::kInplace, Kind::kBinary>);
  kernels::impl(m, "pow_.Scalar", &binary<kPow, F::kInplace, Kind::kBinary>);
  kernels::impl(m, "pow.Tensor_Tensor_out", &binary<kPow, F::kOut, Kind::kBinary>);
  kernels::impl(m, "pow.Tensor_Scalar_out", &binary<kPow, F::kOut, Kind::kBinary>);
  kernels::impl(m, "pow.Scalar_out", &binary<kPow, F::kOut, Kind::kBinary>);
  kernels::impl(m, "maximum", &binary<kMaximum, F::kFunctional, Kind::kBinary>);
  kernels::impl(m, "maximum.out", &binary<kMaximum, F::kOut, Kind::kBinary>);
  kernels::impl(m, "minimum", &binary<kMinimum, F::kFunctional, Kind::kBinary>);
  kernels::impl(m, "minimum.out", &binary<kMinimum, F::kOut, Kind::kBinary>);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_arithmetic(m);
  register_unary<kNeg, false>(m, "neg");
  register_unary<kAbs, false>(m, "abs");
  register_unary<kRelu, false>(m, "relu");
  register_unary<kExp, true>(m, "exp");
  register_unary<kLog, true>(m, "log");
  register_unary<kSqrt, true>(m, "sqrt");
  register_unary<kRsqrt, true>(m, "rsqrt");
  register_unary<kReciprocal, true>(m, "reciprocal");
  register_unary<kTanh, true>(m, "tanh");
  register_unary<kSigmoid, true>(m, "sigmoid");
  register_unary<kSin, true>(m, "sin");
  register_unary<kCos, true>(m, "cos");
  register_unary<kGelu, false, true>(m, "gelu");
  register_unary<kSilu, false, true>(m, "silu");
  kernels::impl(m, "logical_not", &logical_not<Form::kFunctional>);
  kernels::impl(m, "logical_not_", &logical_not<Form::kInplace>);
  kernels::impl(m, "logical_not.out", &logical_not<Form::kOut>);
  kernels::impl(m, "where.self", &where<Form::kFunctional>);
  kernels::impl(m, "where.self_out", &where<Form::kOut>);
  kernels::impl(m, "masked_fill_.Scalar", &masked_fill);
  kernels::impl(m, "masked_fill_.Tensor", &masked_fill);
  register_comparison<kEq>(m, "eq");
  register_comparison<kNe>(m, "ne");
  register_comparison<kLt>(m, "lt");
  register_comparison<kLe>(m, "le");
  register_comparison<kGt>(m, "gt");
  register_comparison<kGe>(m, "ge");
  register_clamp<3>(m, "clamp");
  register_clamp<1>(m, "clamp_min");
  register_clamp<2>(m, "clamp_max");
  register_backward<kThresholdBwd>(m, "threshold_backward");
  register_backward<kGeluBwd>(m, "gelu_backward");
  register_backward<kSiluBwd>(m, "silu_backward");
  register_backward<kSigmoidBwd>(m, "sigmoid_backward");
  register_backward<kTanhBwd>(m, "tanh_backward");
}

}  // namespace mpsrt::torch_glue
