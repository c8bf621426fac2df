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
  nb::exception<mpsrt::OutOfMemory> oom(m, "OutOfMemoryError", PyExc_RuntimeError);
  oom.attr("__doc__") =
      "The caching allocator could not provide the memory asked for: a RuntimeError, as\n"
      "torch.cuda.OutOfMemoryError.\n"
      "\n"
      "Raised after the allocator's whole ladder (reuse, garbage collection, a new heap,\n"
      "the reclaim callbacks, freeing the cache, waiting for the device) failed. The message\n"
      "says what was requested, from which pool, what is allocated and cached, the limit\n"
      "and how to change it (set_per_process_memory_fraction()).\n"
      "\n"
      "Example:\n"
      "    >>> import mpsrt\n"
      "    >>> try:\n"
      "    ...     mpsrt.empty(1 << 62)  # more than any device holds\n"
      "    ... except mpsrt.OutOfMemoryError as e:\n"
      "    ...     print(isinstance(e, RuntimeError), str(e).startswith('[allocator]'))\n"
      "    True True\n";
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
