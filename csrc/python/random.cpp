// Bindings: Generator, default generators, random fills of Buffers.
#include <nanobind/ndarray.h>
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

Spec::DType spec_dtype(const std::string& name) {
  static const std::pair<const char*, Spec::DType> kMap[] = {
      {"uint8", Spec::DType::U8},    {"int32", Spec::DType::I32},   {"int64", Spec::DType::I64},
      {"uint32", Spec::DType::U32},  {"float16", Spec::DType::F16}, {"bfloat16", Spec::DType::BF16},
      {"float32", Spec::DType::F32}, {"float64", Spec::DType::F64}, {"bool", Spec::DType::Bool},
  };
  for (const auto& [n, d] : kMap) {
    if (name == n) return d;
  }
  throw nb::value_error(("random numbers cannot be written as " + name).c_str());
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
        if (op == "bits") {
          spec.op = Spec::Op::Bits;
        } else if (op == "uniform") {
          spec.op = Spec::Op::Uniform;
        } else if (op == "normal") {
          spec.op = Spec::Op::Normal;
        } else if (op == "int") {
          spec.op = Spec::Op::IntRange;
        } else if (op == "bernoulli") {
          spec.op = Spec::Op::Bernoulli;
        } else {
          throw nb::value_error(("unknown random op " + op).c_str());
        }
        spec.dtype = spec_dtype(buf.dtype->name);
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
}

}  // namespace mpsrt::python
