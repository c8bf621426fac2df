// Shared declarations of the nanobind module mpsrt._C: one init_<area>() per file.
#pragma once

#include <nanobind/nanobind.h>

namespace mpsrt::python {
namespace nb = nanobind;

void init_device(nb::module_& m);
void init_memory(nb::module_& m);
void init_bench(nb::module_& m);

}  // namespace mpsrt::python
