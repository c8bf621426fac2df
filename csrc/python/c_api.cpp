// The C API capsule mpsrt._C._c_api: the library's table (mpsrt_c_api(), csrc/c_api/) over the
// runtime this module holds. The PyTorch device glue (csrc/torch) calls only this table, so the
// process has one runtime: one caching allocator, one set of streams and events.
#include "mpsrt/c_api.h"
#include "python/bindings.h"

namespace mpsrt::python {

void init_c_api(nb::module_& m) {
  m.attr("_c_api") = nb::capsule(mpsrt_c_api(), MPSRT_C_API_CAPSULE_NAME);
  m.attr("_c_api_version") = MPSRT_C_API_VERSION;
}

}  // namespace mpsrt::python
