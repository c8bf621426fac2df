// Element-wise operators on mpsrt's elementwise kernel (csrc/kernels/elementwise.comp): torch's
// TensorIterator decides the output's shape, dtype and memory layout, broadcasting and type
// promotion, and coalesces dims; the kernel reads each operand in its own dtype and strides.
#include <ATen/TensorIterator.h>
#include <torch/library.h>

#include "host_access.h"
#include "kernels.h"

namespace mpsrt::torch_glue {
namespace {

using kernels::arg;
using kernels::Declined;
using kernels::finish;
using kernels::Launch;

// elementwise.comp's ops.
enum EwOp : uint32_t { kCopy = 0, kAdd = 1, kSub = 2, kMul = 3, kDiv = 4, kNeg = 5, kRelu = 6 };

struct EwParams {
  float alpha = 1.0f;
  float p0 = 0.0f;
  float p1 = 0.0f;
};

// Runs op over the iterator's operands (output first). Declines ranks over 4 after
// coalescing, more than 3 inputs, and dtypes mpsrt has no id for.
void launch_elementwise(at::TensorIteratorBase& iter, uint32_t op, const EwParams& p = {}) {
  if (iter.numel() == 0) return;
  const int nt = iter.ntensors();
  if (iter.ndim() > 4 || nt > 4 || iter.noutputs() != 1) throw Declined{};
  const c10::DeviceIndex d = iter.tensor(0).device().index();
  Launch l("elementwise", d);
  int32_t strides[16] = {};
  uint32_t dts[4] = {MPSRT_DTYPE_FLOAT32, MPSRT_DTYPE_FLOAT32, MPSRT_DTYPE_FLOAT32,
                     MPSRT_DTYPE_FLOAT32};
  uint32_t scalars = 0;
  const bool int_math = !at::isFloatingType(iter.common_dtype());
  for (int i = 0; i < nt; ++i) {
    const int id = kernels::dtype_id(iter.dtype(i));
    if (id < 0) throw Declined{};
    dts[i] = static_cast<uint32_t>(id);
    if (i > 0 && iter.is_cpu_scalar(i)) {
      scalars |= 1u << i;
      const c10::Scalar v = iter.tensor(i).item();
      if (int_math) {
        const int64_t x = v.toLong();
        std::memcpy(&strides[4 * i], &x, 8);
      } else {
        const float x = v.toFloat();
        std::memcpy(&strides[4 * i], &x, 4);
      }
      continue;
    }
    const int64_t es = static_cast<int64_t>(iter.element_size(i));
    for (int k = 0; k < iter.ndim(); ++k) {
      const int64_t s = iter.strides(i)[k] / es;
      if (s < 0 || s > INT32_MAX) throw Declined{};
      strides[4 * i + k] = static_cast<int32_t>(s);
    }
  }
  if (iter.numel() > INT32_MAX) throw Declined{};
  l.spec(op).spec(static_cast<uint32_t>(std::max<int>(iter.ndim(), 1)));
  for (uint32_t dt : dts) l.spec(dt);
  l.spec(static_cast<uint32_t>(iter.ninputs())).spec(int_math ? 1 : 0).spec(scalars);
  // Bindings 0..3: the operands; a scalar or absent operand binds the output (never read).
  for (int i = 0; i < 4; ++i) {
    const bool bound = i < nt && (i == 0 || !iter.is_cpu_scalar(i));
    const at::Tensor& t = bound ? iter.tensor(i) : iter.tensor(0);
    int64_t last = 0;
    for (int k = 0; k < iter.ndim(); ++k) {
      last += (iter.shape()[k] - 1) * (bound ? iter.strides(i)[k] : iter.strides(0)[k]);
    }
    const int64_t first = static_cast<const char*>(bound ? iter.data_ptr(i) : iter.data_ptr(0)) -
                          static_cast<const char*>(t.data_ptr());
    l.arg_bytes(t, first, static_cast<size_t>(last) + iter.element_size(bound ? i : 0), i == 0);
  }
  l.push(static_cast<uint32_t>(iter.numel()));
  uint32_t sizes[4] = {1, 1, 1, 1};
  for (int k = 0; k < iter.ndim(); ++k) sizes[k] = static_cast<uint32_t>(iter.shape()[k]);
  l.push(sizes).push(strides).push(p.alpha).push(p.p0).push(p.p1);
  l.grid(static_cast<uint64_t>(iter.numel()), 256).run();
}

// The three forms of a binary op: functional (self, other[, alpha]), in place (self_) and out=.
enum class Form { kFunctional, kInplace, kOut };

template <uint32_t Op, Form F, bool Alpha, bool FloatOp>
bool binary(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  const at::Tensor other = arg(op, s, 1).toTensor();
  EwParams p;
  if constexpr (Alpha) p.alpha = arg(op, s, 2).toScalar().toFloat();
  at::Tensor out;
  if constexpr (F == Form::kInplace) out = self;
  if constexpr (F == Form::kOut) out = arg(op, s, Alpha ? 3 : 2).toTensor();
  at::TensorIterator iter = FloatOp ? at::TensorIterator::binary_float_op(out, self, other)
                                    : at::TensorIterator::binary_op(out, self, other);
  launch_elementwise(iter, Op, p);
  finish(op, s, F == Form::kFunctional ? iter.output() : out);
  return true;
}

template <uint32_t Op, Form F>
bool unary(const c10::OperatorHandle& op, torch::jit::Stack& s) {
  const at::Tensor self = arg(op, s, 0).toTensor();
  at::Tensor out;
  if constexpr (F == Form::kInplace) out = self;
  if constexpr (F == Form::kOut) out = arg(op, s, 1).toTensor();
  at::TensorIterator iter = at::TensorIterator::unary_op(out, self);
  launch_elementwise(iter, Op);
  finish(op, s, F == Form::kFunctional ? iter.output() : out);
  return true;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using F = Form;
  kernels::impl(m, "add.Tensor", &binary<kAdd, F::kFunctional, true, false>);
  kernels::impl(m, "add_.Tensor", &binary<kAdd, F::kInplace, true, false>);
  kernels::impl(m, "add.out", &binary<kAdd, F::kOut, true, false>);
  kernels::impl(m, "sub.Tensor", &binary<kSub, F::kFunctional, true, false>);
  kernels::impl(m, "sub_.Tensor", &binary<kSub, F::kInplace, true, false>);
  kernels::impl(m, "sub.out", &binary<kSub, F::kOut, true, false>);
  kernels::impl(m, "mul.Tensor", &binary<kMul, F::kFunctional, false, false>);
  kernels::impl(m, "mul_.Tensor", &binary<kMul, F::kInplace, false, false>);
  kernels::impl(m, "mul.out", &binary<kMul, F::kOut, false, false>);
  kernels::impl(m, "div.Tensor", &binary<kDiv, F::kFunctional, false, true>);
  kernels::impl(m, "div_.Tensor", &binary<kDiv, F::kInplace, false, true>);
  kernels::impl(m, "div.out", &binary<kDiv, F::kOut, false, true>);
  kernels::impl(m, "neg", &unary<kNeg, F::kFunctional>);
  kernels::impl(m, "neg_", &unary<kNeg, F::kInplace>);
  kernels::impl(m, "neg.out", &unary<kNeg, F::kOut>);
  kernels::impl(m, "relu", &unary<kRelu, F::kFunctional>);
  kernels::impl(m, "relu_", &unary<kRelu, F::kInplace>);
}

}  // namespace mpsrt::torch_glue
