// Bindings: Generator, default generators, the random fills (methods of Buffer), and the
// conversions of their arguments (seeds, states, numbers) that the module-level functions of
// mpsrt.random share.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <limits>
#include <string>

#include "mpsrt/generator.h"
#include "mpsrt/stream.h"
#include "python/args.h"
#include "python/bindings.h"
#include "python/buffer.h"

namespace mpsrt::python {

namespace {

using Spec = RandomSpec;
using i128 = __int128;
using BufferObject = nb::typed<nb::object, PyBuffer>;
using GeneratorObject = nb::typed<nb::object, Generator>;

// mpsrt._C.DTypeNotImplementedError: raised when an op cannot write a Buffer's dtype. Both a
// NotImplementedError (torch raises that) and a TypeError (what it is).
PyObject* g_dtype_error = nullptr;

[[noreturn]] void dtype_not_implemented(const std::string& message) {
  PyErr_SetString(g_dtype_error, message.c_str());
  throw nb::python_error();
}

[[noreturn]] void not_implemented(const char* message) {
  PyErr_SetString(PyExc_NotImplementedError, message);
  throw nb::python_error();
}

nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> state_array(const RngState& s) {
  auto* data = new uint8_t[kRngStateSize];
  std::memcpy(data, s.data(), kRngStateSize);
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
  size_t shape[1] = {kRngStateSize};
  return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(data, 1, shape, owner);
}

// The RandomOp whose name (random_op_name) is `name`.
bool find_op(const std::string& name, Spec::Op* out) {
  for (int i = 0; i < kRandomOpCount; ++i) {
    if (name == random_op_name(static_cast<Spec::Op>(i))) {
      *out = static_cast<Spec::Op>(i);
      return true;
    }
  }
  return false;
}

// A Python int as a 128-bit integer, clamped to +-2^100 (every bound compared with is within
// +-2^64, so a clamped value compares as the real one).
i128 as_i128(nb::handle v) {
  int overflow = 0;
  const long long s = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow == 0) return s;
  if (overflow < 0) return -(i128(1) << 100);
  const unsigned long long u = PyLong_AsUnsignedLongLong(v.ptr());
  if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    return i128(1) << 100;
  }
  return u;
}

// Fills `b` (the Python Buffer `self`) with the numbers of `spec` (op and dtype set) on the
// current stream; returns self.
// A strided view is refused: the numbers of a random fill follow the memory order.
BufferObject fill(nb::handle self, PyBuffer& b, const Spec& spec, Generator gen) {
  check_live(b);
  require_contiguous(b, "a random fill");
  const uint64_t count = b.nbytes / itemsize(*b.dtype);
  const Stream s = current_stream(b.device);
  {
    nb::gil_scoped_release release;  // the stream's lock may be held by a committer
    random_fill(b.buf, count, spec, gen, s);
  }
  return BufferObject(nb::borrow(self));
}

// The Buffer a random method was called on, checked to be one spec->op can write; sets
// spec->dtype to its dtype.
PyBuffer& fill_target(nb::handle self, Spec* spec, const char* caller, const char* needs) {
  PyBuffer& b = buffer_self(self, (std::string(caller) + "()").c_str());
  spec->dtype = b.dtype->id;
  if (!random_supported(spec->op, spec->dtype)) {
    dtype_not_implemented(std::string(caller) + "() " + needs + b.dtype->name);
  }
  return b;
}

Generator& generator_self(nb::handle self, const char* caller) {
  return cast_or_type_error<Generator>(self, std::string(caller) + " expected an mpsrt.Generator");
}

BufferObject random_(nb::handle self, IntArg low, std::optional<IntArg> high,
                     OptGeneratorArg generator) {
  Spec spec;
  spec.op = Spec::Op::IntRange;
  PyBuffer& b = fill_target(self, &spec, "random_", "cannot write ");
  const RandomIntBounds bounds = random_int_bounds(spec.dtype);
  const nb::int_ lo_obj = low.get("low", "random_");
  const nb::int_ hi_obj = high ? high->get("high", "random_") : nb::int_(bounds.max);
  const i128 lo = as_i128(lo_obj), hi = as_i128(hi_obj);
  const i128 two63 = i128(1) << 63, two64 = i128(1) << 64;
  if (!(hi < lo || lo < -two63 || lo >= two63 || hi - lo >= two64)) {
    // The core checks the rest (a non-empty range within the dtype).
    spec.low = static_cast<int64_t>(lo);
    spec.range = static_cast<uint64_t>(hi - lo);
    return fill(self, b, spec, generator.get(b.device, "random_"));
  }
  // Values the C++ API cannot carry (int64 low, uint64 range): refused here in its words.
  const std::string l = nb::str(lo_obj).c_str(), h = nb::str(hi_obj).c_str();
  if (hi < lo) {
    throw nb::value_error(("random_(): expected low < high, got low=" + l + ", high=" + h).c_str());
  }
  if (lo < bounds.min || hi > i128(bounds.max)) {
    throw nb::value_error(("random_(): [" + l + ", " + h + ") does not fit in " + b.dtype->name +
                           " ([" + std::to_string(bounds.min) + ", " + std::to_string(bounds.max) +
                           "))")
                              .c_str());
  }
  throw nb::value_error(
      ("random_(): [" + l + ", " + h + ") has 2**64 values; at most 2**64 - 1 are supported")
          .c_str());
}

}  // namespace

double FloatArg::get(const char* name, const char* caller) const {
  static PyObject* np_number = [] {
    nb::object numpy = nb::module_::import_("numpy");
    return nb::make_tuple(numpy.attr("integer"), numpy.attr("floating")).release().ptr();
  }();
  const bool is_int = PyLong_Check(obj.ptr()) && !PyBool_Check(obj.ptr());
  if (!is_int && !PyFloat_Check(obj.ptr())) {
    const int numpy_number =
        PyBool_Check(obj.ptr()) ? 0 : PyObject_IsInstance(obj.ptr(), np_number);
    if (numpy_number < 0) throw nb::python_error();
    if (numpy_number == 0) {
      type_error_got(std::string(caller) + "(): " + name + " must be a number", obj);
    }
  }
  const double v = PyFloat_AsDouble(obj.ptr());
  if (v == -1.0 && PyErr_Occurred()) {
    // An int beyond the float range: not finite, as the core then says.
    PyErr_Clear();
    const int negative = PyObject_RichCompareBool(obj.ptr(), nb::int_(0).ptr(), Py_LT);
    if (negative < 0) throw nb::python_error();
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  return v;
}

nb::int_ IntArg::get(const char* name, const char* caller) const {
  if (PyBool_Check(obj.ptr())) {
    throw nb::type_error(
        (std::string(caller) + "(): " + name + " must be an int, got bool").c_str());
  }
  PyObject* index = PyNumber_Index(obj.ptr());
  if (index == nullptr) {
    PyErr_Clear();
    type_error_got(std::string(caller) + "(): " + name + " must be an int", obj);
  }
  return nb::steal<nb::int_>(index);
}

namespace {

uint64_t seed_value(nb::handle seed, const char* caller) {
  if (PyBool_Check(seed.ptr())) {
    throw nb::type_error((std::string(caller) + "() expected an int seed, got bool").c_str());
  }
  PyObject* index = PyNumber_Index(seed.ptr());
  if (index == nullptr) {
    PyErr_Clear();
    type_error_got(std::string(caller) + "() expected an int seed", seed);
  }
  const nb::int_ s = nb::steal<nb::int_>(index);
  const i128 v = as_i128(s);
  if (v < -(i128(1) << 63) || v >= (i128(1) << 64)) {
    throw nb::value_error((std::string(caller) + "(): seed " + nb::str(s).c_str() +
                           " is out of range: expected -2**63 <= seed < 2**64")
                              .c_str());
  }
  return static_cast<uint64_t>(v);
}

nb::bytes state_bytes(nb::handle state, const char* caller) {
  const std::string expected =
      std::string(caller) +
      "() expected a contiguous uint8 buffer of 44 bytes (bytes, a numpy uint8 array or a torch "
      "ByteTensor)";
  nb::bytes data;
  const std::string module =
      nb::cast<std::string>(nb::getattr(state.type(), "__module__", nb::str("")));
  if (PyBytes_Check(state.ptr()) || PyByteArray_Check(state.ptr()) ||
      PyMemoryView_Check(state.ptr())) {
    data = nb::steal<nb::bytes>(PyBytes_FromObject(state.ptr()));
  } else if (module == "numpy" && nb::hasattr(state, "__array_interface__")) {
    const std::string dtype = nb::str(nb::object(state.attr("dtype"))).c_str();
    if (dtype != "uint8") {
      throw nb::type_error((expected + ", got a numpy array of " + dtype).c_str());
    }
    if (!nb::cast<bool>(state.attr("flags").attr("c_contiguous"))) {
      throw nb::value_error(
          (std::string(caller) + "(): the state array must be contiguous").c_str());
    }
    data = nb::borrow<nb::bytes>(state.attr("tobytes")());
  } else if (module.rfind("torch", 0) == 0 && nb::hasattr(state, "dtype")) {
    const std::string dtype = nb::str(nb::object(state.attr("dtype"))).c_str();
    if (dtype != "torch.uint8") {
      throw nb::type_error((expected + ", got a tensor of " + dtype).c_str());
    }
    data = nb::borrow<nb::bytes>(
        state.attr("detach")().attr("cpu")().attr("contiguous")().attr("numpy")().attr(
            "tobytes")());
  } else {
    type_error_got(expected, state);
  }
  if (data.size() != kRngStateSize) {
    throw nb::value_error((std::string(caller) + "(): the state must be " +
                           std::to_string(kRngStateSize) + " bytes, got " +
                           std::to_string(data.size()))
                              .c_str());
  }
  return data;
}

GeneratorObject manual_seed(nb::handle self, nb::handle seed) {
  Generator& g = generator_self(self, "Generator.manual_seed()");
  g.manual_seed(seed_value(seed, "Generator.manual_seed"));
  return GeneratorObject(nb::borrow(self));
}

void set_offset(nb::handle self, nb::handle offset) {
  Generator& g = generator_self(self, "Generator.set_offset()");
  if (PyBool_Check(offset.ptr()) || !PyLong_Check(offset.ptr())) {
    type_error_got("Generator.set_offset() expected an int", offset);
  }
  const i128 v = as_i128(offset);
  if (v < 0 || v >= (i128(1) << 64)) {
    throw nb::value_error(("Generator.set_offset(): offset " +
                           std::string(nb::str(offset).c_str()) + " is out of range [0, 2**64)")
                              .c_str());
  }
  g.set_offset(static_cast<uint64_t>(v));
}

void set_state(nb::handle self, RngStateArg state) {
  Generator& g = generator_self(self, "Generator.set_state()");
  const nb::bytes data = state_bytes(state.obj, "Generator.set_state");
  g.set_state(reinterpret_cast<const uint8_t*>(data.c_str()), data.size());
}

// uniform_(low, high) and normal_(mean, std): an op of two real parameters, a and b.
BufferObject two_parameter_fill(nb::handle self, Spec::Op op, const char* caller, FloatArg a,
                                const char* a_name, FloatArg b, const char* b_name,
                                const OptGeneratorArg& generator) {
  Spec spec;
  spec.op = op;
  PyBuffer& buf = fill_target(self, &spec, caller, "needs a floating-point Buffer, got ");
  spec.a = a.get(a_name, caller);
  spec.b = b.get(b_name, caller);
  return fill(self, buf, spec, generator.get(buf.device, caller));
}

BufferObject uniform_(nb::handle self, FloatArg low, FloatArg high, OptGeneratorArg generator) {
  return two_parameter_fill(self, Spec::Op::Uniform, "uniform_", low, "low", high, "high",
                            generator);
}

BufferObject normal_(nb::handle self, FloatArg mean, FloatArg std, OptGeneratorArg generator) {
  return two_parameter_fill(self, Spec::Op::Normal, "normal_", mean, "mean", std, "std", generator);
}

BufferObject bernoulli_(nb::handle self, FloatArg p, OptGeneratorArg generator) {
  Spec spec;
  spec.op = Spec::Op::Bernoulli;
  PyBuffer& b = fill_target(self, &spec, "bernoulli_", "cannot write ");
  spec.p = p.get("p", "bernoulli_");
  return fill(self, b, spec, generator.get(b.device, "bernoulli_"));
}

// The random constructors' own entry points: each allocates the new Buffer its Python function
// (mpsrt.rand, ...) fills, so that allocation history's native stacks (stacks="all") name the
// op, as torch's name at::native::rand. Never inlined, for the same reason.
[[gnu::noinline]] nb::object rand(ShapeArg size, DTypeArg dtype, DeviceArg device,
                                  OptStreamArg stream) {
  return new_buffer(size, dtype, device, stream, "rand", "rand()");
}
[[gnu::noinline]] nb::object randn(ShapeArg size, DTypeArg dtype, DeviceArg device,
                                   OptStreamArg stream) {
  return new_buffer(size, dtype, device, stream, "randn", "randn()");
}
[[gnu::noinline]] nb::object randint(ShapeArg size, DTypeArg dtype, DeviceArg device,
                                     OptStreamArg stream) {
  return new_buffer(size, dtype, device, stream, "randint", "randint()");
}
[[gnu::noinline]] nb::object bernoulli(ShapeArg size, DTypeArg dtype, DeviceArg device,
                                       OptStreamArg stream) {
  return new_buffer(size, dtype, device, stream, "bernoulli", "bernoulli()");
}
[[gnu::noinline]] nb::object random_bits(ShapeArg size, DTypeArg dtype, DeviceArg device,
                                         OptStreamArg stream) {
  return new_buffer(size, dtype, device, stream, "random_bits", "random_bits()");
}

BufferObject new_random(const std::string& op, ShapeArg size, DTypeArg dtype, DeviceArg device,
                        OptStreamArg stream) {
  using Constructor = nb::object (*)(ShapeArg, DTypeArg, DeviceArg, OptStreamArg);
  static const std::pair<const char*, Constructor> kConstructors[] = {
      {"rand", &rand},
      {"randn", &randn},
      {"randint", &randint},
      {"bernoulli", &bernoulli},
      {"random_bits", &random_bits},
  };
  for (const auto& [name, make] : kConstructors) {
    if (op == name) return BufferObject(make(size, dtype, device, stream));
  }
  throw nb::value_error(("_new_random(): unknown random constructor " + op).c_str());
}

void bind_generator(nb::module_& m);
void bind_fills(nb::class_<PyBuffer>& buffer);
void bind_module_functions(nb::module_& m);
}  // namespace

void init_random(nb::module_& m, nb::class_<PyBuffer>& buffer) {
  nb::object bases =
      nb::make_tuple(nb::handle(PyExc_NotImplementedError), nb::handle(PyExc_TypeError));
  g_dtype_error = PyErr_NewExceptionWithDoc(
      "mpsrt._C.DTypeNotImplementedError",
      "A random op cannot write the Buffer's dtype: a NotImplementedError (as torch raises) and "
      "a TypeError.",
      bases.ptr(), nullptr);
  if (g_dtype_error == nullptr) throw nb::python_error();
  m.attr("DTypeNotImplementedError") = nb::handle(g_dtype_error);

  bind_generator(m);
  bind_fills(buffer);
  bind_module_functions(m);
}

namespace {

void bind_generator(nb::module_& m) {
  nb::class_<Generator>(
      m, "Generator",
      "A Philox4x32-10 random number generator of a device: a (seed, offset) state.\n"
      "\n"
      "Random functions and fills take one as generator=; without one they use the\n"
      "device's default generator (default_generator()). The numbers depend only on the\n"
      "seed and offset, not on the backend, the stream or the thread count.\n"
      "\n"
      "Args:\n"
      "    device: The device (an index, a device string such as 'mps:0', or None for the\n"
      "        current device).\n"
      "\n"
      "Raises:\n"
      "    TypeError: device has a wrong type.\n"
      "    ValueError: device names no device of the active backend.\n"
      "\n"
      "Example:\n"
      "    >>> import mpsrt\n"
      "    >>> g = mpsrt.Generator().manual_seed(7)\n"
      "    >>> g.initial_seed(), g.get_offset()\n"
      "    (7, 0)\n"
      "    >>> state = g.get_state()  # 44 bytes, torch.mps's layout\n"
      "    >>> a = mpsrt.rand(8, generator=g).numpy()\n"
      "    >>> g.get_offset()  # 8 words: two 128-bit Philox blocks\n"
      "    2\n"
      "    >>> g.set_state(state)\n"
      "    >>> bool((mpsrt.rand(8, generator=g).numpy() == a).all())\n"
      "    True\n")
      .def(
          "__init__",
          [](Generator* self, DeviceArg device) { new (self) Generator(device.get("Generator")); },
          nb::arg("device") = nb::none())
      .def_prop_ro("device", &Generator::device, "int: The index of the generator's device.")
      .def("manual_seed", &manual_seed, nb::arg("seed").none(),
           nb::sig("def manual_seed(self, seed: int) -> Generator"),
           "Sets the seed and resets the offset to 0.\n"
           "\n"
           "Args:\n"
           "    seed: An int, -2**63 <= seed < 2**64 (negative seeds wrap, as torch's).\n"
           "\n"
           "Returns:\n"
           "    mpsrt.Generator: This generator.\n"
           "\n"
           "Raises:\n"
           "    TypeError: seed is not an int.\n"
           "    ValueError: seed is out of range.")
      .def("seed", &Generator::seed,
           "Seeds the generator nondeterministically and resets the offset to 0.\n"
           "\n"
           "Returns:\n"
           "    int: The new seed.")
      .def("initial_seed", &Generator::initial_seed,
           "The seed last set.\n"
           "\n"
           "Returns:\n"
           "    int: The seed, 0 <= seed < 2**64.")
      .def("get_offset", &Generator::offset,
           "The Philox offset: the 128-bit blocks used since the seed was set.\n"
           "\n"
           "Returns:\n"
           "    int: The offset, 0 <= offset < 2**64.")
      .def("set_offset", &set_offset, nb::arg("offset").none(),
           nb::sig("def set_offset(self, offset: int) -> None"),
           "Sets the Philox offset (in 128-bit blocks).\n"
           "\n"
           "Args:\n"
           "    offset: An int, 0 <= offset < 2**64.\n"
           "\n"
           "Raises:\n"
           "    TypeError: offset is not an int.\n"
           "    ValueError: offset is out of range.")
      .def(
          "clone_state",
          [](nb::handle self) {
            return generator_self(self, "Generator.clone_state()").clone_state();
          },
          "A new Generator on the same device with a copy of this one's state, as\n"
          "torch.Generator.clone_state(); the two then advance independently.\n"
          "\n"
          "Returns:\n"
          "    mpsrt.Generator: The copy.")
      .def(
          "get_state", [](const Generator& g) { return state_array(g.get_state()); },
          "The generator's state, for set_state().\n"
          "\n"
          "Returns:\n"
          "    numpy.ndarray: 44 bytes (uint8) in torch.mps's layout: the seed and the offset.")
      .def("set_state", &set_state, nb::arg("new_state").none(),
           nb::sig("def set_state(self, new_state: bytes | bytearray | memoryview | "
                   "numpy.typing.NDArray[numpy.uint8]) -> None"),
           "Restores a state from get_state() (the seed and the offset).\n"
           "\n"
           "Args:\n"
           "    new_state: A contiguous uint8 buffer of 44 bytes (bytes, a numpy uint8 array,\n"
           "        a torch ByteTensor).\n"
           "\n"
           "Raises:\n"
           "    TypeError: new_state is not such a buffer.\n"
           "    ValueError: new_state is not 44 bytes long.")
      .def(
          "graphsafe_get_state",
          [](nb::handle self) -> GeneratorObject {
            (void)generator_self(self, "Generator.graphsafe_get_state()");
            not_implemented(
                "graphsafe_get_state is not supported in this Generator: mpsrt has no graph "
                "capture; use clone_state() or get_state()");
          },
          "Not supported: mpsrt has no graph capture (torch's CPU generators raise the same).\n"
          "\n"
          "Raises:\n"
          "    NotImplementedError: Always; use clone_state() or get_state().")
      .def(
          "graphsafe_set_state",
          [](nb::handle self, const Generator&) {
            (void)generator_self(self, "Generator.graphsafe_set_state()");
            not_implemented(
                "graphsafe_set_state is not supported in this Generator: mpsrt has no graph "
                "capture; use set_state(other.get_state())");
          },
          nb::arg("state"),
          "Not supported: mpsrt has no graph capture (torch's CPU generators raise the same).\n"
          "\n"
          "Raises:\n"
          "    NotImplementedError: Always; use set_state(other.get_state()).")
      .def(
          "_set_state_bytes",
          [](Generator& g, nb::bytes data) {
            g.set_state(reinterpret_cast<const uint8_t*>(data.c_str()), data.size());
          },
          nb::arg("state"));
  m.def(
      "default_generator", [](int device) { return Generator::default_generator(device); },
      nb::arg("device") = -1);
}

void bind_fills(nb::class_<PyBuffer>& buffer) {
  buffer
      .def("uniform_", &uniform_, nb::arg("low").none() = 0.0, nb::arg("high").none() = 1.0,
           nb::arg("generator") = nb::none(),
           nb::sig("def uniform_(self, low: float = 0.0, high: float = 1.0, generator: Generator | "
                   "None = None) "
                   "-> Buffer"),
           "Fills with numbers uniform in [low, high), on the current stream.\n"
           "\n"
           "Args:\n"
           "    low: The lower bound (finite).\n"
           "    high: The upper bound (finite, >= low).\n"
           "    generator: An mpsrt.Generator of the Buffer's device; None: the default one.\n"
           "\n"
           "Returns:\n"
           "    mpsrt.Buffer: This Buffer (a floating-point dtype).\n"
           "\n"
           "Raises:\n"
           "    TypeError: An argument has a wrong type, or the dtype cannot hold these\n"
           "        numbers (a DTypeNotImplementedError, also a NotImplementedError).\n"
           "    ValueError: A bound is not finite or low > high; the Buffer is a strided view, or "
           "was\n"
           "        released.")
      .def("normal_", &normal_, nb::arg("mean").none() = 0.0, nb::arg("std").none() = 1.0,
           nb::arg("generator") = nb::none(),
           nb::sig("def normal_(self, mean: float = 0.0, std: float = 1.0, generator: Generator | "
                   "None = None) "
                   "-> Buffer"),
           "Fills with normal numbers of the given mean and standard deviation, on the current\n"
           "stream.\n"
           "\n"
           "Args:\n"
           "    mean: The mean (finite).\n"
           "    std: The standard deviation (finite, >= 0).\n"
           "    generator: An mpsrt.Generator of the Buffer's device; None: the default one.\n"
           "\n"
           "Returns:\n"
           "    mpsrt.Buffer: This Buffer (a floating-point dtype).\n"
           "\n"
           "Raises:\n"
           "    TypeError: An argument has a wrong type, or the dtype cannot hold these\n"
           "        numbers (a DTypeNotImplementedError, also a NotImplementedError).\n"
           "    ValueError: mean or std is not finite or std < 0; the Buffer is a strided view, or "
           "was\n"
           "        released.")
      .def("random_", &random_, nb::arg("low").none() = 0, nb::arg("high") = nb::none(),
           nb::arg("generator") = nb::none(),
           nb::sig("def random_(self, low: int = 0, high: int | None = None, generator: Generator "
                   "| None = None) "
                   "-> Buffer"),
           "Fills with integers uniform in [low, high), written as the Buffer's dtype (every\n"
           "dtype: integers, floats and bool, as torch's Tensor.random_), on the current stream.\n"
           "\n"
           "Args:\n"
           "    low: The lowest value.\n"
           "    high: One past the highest value; None: torch's random_() range, the dtype's\n"
           "        maximum + 1 for integers, 2**digits + 1 for floats (every integer the dtype\n"
           "        holds exactly), 2 for bool.\n"
           "    generator: An mpsrt.Generator of the Buffer's device; None: the default one.\n"
           "\n"
           "Returns:\n"
           "    mpsrt.Buffer: This Buffer.\n"
           "\n"
           "Raises:\n"
           "    TypeError: An argument has a wrong type, or the dtype cannot hold these\n"
           "        numbers (a DTypeNotImplementedError, also a NotImplementedError).\n"
           "    ValueError: low >= high, or the range does not fit in the dtype; the Buffer is a "
           "strided view, or was\n"
           "        released.")
      .def(
          "bernoulli_", &bernoulli_, nb::arg("p").none() = 0.5, nb::arg("generator") = nb::none(),
          nb::sig(
              "def bernoulli_(self, p: float = 0.5, generator: Generator | None = None) -> Buffer"),
          "Fills with 1 with probability p, else 0, on the current stream.\n"
          "\n"
          "Args:\n"
          "    p: The probability of a 1, in [0, 1].\n"
          "    generator: An mpsrt.Generator of the Buffer's device; None: the default one.\n"
          "\n"
          "Returns:\n"
          "    mpsrt.Buffer: This Buffer.\n"
          "\n"
          "Raises:\n"
          "    TypeError: An argument has a wrong type, or the dtype cannot hold these numbers\n"
          "        (a DTypeNotImplementedError, also a NotImplementedError).\n"
          "    ValueError: p is not in [0, 1]; the Buffer is a strided view, or was released.");
}

void bind_module_functions(nb::module_& m) {
  m.def(
      "_random_fill",
      [](nb::handle buffer, const std::string& op, double a, double b, int64_t low, uint64_t range,
         double p, OptGeneratorArg generator, const std::string& caller) {
        PyBuffer& buf = buffer_self(buffer, (caller + "()").c_str());
        Spec spec;
        if (!find_op(op, &spec.op)) throw nb::value_error(("unknown random op " + op).c_str());
        spec.dtype = buf.dtype->id;
        spec.a = a;
        spec.b = b;
        spec.low = low;
        spec.range = range;
        spec.p = p;
        return fill(buffer, buf, spec, generator.get(buf.device, caller.c_str()));
      },
      nb::arg("buffer"), nb::arg("op"), nb::arg("a") = 0.0, nb::arg("b") = 1.0, nb::arg("low") = 0,
      nb::arg("range") = 1, nb::arg("p") = 0.5, nb::arg("generator") = nb::none(),
      nb::arg("caller") = "_random_fill",
      "The random fill by op name, with no checks of a, b, low, range and p beyond the core's "
      "(random_bits() and the benchmarks); errors name caller.");
  m.def("_new_random", &new_random, nb::arg("op"), nb::arg("size").none(),
        nb::arg("dtype") = nb::none(), nb::arg("device") = nb::none(),
        nb::arg("stream") = nb::none(),
        nb::sig("def _new_random(op: str, size: int | collections.abc.Sequence[int], dtype: str "
                "| numpy.dtype[typing.Any] | type | None = None, device: int | str | None = "
                "None, stream: Stream | None = None) -> Buffer"),
        "The new Buffer of a random constructor (op: 'rand', 'randn', 'randint', 'bernoulli', "
        "'random_bits'), allocated in the op's own native function; errors name the op.");
  m.def("_seed_value", &seed_value, nb::arg("seed").none(), nb::arg("caller"),
        nb::sig("def _seed_value(seed: int, caller: str) -> int"),
        "seed as the 64-bit word generators take (-2**63 <= seed < 2**64; negative seeds wrap); "
        "errors name caller.");
  m.def("_rng_state_bytes", &state_bytes, nb::arg("state").none(), nb::arg("caller"),
        nb::sig("def _rng_state_bytes(state: bytes | bytearray | memoryview | "
                "numpy.typing.NDArray[numpy.uint8], caller: str) -> bytes"),
        "A 44-byte generator state's bytes, checked; errors name caller.");
  m.def(
      "_random_supported",
      [](const std::string& op, const std::string& dtype) {
        Spec::Op o;
        Spec::DType d;
        return find_op(op, &o) && dtype_from_name(dtype, &d) && random_supported(o, d);
      },
      nb::arg("op"), nb::arg("dtype"),
      "True when the random op ('bits', 'uniform', 'normal', 'int', 'bernoulli') can write "
      "dtype: mpsrt::random_supported, the rule the core enforces.");
  m.def(
      "_random_int_bounds",
      [](const std::string& dtype) {
        Spec::DType d;
        if (!dtype_from_name(dtype, &d)) {
          throw nb::value_error(("[random] random numbers cannot be written as " + dtype).c_str());
        }
        const RandomIntBounds b = random_int_bounds(d);
        return std::make_pair(b.min, b.max);
      },
      nb::arg("dtype"),
      "[min, max) of the integers random_ can write into dtype (mpsrt::random_int_bounds); "
      "max is random_()'s default high.");
}

}  // namespace

}  // namespace mpsrt::python
