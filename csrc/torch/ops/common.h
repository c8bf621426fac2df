// What the op families share (ops/<family>.cpp): the forms of an op (functional, in place, out=)
// made from one core function, narrowing to the kernels' 32-bit fields, the dtype acceptors,
// and the launch layer and registration (launch.h, register.h).
//
// Each family keeps its own names in its own namespace (mpsrt::torch_glue::ops::<family>), so
// that the families compile alike one by one (the CMake target) and together (the one
// translation unit `import mpsrt.torch` builds).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/Scalar.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "ops/launch.h"
#include "ops/register.h"

namespace mpsrt::torch_glue::ops {

// ------------------------------------------------------------------ forms
// An op's three forms from one core: Core::run(at::Tensor& out, inputs...) -> Maybe<at::Tensor>
// computes into `out` (undefined: a new tensor, the core's choice of geometry) and returns the
// result. The functional form passes an undefined out; the in-place form self as out and as the
// first input; the out= form its last argument (torch's out= forms take `out` last).
//
// A core that computed into a defined `out` may answer in_out() (done, the result is `out`)
// instead of a copy of `out`: copying a tensor that Python holds costs a reference count round
// trip on its Python object, under the GIL, on every call of the in-place and out= forms.
inline std::optional<at::Tensor> in_out() {
  return at::Tensor();
}

template <class Core>
struct Functional {
  template <class... A>
  static std::optional<at::Tensor> run(const A&... a) {
    at::Tensor out;
    std::optional<at::Tensor> r = Core::run(out, a...);
    if (r && !r->defined()) r = std::move(out);
    return r;
  }
};

template <class Core>
struct Inplace {
  template <class... A>
  static at::Tensor* run(at::Tensor& self, const A&... a) {
    return Core::run(self, self, a...) ? &self : nullptr;
  }
};

template <class Core>
struct Out {
  template <class... A>
  static at::Tensor* run(A&&... a) {
    return call(std::forward_as_tuple(a...), std::make_index_sequence<sizeof...(A) - 1>{});
  }

 private:
  template <class T, size_t... I>
  static at::Tensor* call(T&& a, std::index_sequence<I...>) {
    at::Tensor& out = std::get<sizeof...(I)>(a);
    return Core::run(out, std::get<I>(a)...) ? &out : nullptr;
  }
};

// ------------------------------------------------------------------ narrowing
// v as a T where it fits (the kernels' sizes, strides and counts are 32-bit), else nothing:
// an op whose geometry does not fit declines.
template <class T, class V>
std::optional<T> narrow(V v) {
  static_assert(std::is_integral_v<T> && std::is_integral_v<V>, "integers only");
  if constexpr (std::is_signed_v<V>) {
    if (v < 0 && (std::is_unsigned_v<T> || v < static_cast<V>(std::numeric_limits<T>::min()))) {
      return std::nullopt;
    }
  }
  if (v > 0 && static_cast<std::make_unsigned_t<V>>(v) > std::numeric_limits<T>::max()) {
    return std::nullopt;
  }
  return static_cast<T>(v);
}

// Whether every value fits a T (the kernels index with 32 bits).
template <class T, class... V>
bool fits(V... v) {
  return (narrow<T>(v).has_value() && ...);
}

// ------------------------------------------------------------------ dtypes
// The float dtypes the kernels compute (in float32 math).
// Whether a composite op's entry above autograd (batch norm's, attention's: registered for
// AutogradPrivateUse1) may run the kernels itself for a call with these operands (undefined ones
// skipped): autograd has no work (no gradient to record, grad mode off or none required; no
// forward-mode gradient to carry), and nothing below autograd would see the ops (no Python
// dispatch: no TorchDispatchMode active, no tensor subclass or fake tensor among them).
inline bool direct_call(std::initializer_list<const at::Tensor*> ts) {
  if (c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Python)) return false;
  const bool grad = at::GradMode::is_enabled();
  for (const at::Tensor* t : ts) {
    if (!t->defined()) continue;
    if (t->key_set().has(c10::DispatchKey::Python)) return false;
    if ((grad && t->requires_grad()) || t->_fw_grad(0).defined()) return false;
  }
  return true;
}

inline bool is_float(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

// mpsrt/dtype.h's id of t's dtype for a kernel's dtype constant; -1 where mpsrt has none.
inline uint32_t dt(const at::Tensor& t) {
  return static_cast<uint32_t>(dtype_id(t.scalar_type()));
}

// The unsigned integer dtype of t's width (mpsrt/dtype.h's id), for copies that move bits;
// -1 for widths no kernel dtype has (complex128).
inline int64_t bits_dtype(at::ScalarType t) {
  switch (c10::elementSize(t)) {
    case 1:
      return MPSRT_DTYPE_UINT8;
    case 2:
      return MPSRT_DTYPE_UINT16;
    case 4:
      return MPSRT_DTYPE_UINT32;
    case 8:
      return MPSRT_DTYPE_UINT64;
    default:
      return -1;
  }
}

// A Scalar argument as a wrapped-number tensor (as torch's .Scalar overloads), a tensor as is.
at::Tensor as_tensor(const at::Tensor& t);
at::Tensor as_tensor(const c10::Scalar& s);

}  // namespace mpsrt::torch_glue::ops
