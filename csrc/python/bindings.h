// Shared declarations of the nanobind module mpsrt._C: one init_<area>() per file.
#pragma once

#include <nanobind/nanobind.h>

#include <string>

#include "mpsrt/stream.h"

namespace mpsrt::python {
namespace nb = nanobind;

/// The device index a Python argument names (None: the current device), checked; errors as
/// mpsrt._utils.device_index raises them. `caller` names the function in messages.
int device_arg(nb::handle device, const char* caller);

/// The Stream an argument holds; TypeError("<caller>: expected an mpsrt.Stream, got ...").
Stream stream_of(nb::handle obj, const char* caller);

/// Raises TypeError("<what>, got <type of got>").
[[noreturn]] void type_error_got(const std::string& what, nb::handle got);

/// `obj` as the bound C++ type T; TypeError("<what>, got <type of obj>") when it is not one.
template <class T>
T& cast_or_type_error(nb::handle obj, const std::string& what) {
  if (!nb::isinstance<T>(obj)) type_error_got(what, obj);
  return nb::cast<T&>(obj);
}

void init_device(nb::module_& m);
void init_stream(nb::module_& m);
/// Memory statistics, limits, reclaim callbacks and allocation history (Buffer: buffer.h).
void init_memory(nb::module_& m);
void init_profiler(nb::module_& m);
/// The capsule mpsrt._C._bench_hooks of `python -m bench`'s module mpsrt._bench
/// (bench_hooks.h, bench_hooks.cpp).
void init_bench_hooks(nb::module_& m);
/// The C API capsule mpsrt._C._c_api over the library's table (include/mpsrt/c_api.h).
void init_c_api(nb::module_& m);

}  // namespace mpsrt::python
