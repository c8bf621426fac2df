// Typed arguments of the mpsrt._C bindings: what each parameter takes, named once for the
// generated stubs, converted once for every binding that takes it.
//
// Each type is a nanobind type caster that accepts any object and keeps it; the binding then
// converts it with get(caller), which raises the TypeError or ValueError that names the calling
// function and what it expects (the messages API.md quotes). A caster that refused the object
// would make nanobind raise its own generic "incompatible function arguments" instead.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>

#include "mpsrt/event.h"
#include "mpsrt/generator.h"
#include "mpsrt/stream.h"
#include "python/bindings.h"

namespace mpsrt::python {

struct DType;
struct Shape;
class PyBuffer;

/// A device: an int index, a device string ('mps', 'mps:0', '<backend>:N'), a device context
/// (anything with an int `idx`) or a torch.device; None: the current device.
struct DeviceArg {
  nb::handle obj;
  int get(const char* caller) const { return device_arg(obj, caller); }
};

/// A shape: an int or a sequence (tuple or list) of ints, each >= 0.
struct ShapeArg {
  nb::handle obj;
  /// The shape; *count gets its number of elements. Errors name `caller`.
  Shape get(size_t* count, const char* caller) const;
};

/// A dtype: a name ('float32'), a numpy dtype or scalar type, a torch dtype or a Python type
/// (float, int, bool); None: `dflt`.
struct DTypeArg {
  nb::handle obj;
  const DType& get(const DType& dflt) const;
};

/// An mpsrt.Stream.
struct StreamArg {
  nb::handle obj;
  Stream get(const char* caller) const { return stream_of(obj, caller); }
};

/// An mpsrt.Stream or None.
struct OptStreamArg {
  nb::handle obj;
  bool is_none() const { return obj.is_none(); }
  Stream get(const char* caller) const { return stream_of(obj, caller); }
};

/// An mpsrt.Event (or None where OptEventArg).
struct EventArg {
  nb::handle obj;
  Event& get(const char* caller) const {
    return cast_or_type_error<Event>(obj, std::string(caller) + ": expected an mpsrt.Event");
  }
};
struct OptEventArg {
  nb::handle obj;
  bool is_none() const { return obj.is_none(); }
  Event& get(const char* caller) const {
    return cast_or_type_error<Event>(obj,
                                     std::string(caller) + ": expected an mpsrt.Event or None");
  }
};

/// An mpsrt.Generator or None (the default generator of `device`).
struct OptGeneratorArg {
  nb::handle obj;
  Generator get(int device, const char* caller) const {
    if (obj.is_none()) return Generator::default_generator(device);
    return cast_or_type_error<Generator>(
        obj, std::string(caller) + "(): generator must be an mpsrt.Generator or None");
  }
};

/// A real number (an int or a float; not a bool).
struct FloatArg {
  nb::handle obj;
  double get(const char* name, const char* caller) const;
};

/// An int (anything with __index__; not a bool), kept as a Python int: the range checks that
/// need more than 64 bits happen in the binding.
struct IntArg {
  nb::handle obj;
  nb::int_ get(const char* name, const char* caller) const;
};

/// A value to fill with: a bool, an int or a float.
struct ScalarArg {
  nb::handle obj;
};

/// A Buffer or host data to copy from: an mpsrt.Buffer or any buffer-protocol object of a
/// numeric dtype (a numpy array, bytes).
struct CopySourceArg {
  nb::handle obj;
};

/// A 44-byte generator state: bytes, bytearray, memoryview, a numpy uint8 array or a torch
/// ByteTensor.
struct RngStateArg {
  nb::handle obj;
};

/// A Buffer index: an int (a row) or a slice with step 1 (rows).
struct IndexArg {
  nb::handle obj;
};

}  // namespace mpsrt::python

namespace nanobind::detail {

/// The caster of an argument type above: keeps the object; `Stub` is its type in the stubs
/// (the arguments that may be None have None as their default, which adds "| None").
#define MPSRT_ARG_CASTER(Type, Stub)                                                          \
  template <>                                                                                 \
  struct type_caster<mpsrt::python::Type> {                                                   \
    NB_TYPE_CASTER(mpsrt::python::Type, const_name(Stub))                                     \
    bool from_python(handle src, uint8_t, cleanup_list*) noexcept {                           \
      value.obj = src;                                                                        \
      return true;                                                                            \
    }                                                                                         \
    static handle from_cpp(const mpsrt::python::Type& v, rv_policy, cleanup_list*) noexcept { \
      return v.obj.inc_ref();                                                                 \
    }                                                                                         \
  };

MPSRT_ARG_CASTER(DeviceArg, "int | str")
MPSRT_ARG_CASTER(ShapeArg, "int | collections.abc.Sequence[int]")
MPSRT_ARG_CASTER(DTypeArg, "str | numpy.dtype[typing.Any] | type")
MPSRT_ARG_CASTER(StreamArg, "Stream")
MPSRT_ARG_CASTER(OptStreamArg, "Stream")
MPSRT_ARG_CASTER(EventArg, "Event")
MPSRT_ARG_CASTER(OptEventArg, "Event")
MPSRT_ARG_CASTER(OptGeneratorArg, "Generator")
MPSRT_ARG_CASTER(FloatArg, "float")
MPSRT_ARG_CASTER(IntArg, "int")
MPSRT_ARG_CASTER(ScalarArg, "bool | int | float")
MPSRT_ARG_CASTER(CopySourceArg, "Buffer | numpy.typing.ArrayLike")
MPSRT_ARG_CASTER(RngStateArg, "bytes | bytearray | memoryview | numpy.typing.NDArray[numpy.uint8]")
MPSRT_ARG_CASTER(IndexArg, "int | slice")

#undef MPSRT_ARG_CASTER

}  // namespace nanobind::detail
