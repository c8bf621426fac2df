// The extension module mpsrt._C. Errors map as DESIGN.md says: std::invalid_argument ->
// ValueError (nanobind's default), mpsrt::OutOfMemory -> mpsrt.OutOfMemoryError (a
// RuntimeError), everything else -> RuntimeError.
#include "mpsrt/api.h"
#include "mpsrt/error.h"
#include "python/bindings.h"
#include "python/buffer.h"

namespace nb = nanobind;

NB_MODULE(_C, m) {
  m.doc() = "mpsrt native core (nanobind). Use the mpsrt package, not this module.";
  m.attr("__version__") = mpsrt::version();
  nb::exception<mpsrt::OutOfMemory>(m, "OutOfMemoryError", PyExc_RuntimeError);
  mpsrt::python::init_device(m);
  mpsrt::python::init_stream(m);
  mpsrt::python::init_memory(m);
  nb::class_<mpsrt::python::PyBuffer> buffer = mpsrt::python::init_buffer(m);
  mpsrt::python::init_random(m, buffer);
  mpsrt::python::init_c_api(m);
  nb::module_ profiler = m.def_submodule("_profiler", "The signpost profiler's native calls.");
  mpsrt::python::init_profiler(profiler);
  mpsrt::python::init_bench_hooks(m);
}
