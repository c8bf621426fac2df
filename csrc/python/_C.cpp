// The extension module mpsrt._C. Errors map as DESIGN.md says: std::invalid_argument ->
// ValueError (nanobind's default), mpsrt::OutOfMemory -> mpsrt.OutOfMemoryError (a
// RuntimeError), everything else -> RuntimeError.
#include <nanobind/stl/string.h>

#include <string>
#include <thread>

#include "mpsrt/api.h"
#include "mpsrt/error.h"
#include "python/bindings.h"
#include "python/buffer.h"

namespace {

namespace nb = nanobind;

// mpsrt._C._bench, the measurement hooks of `python -m bench` (bench.cpp), is made on its first
// access through the module's __getattr__ (PEP 562: called only for a name the module does not
// have), so that `import mpsrt` never registers them; `from mpsrt._C import _bench` and
// `mpsrt._C._bench` reach it as before. It is put on the module only once complete: a thread
// that comes in while another one registers it (which can let others run, e.g. through a
// finalizer) waits for that one, with the GIL released.
nb::object lazy_attribute(nb::handle module, const std::string& name) {
  if (name != "_bench") {
    throw nb::attribute_error(("module '" + std::string(PyModule_GetName(module.ptr())) +
                               "' has no attribute '" + name + "'")
                                  .c_str());
  }
  // The module's own namespace: getattr() on the module would come back here.
  const nb::dict ns = nb::borrow<nb::dict>(PyModule_GetDict(module.ptr()));
  static bool started = false;
  while (started && !ns.contains("_bench")) {
    nb::gil_scoped_release release;
    std::this_thread::yield();
  }
  if (ns.contains("_bench")) return ns["_bench"];
  started = true;
  try {
    const std::string full = std::string(PyModule_GetName(module.ptr())) + "._bench";
    nb::module_ bench = nb::steal<nb::module_>(PyModule_New(full.c_str()));
    if (!bench.is_valid()) throw nb::python_error();
    bench.doc() = "Measurement hooks for `python -m bench`.";
    mpsrt::python::init_bench(bench);
    ns["_bench"] = bench;
    return std::move(bench);
  } catch (...) {
    started = false;
    throw;
  }
}

}  // namespace

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
  // A borrowed handle: the module outlives the functions in its own namespace (and a strong
  // reference there would be a cycle that keeps the module, and nanobind's types, alive).
  m.def(
      "__getattr__",
      [module = nb::handle(m)](const std::string& name) { return lazy_attribute(module, name); },
      nb::arg("name"));
}
