// Bindings: Generator, default generators, random fills of Buffers.
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <string>

#include "mpsrt/generator.h"
#include "mpsrt/stream.h"
#include "python/bindings.h"
#include "python/buffer.h"

namespace mpsrt::python {

namespace {

using Spec = RandomSpec;

nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> state_array(const RngState& s) {
  auto* data = new uint8_t[kRngStateSize];
  std::memcpy(data, s.data(), kRngStateSize);
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
  size_t shape[1] = {kRngStateSize};
  return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(data, 1, shape, owner);
}

// The RandomSpec enum value whose name (random_op_name / random_dtype_name) is `name`.
bool find_op(const std::string& name, Spec::Op* out) {
  for (uint8_t i = 0; random_op_name(static_cast<Spec::Op>(i)) != nullptr; ++i) {
    if (name == random_op_name(static_cast<Spec::Op>(i))) {
      *out = static_cast<Spec::Op>(i);
      return true;
    }
  }
  return false;
}
bool find_dtype(const std::string& name, Spec::DType* out) {
  for (uint8_t i = 0; random_dtype_name(static_cast<Spec::DType>(i)) != nullptr; ++i) {
    if (name == random_dtype_name(static_cast<Spec::DType>(i))) {
      *out = static_cast<Spec::DType>(i);
      return true;
    }
  }
  return false;
}

}  // namespace

void init_random(nb::module_& m) {
  nb::class_<Generator>(m, "Generator", "A Philox4x32-10 generator: a (seed, offset) state.")
      .def(
          "__init__",
          [](Generator* self, nb::handle device) {
            new (self) Generator(device_arg(device, "Generator"));
          },
          nb::arg("device") = nb::none())
      .def_prop_ro("device", &Generator::device)
      .def(
          "manual_seed",
          [](nb::handle self, uint64_t seed) {
            nb::cast<Generator&>(self).manual_seed(seed);
            return nb::borrow(self);
          },
          nb::arg("seed"), "Sets the seed and resets the offset to 0; returns the generator.")
      .def("seed", &Generator::seed, "Seeds nondeterministically; returns the new seed.")
      .def("initial_seed", &Generator::initial_seed)
      .def("get_offset", &Generator::offset,
           "Philox blocks (128 bits each) used since the seed was set.")
      .def("set_offset", &Generator::set_offset, nb::arg("offset"))
      .def("clone_state", &Generator::clone_state,
           "A new Generator on the same device with a copy of this one's state "
           "(torch.Generator.clone_state()); the two then advance independently.")
      .def(
          "get_state", [](const Generator& g) { return state_array(g.get_state()); },
          "The 44-byte state (torch.mps's layout) as a uint8 numpy array.")
      .def(
          "_set_state_bytes",
          [](Generator& g, nb::bytes data) {
            g.set_state(reinterpret_cast<const uint8_t*>(data.c_str()), data.size());
          },
          nb::arg("state"));
  m.def(
      "default_generator", [](int device) { return Generator::default_generator(device); },
      nb::arg("device") = -1);
  m.def(
      "_random_fill",
      [](PyBuffer& buf, const std::string& op, double a, double b, int64_t low, uint64_t range,
         double p, Generator& gen) {
        Spec spec;
        if (!find_op(op, &spec.op)) throw nb::value_error(("unknown random op " + op).c_str());
        if (!find_dtype(buf.dtype->name, &spec.dtype)) {
          throw nb::value_error(
              (std::string("random numbers cannot be written as ") + buf.dtype->name).c_str());
        }
        spec.a = a;
        spec.b = b;
        spec.low = low;
        spec.range = range;
        spec.p = p;
        if (buf.nbytes != 0 && !buf.buf.defined()) {
          throw nb::value_error("Buffer: this buffer was released (free()); allocate a new one");
        }
        uint64_t count = buf.nbytes / (buf.dtype->bits / 8);
        const Stream s = current_stream(buf.device);
        nb::gil_scoped_release release;  // the stream's lock may be held by a committer
        random_fill(buf.buf, count, spec, gen, s);
      },
      nb::arg("buffer"), nb::arg("op"), nb::arg("a"), nb::arg("b"), nb::arg("low"),
      nb::arg("range"), nb::arg("p"), nb::arg("generator"));
  m.def(
      "_random_supported",
      [](const std::string& op, const std::string& dtype) {
        Spec::Op o;
        Spec::DType d;
        return find_op(op, &o) && find_dtype(dtype, &d) && random_supported(o, d);
      },
      nb::arg("op"), nb::arg("dtype"),
      "True when the random op ('bits', 'uniform', 'normal', 'int', 'bernoulli') can write "
      "dtype: mpsrt::random_supported, the rule the core enforces.");
  m.def(
      "_random_int_bounds",
      [](const std::string& dtype) {
        Spec::DType d;
        if (!find_dtype(dtype, &d)) {
          throw nb::value_error(("[random] random numbers cannot be written as " + dtype).c_str());
        }
        const RandomIntBounds b = random_int_bounds(d);
        return std::make_pair(b.min, b.max);
      },
      nb::arg("dtype"),
      "[min, max) of the integers random_ can write into dtype (mpsrt::random_int_bounds); "
      "max is random_()'s default high.");
}

}  // namespace mpsrt::python
