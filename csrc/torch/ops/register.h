// The one way an operator of the mpsrt device is registered (ops::reg), and what runs it.
//
// An op's kernel is a typed C++ function with the op's own signature (what at::_ops::<op>::schema
// says: `const at::Tensor& self, int64_t dim, ...`; a SymInt or SymInt[] argument comes as its
// concrete int64_t / IntArrayRef) that returns a Maybe of the op's result: the
// result where it ran on mpsrt's kernels, or nothing where it declines (a dtype, rank or span
// its kernel does not take), decided before it launches anything. The entry that reg() registers
// for the op then picks, per call:
//   1. the kernel, where the device of the call's first mpsrt tensor runs device kernels
//      (launch.h: enabled) and the kernel does not decline;
//   2. the host path (HostPath::kTyped), where every mpsrt tensor argument is host-visible memory
//      of one device: the CPU kernel on aliases of them, with its arguments borrowed as they came
//      (no boxing: a boxed call copies each argument into an IValue, and copying a tensor that
//      Python holds takes the GIL twice);
//   3. the boxed fallback (fallback/fallback.h), which also stages discrete memory.
// A "kernel" that never declines (it returns the op's result type itself: storage, copies,
// random fills) is registered the same way and always runs.
//
// How the entry reaches torch: ops on the typed host path and kernels that never decline are
// typed (unboxed) functions; every other op's entry is boxed, as torch calls an op that only a
// device kernel or the fallback runs: it takes the kernel's typed arguments from the stack
// (torch's own unboxing) and, where the kernel declines, hands the stack to the fallback as it
// came. One unboxed entry per op would cost the first `import mpsrt.torch` a third more build
// time (torch infers a schema and makes a boxed wrapper for each) for no call that needs it.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/boxing/impl/make_boxed_from_unboxed_functor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "device/host_access.h"
#include "fallback/fallback.h"
#include "ops/launch.h"

namespace mpsrt::torch_glue::ops {

// What a kernel of an op returning R returns: std::optional<R> (nullopt declines); for ops that
// return an argument by reference (in-place and out= forms), a pointer to it (nullptr declines);
// for ops that return nothing, whether it ran.
template <class R>
struct MaybeOf {
  using type = std::optional<R>;
};
template <>
struct MaybeOf<at::Tensor&> {
  using type = at::Tensor*;
};
template <>
struct MaybeOf<const at::Tensor&> {
  using type = const at::Tensor*;
};
template <>
struct MaybeOf<void> {
  using type = bool;
};
template <class R>
using Maybe = typename MaybeOf<R>::type;

// Where the op goes when no device kernel runs it: the boxed fallback, or first the typed host
// path (the ops models call most; see above).
enum class HostPath { kBoxed, kTyped };

// The ops registered with a device kernel ("aten::add.Tensor"), sorted (torch.mpsrt's op table).
std::vector<std::string> kernel_ops();

namespace detail {

// What a call's arguments say: the device of its first mpsrt tensor; `host` stays true while the
// typed host path may take them (every mpsrt tensor on that device). Whether their memory is
// host-visible too (the host path's other condition) is asked only when no kernel ran (Visible
// below): a kernel's launch does not pay for it.
// `cpu` says whether a CPU tensor with dims (not a CPU scalar, which torch's element-wise ops
// take beside any device's tensors) is among the tensor and tensor-list arguments; a list of
// optional tensors (index's indices, which may be CPU tensors) does not count.
struct Scan {
  c10::DeviceIndex device = -1;
  bool host = true;
  bool cpu = false;
  void tensor(const at::Tensor& t) {
    if (!t.defined()) return;
    if (!is_mpsrt(t)) {
      cpu = cpu || (t.is_cpu() && t.dim() > 0);
      return;
    }
    device_of(t);
  }
  void device_of(const at::Tensor& t) {
    const c10::DeviceIndex d = t.device().index();
    if (device < 0) device = d;
    host = host && d == device;
  }
  void operator()(const at::Tensor& t) { tensor(t); }
  void operator()(const std::optional<at::Tensor>& t) {
    if (t) tensor(*t);
  }
  void operator()(at::TensorList l) {
    for (const at::Tensor& t : l) tensor(t);
  }
  void operator()(const at::ITensorListRef& l) {
    for (const at::Tensor& t : l) tensor(t);
  }
  void operator()(const c10::List<std::optional<at::Tensor>>& l) {
    for (const std::optional<at::Tensor> t : l)
      if (t && t->defined() && is_mpsrt(*t)) device_of(*t);
  }
  template <class T>
  void operator()(const T& /*not a tensor*/) {}
};

// Whether an argument's mpsrt memory is host-visible.
inline bool visible(const at::Tensor& t) {
  return !t.defined() || !is_mpsrt(t) || host_visible(t.storage());
}
inline bool visible(const std::optional<at::Tensor>& t) {
  return !t || visible(*t);
}
template <class List>
bool all_visible(const List& l) {
  for (const at::Tensor& t : l)
    if (!visible(t)) return false;
  return true;
}
inline bool visible(const at::ITensorListRef& l) {
  return all_visible(l);
}
inline bool visible(at::TensorList l) {
  return all_visible(l);
}
inline bool visible(const c10::List<std::optional<at::Tensor>>& l) {
  for (const std::optional<at::Tensor> t : l)
    if (!visible(t)) return false;
  return true;
}
template <class T>
bool visible(const T& /*not a tensor*/) {
  return true;
}

// Whether t, an argument other than self, is on self's storage (the CPU kernel of an in-place op
// checks overlaps only within one storage object, and an alias is another one).
inline bool on_storage(const at::Tensor& self, const at::Tensor& t) {
  return t.defined() && is_mpsrt(t) && t.storage().is_alias_of(self.storage());
}
inline bool on_storage(const at::Tensor& self, const std::optional<at::Tensor>& t) {
  return t && on_storage(self, *t);
}
inline bool on_storage(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& l) {
  for (const std::optional<at::Tensor> t : l)
    if (on_storage(self, t)) return true;
  return false;
}
template <class T>
bool on_storage(const at::Tensor& /*self*/, const T& /*not a tensor*/) {
  return false;
}

// An argument's stand-in for the CPU kernel: an mpsrt tensor's kept one (kept_stand_in) or a
// new CPU alias, the rest as is (a tensor borrowed).
inline c10::MaybeOwned<at::Tensor> stand_in(const at::Tensor& t, uint64_t generation) {
  if (t.defined() && is_mpsrt(t)) return kept_stand_in(t, generation);
  return c10::MaybeOwned<at::Tensor>::borrowed(t);
}
inline std::optional<at::Tensor> stand_in(const std::optional<at::Tensor>& t, uint64_t generation) {
  if (!t) return t;
  return *stand_in(*t, generation);
}
// A list's stand-ins (owned: a list is made per call).
struct ListStandIn {
  std::vector<at::Tensor> tensors;
};
template <class List>
ListStandIn list_stand_in(const List& l, uint64_t generation) {
  ListStandIn out;
  for (const at::Tensor& t : l) out.tensors.push_back(*stand_in(t, generation));
  return out;
}
inline ListStandIn stand_in(const at::ITensorListRef& l, uint64_t generation) {
  return list_stand_in(l, generation);
}
inline ListStandIn stand_in(at::TensorList l, uint64_t generation) {
  return list_stand_in(l, generation);
}
// A list of optional tensors (index's indices): a new list of their stand-ins.
inline c10::List<std::optional<at::Tensor>> stand_in(const c10::List<std::optional<at::Tensor>>& l,
                                                     uint64_t generation) {
  c10::List<std::optional<at::Tensor>> out;
  out.reserve(l.size());
  for (const std::optional<at::Tensor> t : l) out.push_back(stand_in(t, generation));
  return out;
}
template <class T>
const T& stand_in(const T& v, uint64_t /*generation*/) {
  return v;
}

// What the CPU kernel is given for a stand-in: the tensor (an in-place op's self as the mutable
// reference its kernel takes: the kernel writes its elements, never the handle), else as is.
inline at::Tensor& given(c10::MaybeOwned<at::Tensor>& t) {
  return const_cast<at::Tensor&>(*t);
}
// A list's: a reference to its stand-ins, which the call's list argument converts from.
inline const std::vector<at::Tensor>& given(ListStandIn& l) {
  return l.tensors;
}
template <class T>
T& given(T& v) {
  return v;
}

template <class R>
struct Returns {
  static R to_device(const R& r, c10::DeviceIndex d) { return host_output(r, d); }
};
template <class... T>
struct Returns<std::tuple<T...>> {
  static std::tuple<T...> to_device(const std::tuple<T...>& r, c10::DeviceIndex d) {
    return std::apply([d](const auto&... t) { return std::tuple<T...>(host_output(t, d)...); }, r);
  }
};

// What a kernel is given for a symbolic-int argument of the schema (SymInt, SymInt[]): its
// concrete value (mpsrt runs real tensors: never symbolic there). Other arguments as they come.
inline c10::IntArrayRef concrete(c10::SymIntArrayRef a) {
  return C10_AS_INTARRAYREF_SLOW(a);
}
inline int64_t concrete(const c10::SymInt& a) {
  return a.expect_int();
}
inline std::optional<int64_t> concrete(const std::optional<c10::SymInt>& a) {
  if (!a) return std::nullopt;
  return a->expect_int();
}
inline at::OptionalIntArrayRef concrete(const at::OptionalSymIntArrayRef& a) {
  if (!a) return std::nullopt;
  return C10_AS_INTARRAYREF_SLOW(*a);
}
template <class T>
struct Symbolic : std::false_type {};
template <>
struct Symbolic<c10::SymIntArrayRef> : std::true_type {};
template <>
struct Symbolic<c10::SymInt> : std::true_type {};
template <>
struct Symbolic<std::optional<c10::SymInt>> : std::true_type {};
template <>
struct Symbolic<at::OptionalSymIntArrayRef> : std::true_type {};
template <class T, std::enable_if_t<!Symbolic<std::remove_const_t<T>>::value, int> = 0>
T& concrete(T& a) {
  return a;
}

// The argument a reference-returning op returns: its first non-const tensor reference (self of
// an in-place op, out of an out= op).
template <class First, class... Rest>
at::Tensor& mutable_arg(First&& first, Rest&&... rest) {
  if constexpr (std::is_same_v<First, at::Tensor&>) {
    return first;
  } else {
    static_assert(sizeof...(Rest) > 0, "a reference-returning op has a mutable tensor argument");
    return mutable_arg(std::forward<Rest>(rest)...);
  }
}

// A kernel given as a function (its address) or as a type with a static run().
template <auto F>
struct Fn {
  template <class... A>
  static decltype(auto) run(A&&... a) {
    return F(std::forward<A>(a)...);
  }
};
// No device kernel: the op takes the host path or the fallback only.
struct NoKernel {};

// Whether K returns the op's result itself (it never declines) rather than a Maybe of it.
template <class K, class R, class... A>
constexpr bool always() {
  if constexpr (std::is_same_v<K, NoKernel>) {
    return false;
  } else {
    using Got = decltype(K::run(concrete(std::declval<A&>())...));
    static_assert(std::is_same_v<Got, R> || std::is_same_v<Got, Maybe<R>>,
                  "a kernel returns the op's result, or a Maybe of it where it can decline");
    return std::is_same_v<Got, R>;
  }
}

// Whether R is a tuple of references (an op with several out= arguments returns them).
template <class R>
struct RefTuple : std::false_type {};
template <class... T>
struct RefTuple<std::tuple<T...>> : std::bool_constant<(std::is_reference_v<T> && ...)> {};

// The last tuple_size<R> arguments as an R (the out= arguments, which torch's out= forms take
// last).
template <class R, class Args, size_t... I>
R last_args(Args&& args, std::index_sequence<I...>) {
  constexpr size_t first = std::tuple_size_v<std::decay_t<Args>> - sizeof...(I);
  return R(std::get<first + I>(args)...);
}

// Ops that take CPU tensors beside the device's by design, as torch.cuda's do (a packed
// sequence's batch sizes); specialized where they are registered. Every other op given a CPU
// tensor with dims raises torch's error for tensors on two devices (same_device_error), as its
// CUDA kernel would, rather than running its CPU kernel on both.
template <class Op>
struct TakesCpuTensors : std::false_type {};

[[noreturn]] void same_device_error(c10::DeviceIndex d);

template <class Op, class K, HostPath P, class Sig = typename Op::schema>
struct Entry;

template <class Op, class K, HostPath P, class R, class... A>
struct Entry<Op, K, P, R(A...)> {
  static constexpr bool kRefReturn = std::is_reference_v<R>;
  static constexpr bool kAlways = always<K, R, A...>();

  static const c10::OperatorHandle& handle() {
    static const c10::OperatorHandle h =
        c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    return h;
  }

  static R call(A... a) {
    if constexpr (kAlways) {
      return K::run(concrete(a)...);
    } else {
      Scan scan;
      (scan(a), ...);
      if (scan.device < 0) return boxed(a...);
      if (C10_UNLIKELY(scan.cpu) && !TakesCpuTensors<Op>::value) same_device_error(scan.device);
      const DeviceMode mode = device_mode(scan.device);
      if constexpr (!std::is_same_v<K, NoKernel>) {
        if (mode.kernels) {
          if (auto r = K::run(concrete(a)...)) return take(std::move(r));
          return boxed(a...);
        }
      }
      if constexpr (P == HostPath::kTyped) {
        if (scan.host && (mode.unified || (visible(a) && ...)) && !self_shared(a...)) {
          return host(scan.device, mode.generation, a...);
        }
      }
      return boxed(a...);
    }
  }

 private:
  template <class G>
  static R take(G&& r) {
    if constexpr (std::is_void_v<R>) {
      return;
    } else if constexpr (std::is_reference_v<R>) {
      return *r;
    } else {
      return std::move(*r);  // no reference count round trip
    }
  }

  // An op writing an argument (self of an in-place op, out of an out= one) that other
  // arguments share the storage of takes the fallback.
  static bool self_shared(A... a) {
    if constexpr (!kRefReturn || sizeof...(A) == 0) {
      return false;
    } else {
      const at::Tensor& self = mutable_arg(std::forward<A>(a)...);
      bool shared = false;
      ((shared = shared || (static_cast<const void*>(&self) != &a && on_storage(self, a))), ...);
      return shared;
    }
  }

  // The op's entry among the fallback's counts, found once.
  static OpCount& count() {
    static OpCount& c = op_count_of(handle());
    return c;
  }

  static R host(c10::DeviceIndex d, uint64_t generation, A... a) {
    auto stand_ins = std::tuple<decltype(stand_in(a, generation))...>(stand_in(a, generation)...);
    HostRun run(d);
    const auto cpu = [](auto&... s) -> decltype(auto) {  // a reference stays one
      return Op::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), given(s)...);
    };
    if constexpr (kRefReturn) {
      std::apply(cpu, stand_ins);
      run.done(handle(), count());
      return mutable_arg(std::forward<A>(a)...);
    } else {
      R r = std::apply(cpu, stand_ins);
      run.done(handle(), count());
      return Returns<R>::to_device(r, d);
    }
  }

  static R boxed(A... a) {
    torch::jit::Stack s = c10::impl::boxArgs<A...>(a...);
    cpu_fallback(handle(), &s);
    if constexpr (kRefReturn) {
      return mutable_arg(std::forward<A>(a)...);
    } else if constexpr (RefTuple<R>::value) {
      return last_args<R>(std::forward_as_tuple(a...),
                          std::make_index_sequence<std::tuple_size_v<R>>{});
    } else if constexpr (std::is_void_v<R>) {
      return;
    } else {
      return c10::impl::PopResult<R>::call(s);
    }
  }
};

// The type a kernel takes for a schema argument of type T (concrete() above).
template <class T>
struct ConcreteOf {
  using type = T;
};
template <>
struct ConcreteOf<c10::SymIntArrayRef> {
  using type = c10::IntArrayRef;
};
template <>
struct ConcreteOf<c10::SymInt> {
  using type = int64_t;
};
template <>
struct ConcreteOf<std::optional<c10::SymInt>> {
  using type = std::optional<int64_t>;
};
template <>
struct ConcreteOf<at::OptionalSymIntArrayRef> {
  using type = at::OptionalIntArrayRef;
};

// The device of the first mpsrt tensor among the stack's arguments of op (also inside tensor
// lists), or -1.
c10::DeviceIndex stack_device(const c10::OperatorHandle& op, const torch::jit::Stack& s);

// The kernel as a functor torch can call with arguments taken from a stack.
template <class K, class R, class... A>
struct StackKernel final : c10::OperatorKernel {
  Maybe<R> operator()(typename ConcreteOf<A>::type... a) { return K::run(a...); }
};

// The boxed entry of an op whose kernel may decline (see the top of this file).
template <class Op, class K, class Sig = typename Op::schema>
struct BoxedEntry;

template <class Op, class K, class R, class... A>
struct BoxedEntry<Op, K, R(A...)> {
  using Functor = StackKernel<K, R, A...>;

  static void call(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* s) {
    const c10::DeviceIndex d = stack_device(op, *s);
    if (d >= 0 && enabled(d)) {
      // The kernel takes its arguments from a copy of them (torch's unboxing moves values out
      // of the stack), so that the fallback finds them as they came where it declines.
      torch::jit::Stack args(s->end() - sizeof...(A), s->end());
      Functor f;
      Maybe<R> r = c10::impl::call_functor_with_args_from_stack<Functor, false>(&f, ks, &args);
      if (r) return finish(std::move(r), s);
    }
    cpu_fallback(op, s);
  }

 private:
  // The arguments replaced by the result (a returned argument copied out first: it lives on
  // the stack).
  static void finish(Maybe<R> r, torch::jit::Stack* s) {
    constexpr size_t n = sizeof...(A);
    if constexpr (std::is_void_v<R>) {
      torch::jit::drop(*s, n);
    } else if constexpr (std::is_reference_v<R>) {
      at::Tensor out = *r;
      torch::jit::drop(*s, n);
      s->emplace_back(std::move(out));
    } else if constexpr (RefTuple<R>::value) {
      auto out = std::apply([](const auto&... t) { return std::make_tuple(at::Tensor(t)...); }, *r);
      torch::jit::drop(*s, n);
      c10::impl::push_outputs<decltype(out), false>::call(std::move(out), s);
    } else {
      R out = std::move(*r);
      torch::jit::drop(*s, n);
      c10::impl::push_outputs<R, false>::call(std::move(out), s);
    }
  }
};

// Records op as having a device kernel (kernel_ops()).
void note_kernel(const char* name, const char* overload);

template <class Op, class K, HostPath P>
void reg_entry(torch::Library& m) {
  std::string name = Op::name;
  name = name.substr(name.find("::") + 2);
  if (Op::overload_name[0] != '\0') name += std::string(".") + Op::overload_name;
  if constexpr (!std::is_same_v<K, NoKernel> && !Entry<Op, K, P>::kAlways) {
    note_kernel(Op::name, Op::overload_name);
  }
  if constexpr (P == HostPath::kTyped || Entry<Op, K, P>::kAlways) {
    m.impl(name.c_str(), torch::CppFunction(TORCH_FN((&Entry<Op, K, P>::call))));
  } else if constexpr (std::is_same_v<K, NoKernel>) {
    m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
  } else {
    m.impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&BoxedEntry<Op, K>::call>());
  }
}

}  // namespace detail

using detail::NoKernel;

// Registers aten op Op (at::_ops::<op>) for the mpsrt device with kernel K: a function (reg<Op,
// &f>) or a type with a static run() (reg<Op, Forms::...>), or NoKernel.
template <class Op, auto K, HostPath P = HostPath::kBoxed>
void reg(torch::Library& m) {
  detail::reg_entry<Op, detail::Fn<K>, P>(m);
}
template <class Op, class K, HostPath P = HostPath::kBoxed>
void reg(torch::Library& m) {
  detail::reg_entry<Op, K, P>(m);
}

// An op whose kernel never declines (it takes its own CPU path where the device runs no
// kernels or a call does not fit them: the convolutions, the fused attention pair) and launches
// mpsrt's kernels where the device runs them: registered as reg() does, and listed among the
// ops with kernels (kernel_ops(): torch.mpsrt.kernel_ops(), the op table).
template <class Op, auto K>
void reg_listed(torch::Library& m) {
  detail::note_kernel(Op::name, Op::overload_name);
  reg<Op, K>(m);
}

}  // namespace mpsrt::torch_glue::ops
