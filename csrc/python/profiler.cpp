// Bindings: the signpost profiler (mpsrt._C._profiler); mpsrt.profiler checks the arguments.
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>

#include <string>
#include <tuple>

#include "mpsrt/profiler.h"
#include "python/bindings.h"

namespace mpsrt::python {

void init_profiler(nb::module_& m) {
  // stop() and export_trace() wait for device work, whose host callbacks may need the GIL.
  m.def("start", &profiler::start, nb::arg("modes"), nb::arg("wait_until_completed"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def("stop", &profiler::stop, nb::call_guard<nb::gil_scoped_release>());
  m.def("is_active", &profiler::is_active);
  m.def("mark", &profiler::mark, nb::arg("message"));
  m.def("range_push", &profiler::range_push, nb::arg("message"));
  m.def("range_pop", &profiler::range_pop);
  m.def("range_start", &profiler::range_start, nb::arg("message"));
  m.def("range_end", &profiler::range_end, nb::arg("range_id"));
  m.def(
      "export_trace",
      [](const std::string& path) {
        const profiler::TraceSummary s = profiler::export_trace(path);
        return std::make_tuple(s.events, s.records, s.dropped);
      },
      nb::arg("path"), nb::call_guard<nb::gil_scoped_release>(),
      "Writes the trace; returns (events, records, dropped records).");
  m.def("statistics", &profiler::statistics, nb::call_guard<nb::gil_scoped_release>());
  m.def("capture_available", &profiler::capture_available);
  m.def("begin_capture", &profiler::begin_capture, nb::arg("path"),
        nb::call_guard<nb::gil_scoped_release>());
  m.def("end_capture", &profiler::end_capture, nb::call_guard<nb::gil_scoped_release>());
  m.def("is_capturing", &profiler::is_capturing);
}

}  // namespace mpsrt::python
