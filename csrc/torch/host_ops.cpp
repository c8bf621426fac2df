// Typed host kernels (host_ops.h). A boxed kernel gets its arguments copied into IValues, and
// copying a tensor that Python holds takes the GIL (torch keeps the Python object alive while
// C++ shares the tensor) when the copy is made and again when it is dropped; the fallback then
// looks at every argument through the schema and converts the returns generically. The typed
// kernel of an op borrows its arguments (const references), gives the CPU kernel CPU aliases of
// them (fast path: every mpsrt tensor host-visible memory of one device, no device kernel to
// run, and for in-place ops no other argument on self's storage, whose overlap the CPU kernel
// checks within one storage), and hands the new outputs over as the fallback does, under the
// same stream order, profiler interval and counts (HostRun). Anything else takes the boxed path
// (kernels::run_boxed: the device kernel or the fallback, staging discrete memory).
#include "host_ops.h"

#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/hardsigmoid_ops.h>
#include <ATen/ops/hardswish_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/native_batch_norm_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/roll_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/tanh_ops.h>

#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "fallback.h"
#include "host_access.h"
#include "kernels.h"

namespace mpsrt::torch_glue::host_ops {
namespace {

// What a call's arguments say: the device of its mpsrt tensors, and whether the fast path
// takes them (all host-visible memory of that one device).
struct HostScan {
  c10::DeviceIndex device = -1;
  bool fast = true;
  void operator()(const at::Tensor& t) {
    if (!fast || !is_mpsrt(t)) return;
    const c10::DeviceIndex d = t.device().index();
    if (device < 0) device = d;
    fast = d == device && host_visible(t.storage());
  }
  void operator()(const std::optional<at::Tensor>& t) {
    if (t) (*this)(*t);
  }
  template <class T>
  void operator()(const T& /*not a tensor*/) {}
};

// Whether t (an argument other than self) is on self's storage.
bool on_storage(const at::Tensor& self, const at::Tensor& t) {
  return is_mpsrt(t) && t.storage().is_alias_of(self.storage());
}
bool on_storage(const at::Tensor& self, const std::optional<at::Tensor>& t) {
  return t && on_storage(self, *t);
}
template <class T>
bool on_storage(const at::Tensor& /*self*/, const T& /*not a tensor*/) {
  return false;
}

// An argument's stand-in for the CPU kernel: mpsrt tensors become CPU aliases, the rest as is.
at::Tensor host_stand_in(const at::Tensor& t) {
  return is_mpsrt(t) ? cpu_alias(t) : t;
}
std::optional<at::Tensor> host_stand_in(const std::optional<at::Tensor>& t) {
  if (!t) return t;
  return host_stand_in(*t);
}
template <class T>
const T& host_stand_in(const T& v) {
  return v;
}

template <class R>
struct HostReturn;
template <>
struct HostReturn<at::Tensor> {
  static at::Tensor to_device(const at::Tensor& r, c10::DeviceIndex d) { return host_output(r, d); }
};
template <class... T>
struct HostReturn<std::tuple<T...>> {
  static std::tuple<T...> to_device(const std::tuple<T...>& r, c10::DeviceIndex d) {
    return std::apply([d](const auto&... t) { return std::tuple<T...>(host_output(t, d)...); }, r);
  }
};

template <class Op, class Sig = typename Op::schema>
struct Typed;

// Op's typed kernel: R is a new tensor (or tuple of them), or self (in-place ops).
template <class Op, class R, class... A>
struct Typed<Op, R(A...)> {
  static constexpr bool kInplace = std::is_same_v<R, at::Tensor&>;

  static const c10::OperatorHandle& op() {
    static const c10::OperatorHandle h =
        c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    return h;
  }

  static bool device_kernel() {
    static const bool k = kernels::has_kernel(op());
    return k;
  }

  static R call(A... a) {
    HostScan scan;
    (scan(a), ...);
    if (scan.fast && scan.device >= 0 && device_kernel())
      scan.fast = !kernels::enabled(scan.device);
    if constexpr (kInplace) {
      const at::Tensor& self = std::get<0>(std::forward_as_tuple(a...));
      bool shared = false;
      ((shared = shared || (static_cast<const void*>(&self) != &a && on_storage(self, a))), ...);
      scan.fast = scan.fast && !shared;
    }
    if (!scan.fast || scan.device < 0) return boxed(a...);
    auto stand_ins = std::tuple<decltype(host_stand_in(a))...>(host_stand_in(a)...);
    HostRun run(scan.device);
    if constexpr (kInplace) {
      std::apply(
          [](auto&... s) { Op::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), s...); },
          stand_ins);
      run.done(op());
      return std::get<0>(std::forward_as_tuple(a...));
    } else {
      R r = std::apply(
          [](auto&... s) {
            return Op::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), s...);
          },
          stand_ins);
      run.done(op());
      return HostReturn<R>::to_device(r, scan.device);
    }
  }

  // The boxed path: the op's device kernel or the fallback.
  static R boxed(A... a) {
    torch::jit::Stack s = c10::impl::boxArgs<A...>(a...);
    kernels::run_boxed(op(), &s);
    if constexpr (kInplace) {
      return std::get<0>(std::forward_as_tuple(a...));
    } else {
      return c10::impl::PopResult<R>::call(s);
    }
  }
};

template <class Op>
torch::CppFunction typed() {
  return torch::CppFunction(TORCH_FN(Typed<Op>::call));
}

// The ops with a typed kernel, by name as kernels::impl registers them.
struct TypedOp {
  const char* name;
  torch::CppFunction (*make)();
};
constexpr TypedOp kTypedOps[] = {
    {"addmm", &typed<at::_ops::addmm>},
    {"mm", &typed<at::_ops::mm>},
    {"bmm", &typed<at::_ops::bmm>},
    {"add.Tensor", &typed<at::_ops::add_Tensor>},
    {"add_.Tensor", &typed<at::_ops::add__Tensor>},
    {"sub.Tensor", &typed<at::_ops::sub_Tensor>},
    {"mul.Tensor", &typed<at::_ops::mul_Tensor>},
    {"mul_.Tensor", &typed<at::_ops::mul__Tensor>},
    {"div.Tensor", &typed<at::_ops::div_Tensor>},
    {"relu", &typed<at::_ops::relu>},
    {"relu_", &typed<at::_ops::relu_>},
    {"tanh", &typed<at::_ops::tanh>},
    {"sigmoid", &typed<at::_ops::sigmoid>},
    {"silu", &typed<at::_ops::silu>},
    {"pow.Tensor_Scalar", &typed<at::_ops::pow_Tensor_Scalar>},
    {"gelu", &typed<at::_ops::gelu>},
    {"_softmax", &typed<at::_ops::_softmax>},
    {"native_layer_norm", &typed<at::_ops::native_layer_norm>},
    {"mean.dim", &typed<at::_ops::mean_dim>},
};

}  // namespace

std::optional<torch::CppFunction> typed_kernel(const char* name) {
  for (const TypedOp& t : kTypedOps)
    if (std::strcmp(t.name, name) == 0) return t.make();
  return std::nullopt;
}

// Hot ops that have no device kernel and no composite kernel (which the device would run instead
// of the fallback): typed here, their boxed path the fallback.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("hardswish", typed<at::_ops::hardswish>());
  m.impl("hardswish_", typed<at::_ops::hardswish_>());
  m.impl("hardsigmoid", typed<at::_ops::hardsigmoid>());
  m.impl("native_batch_norm", typed<at::_ops::native_batch_norm>());
  m.impl("roll", typed<at::_ops::roll>());
}

}  // namespace mpsrt::torch_glue::host_ops
