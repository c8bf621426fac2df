// Bindings: devices, backends, synchronize, options.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "mpsrt/device.h"
#include "mpsrt/options.h"
#include "mpsrt/testing.h"
#include "python/bindings.h"

namespace mpsrt::python {

namespace {
std::string props_repr(const DeviceProperties& p) {
  return "DeviceProperties(index=" + std::to_string(p.index) + ", name='" + p.name +
         "', backend='" + p.backend + "', total_memory=" + std::to_string(p.total_memory >> 20) +
         "MB, recommended_max_memory=" + std::to_string(p.recommended_max_memory >> 20) +
         "MB, max_buffer_size=" + std::to_string(p.max_buffer_size >> 20) +
         "MB, unified_memory=" + (p.unified_memory ? "True" : "False") + ", details='" + p.details +
         "')";
}

// Everything a DeviceProperties says, for == and hash().
std::tuple<int, std::string, std::string, uint64_t, uint64_t, uint64_t, bool, double, std::string>
props_key(const DeviceProperties& p) {
  return {p.index,
          p.name,
          p.backend,
          p.total_memory,
          p.recommended_max_memory,
          p.max_buffer_size,
          p.unified_memory,
          p.timestamp_period_ns,
          p.details};
}
}  // namespace

void type_error_got(const std::string& what, nb::handle got) {
  throw nb::type_error((what + ", got " + nb::type_name(got.type()).c_str()).c_str());
}

int device_arg(nb::handle device, const char* caller) {
  if (device.is_none()) return current_device();
  if (PyLong_CheckExact(device.ptr())) {
    int overflow = 0;
    const long long i = PyLong_AsLongLongAndOverflow(device.ptr(), &overflow);
    if (overflow == 0 && i >= 0 && i < device_count()) return static_cast<int>(i);
  }
  // Everything else (strings, torch.device, bad values) through the Python checks, so the
  // messages are the same everywhere.
  nb::object fn = nb::module_::import_("mpsrt._utils").attr("device_index");
  return nb::cast<int>(fn(device, nb::arg("caller") = caller));
}

void init_device(nb::module_& m) {
  using nb::gil_scoped_release;
  nb::class_<DeviceProperties>(
      m, "DeviceProperties",
      "What a device is and offers (sizes in bytes), as get_device_properties() returns it.\n"
      "\n"
      "Read-only; two objects are equal when they describe the same device.\n"
      "\n"
      "Example:\n"
      "    >>> import mpsrt\n"
      "    >>> props = mpsrt.get_device_properties(0)\n"
      "    >>> props.index, props.backend == mpsrt.backend()\n"
      "    (0, True)\n"
      "    >>> props.recommended_max_memory <= props.total_memory\n"
      "    True\n"
      "    >>> props == mpsrt.get_device_properties(0)\n"
      "    True\n")
      .def_ro("index", &DeviceProperties::index,
              "int: The device's index (0 <= index < device_count()).")
      .def_ro("name", &DeviceProperties::name, "str: The device's name, as its driver reports it.")
      .def_ro("backend", &DeviceProperties::backend,
              "str: The backend the device belongs to ('cpu', 'vulkan' or 'metal').")
      .def_ro("total_memory", &DeviceProperties::total_memory,
              "int: The device's memory in bytes (host memory on the cpu backend).")
      .def_ro("recommended_max_memory", &DeviceProperties::recommended_max_memory,
              "int: The recommended working-set size in bytes; set_per_process_memory_fraction()\n"
              "limits are fractions of it.")
      .def_ro("max_buffer_size", &DeviceProperties::max_buffer_size,
              "int: The largest single allocation in bytes; a larger empty() raises\n"
              "OutOfMemoryError.")
      .def_ro("unified_memory", &DeviceProperties::unified_memory,
              "bool: True when device memory is host memory (numpy() and DLPack alias it), False\n"
              "for discrete memory (every host access is a copy).")
      .def_ro("timestamp_period_ns", &DeviceProperties::timestamp_period_ns,
              "float: Nanoseconds per tick of the device's timestamps (what Event.elapsed_time()\n"
              "reads).")
      .def_ro("details", &DeviceProperties::details,
              "str: Backend-specific details in free text (driver, API version, kernel setup).")
      .def("__repr__", &props_repr)
      .def(
          "__eq__",
          [](const DeviceProperties& a, nb::handle other) -> nb::object {
            if (!nb::isinstance<DeviceProperties>(other)) return nb::borrow(Py_NotImplemented);
            const DeviceProperties& b = nb::cast<const DeviceProperties&>(other);
            return nb::bool_(props_key(a) == props_key(b));
          },
          nb::arg("other").none(), nb::sig("def __eq__(self, other: object) -> bool"),
          "Equal when both describe the same device.")
      .def("__hash__", [](const DeviceProperties& p) { return nb::hash(nb::cast(props_key(p))); });

  m.def("is_available", &is_available,
        "Whether the active backend has a device.\n"
        "\n"
        "Returns:\n"
        "    bool: True when a device of the active backend exists (always on cpu).\n"
        "\n"
        "Example:\n"
        "    >>> import mpsrt\n"
        "    >>> mpsrt.is_available()\n"
        "    True\n");
  m.def("backend", &backend_name,
        "The active backend, chosen once per process.\n"
        "\n"
        "MPSRT_BACKEND chooses it; unset, the best backend that is built and available\n"
        "(backend_info() says why).\n"
        "\n"
        "Returns:\n"
        "    str: 'cpu', 'vulkan' or 'metal'.\n"
        "\n"
        "Raises:\n"
        "    ValueError: MPSRT_BACKEND is not a backend name, or names one that is not built\n"
        "        (raised by the first call that starts the runtime).\n"
        "\n"
        "Example:\n"
        "    >>> import mpsrt\n"
        "    >>> mpsrt.backend() in ('cpu', 'vulkan', 'metal')\n"
        "    True\n");
  m.def("backend_reason", &backend_reason, "Why the active backend was chosen.");
  m.def("built_backends", &built_backends, "Backends compiled into this build.");
  m.def("available_backends", &available_backends,
        "The backends built into this package that work on this machine.\n"
        "\n"
        "Returns:\n"
        "    list[str]: Backend names, best first; 'cpu' is always among them.\n"
        "\n"
        "Example:\n"
        "    >>> import mpsrt\n"
        "    >>> 'cpu' in mpsrt.available_backends()\n"
        "    True\n");
  m.def("device_count", &device_count,
        "The number of devices of the active backend.\n"
        "\n"
        "On cpu, MPSRT_CPU_DEVICES sets it (default 1).\n"
        "\n"
        "Returns:\n"
        "    int: The device count, at least 1.\n"
        "\n"
        "Example:\n"
        "    >>> import mpsrt\n"
        "    >>> mpsrt.device_count() >= 1\n"
        "    True\n");
  m.def("current_device", &current_device,
        "The calling thread's current device.\n"
        "\n"
        "Returns:\n"
        "    int: The index of the device that calls without a device argument use (0 until\n"
        "    set_device() or a device() block changes it).\n"
        "\n"
        "Example:\n"
        "    >>> import mpsrt\n"
        "    >>> with mpsrt.device(0):\n"
        "    ...     mpsrt.current_device()\n"
        "    0\n");
  m.def("set_device", &set_device, nb::arg("index"),
        "Sets the calling thread's current device; returns the previous one.");
  m.def("get_device_properties", &get_device_properties, nb::arg("index") = -1);
  m.def("synchronize", &synchronize, nb::arg("index") = -1, nb::call_guard<gil_scoped_release>(),
        "Waits for all work on every stream of the device (-1: current device).");
  m.def("driver_allocated_memory", &driver_allocated_memory, nb::arg("index") = -1,
        "Bytes held from the driver / OS for the device's heaps.");
  m.def(
      "options",
      [] {
        std::vector<std::map<std::string, std::string>> out;
        for (const OptionInfo& o : options()) {
          out.push_back({{"name", o.name},
                         {"alias", o.alias},
                         {"value", o.value},
                         {"default", o.default_value},
                         {"help", o.help}});
        }
        return out;
      },
      "Every MPSRT_* environment variable with its value in force.");
  m.def(
      "_reset_runtime",
      [](std::optional<std::map<std::string, std::string>> env) {
        testing::reset_runtime(env ? &*env : nullptr);
      },
      nb::arg("env").none() = nb::none(), nb::call_guard<gil_scoped_release>(),
      "Tears the runtime down so the next call re-initialises it with `env` as the environment "
      "(None: the process environment). For tests: objects of the old runtime must be gone.");
}

}  // namespace mpsrt::python
