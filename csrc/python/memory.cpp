// Bindings: empty(), Buffer, memory statistics and limits, reclaim callbacks.
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "mpsrt/allocator.h"
#include "mpsrt/device.h"
#include "mpsrt/error.h"
#include "mpsrt/stream.h"
#include "python/bindings.h"
#include "python/buffer.h"

namespace mpsrt::python {

namespace {

namespace dl = nb::dlpack;
using DC = dl::dtype_code;

constexpr DType kDTypes[] = {
    {"uint8", uint8_t(DC::UInt), 8},     {"int8", uint8_t(DC::Int), 8},
    {"int16", uint8_t(DC::Int), 16},     {"uint16", uint8_t(DC::UInt), 16},
    {"int32", uint8_t(DC::Int), 32},     {"uint32", uint8_t(DC::UInt), 32},
    {"int64", uint8_t(DC::Int), 64},     {"uint64", uint8_t(DC::UInt), 64},
    {"float16", uint8_t(DC::Float), 16}, {"bfloat16", uint8_t(DC::Bfloat), 16},
    {"float32", uint8_t(DC::Float), 32}, {"float64", uint8_t(DC::Float), 64},
    {"bool", uint8_t(DC::Bool), 8},
};
const DType& kUInt8 = kDTypes[0];

const DType* find_dtype(std::string name) {
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  if (name.rfind("<class 'numpy.", 0) == 0) name = name.substr(14, name.size() - 16);
  if (name == "float" || name == "half") name = name == "float" ? "float32" : "float16";
  if (name == "double") name = "float64";
  if (name == "long") name = "int64";
  if (name == "int") name = "int32";
  if (name == "bool_") name = "bool";
  for (const DType& d : kDTypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::string dtype_list() {
  std::string s;
  for (const DType& d : kDTypes) s += std::string(s.empty() ? "" : ", ") + d.name;
  return s;
}

size_t itemsize(const DType& d) {
  return d.bits / 8;
}

Shape parse_shape(nb::handle size, size_t* count, const std::string& caller = "empty()") {
  Shape shape;
  auto add = [&](nb::handle h) {
    if (!PyLong_Check(h.ptr()) || PyBool_Check(h.ptr())) {
      type_error_got(caller + ": size must be an int or a sequence of ints", h);
    }
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
    if (overflow != 0 || v < 0) {
      throw nb::value_error((caller + ": sizes must be >= 0 and fit in 64 bits, got " +
                             nb::cast<std::string>(nb::str(h)))
                                .c_str());
    }
    if (shape.ndim == Shape::kMaxDims) {
      throw nb::value_error((caller + ": at most 16 dimensions are supported").c_str());
    }
    shape.dims[shape.ndim++] = v;
  };
  if (PyLong_Check(size.ptr()) && !PyBool_Check(size.ptr())) {
    add(size);
  } else if (PyTuple_Check(size.ptr())) {
    const Py_ssize_t n = PyTuple_GET_SIZE(size.ptr());
    for (Py_ssize_t i = 0; i < n; ++i) add(PyTuple_GET_ITEM(size.ptr(), i));
  } else if (PyList_Check(size.ptr())) {
    const Py_ssize_t n = PyList_GET_SIZE(size.ptr());
    for (Py_ssize_t i = 0; i < n; ++i) add(PyList_GET_ITEM(size.ptr(), i));
  } else {
    type_error_got(caller + ": size must be an int or a sequence of ints", size);
  }
  size_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<size_t>::max() / static_cast<size_t>(d)) {
      throw nb::value_error((caller + ": the number of elements overflows 64 bits").c_str());
    }
    n *= static_cast<size_t>(d);
  }
  *count = n;
  return shape;
}

Stream stream_arg(nb::handle stream, int device) {
  if (stream.is_none()) return current_stream(device);
  if (!nb::isinstance<Stream>(stream)) {
    type_error_got("empty(): stream must be an mpsrt.Stream or None", stream);
  }
  const Stream s = nb::cast<Stream>(stream);
  if (s.device() != device) {
    throw nb::value_error(("empty(): the stream is on device " + std::to_string(s.device()) +
                           " but device " + std::to_string(device) + " was asked for")
                              .c_str());
  }
  return s;
}

uint16_t to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {                                               // subnormal or zero
    const float a = std::fabs(f) * 16777216.0f;                           // 2^24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a)));
  }
  uint32_t m = absx + 0xc8000fffu + ((absx >> 13) & 1u);  // rebias + round to nearest even
  return static_cast<uint16_t>(sign | (m >> 13));
}

uint16_t to_bfloat(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// The bit pattern of `value` in `dtype` (little-endian), for fill_.
uint64_t pattern_of(nb::handle value, const DType& d) {
  const bool is_bool = PyBool_Check(value.ptr());
  const bool is_int = PyLong_Check(value.ptr()) && !is_bool;
  const bool is_float = PyFloat_Check(value.ptr());
  if (!is_bool && !is_int && !is_float) {
    type_error_got("fill_(): value must be a bool, int or float", value);
  }
  if (d.code == uint8_t(DC::Bool)) return PyObject_IsTrue(value.ptr()) ? 1 : 0;
  if (d.code == uint8_t(DC::Float) || d.code == uint8_t(DC::Bfloat)) {
    const double v = PyFloat_AsDouble(value.ptr());
    if (v == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      throw nb::value_error((std::string("fill_(): value is out of range for ") + d.name).c_str());
    }
    if (d.bits == 64) {
      uint64_t u;
      std::memcpy(&u, &v, 8);
      return u;
    }
    const float f = static_cast<float>(v);
    if (d.bits == 32) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      return u;
    }
    return d.code == uint8_t(DC::Bfloat) ? to_bfloat(f) : to_half(f);
  }
  if (is_float) {
    throw nb::type_error(
        (std::string("fill_(): a float cannot fill a buffer of ") + d.name + "; pass an int")
            .c_str());
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  const bool is_signed = d.code == uint8_t(DC::Int);
  bool ok = overflow == 0;
  uint64_t u = static_cast<uint64_t>(v);
  if (!ok && !is_signed && d.bits == 64 && overflow > 0) {
    u = PyLong_AsUnsignedLongLong(value.ptr());
    ok = !PyErr_Occurred();
    PyErr_Clear();
  } else if (ok) {
    if (is_signed) {
      const long long lo =
          d.bits == 64 ? std::numeric_limits<long long>::min() : -(1LL << (d.bits - 1));
      const long long hi =
          d.bits == 64 ? std::numeric_limits<long long>::max() : (1LL << (d.bits - 1)) - 1;
      ok = v >= lo && v <= hi;
    } else {
      ok = v >= 0 && (d.bits == 64 || v < (1LL << d.bits));
    }
  }
  if (!ok) {
    throw nb::value_error((std::string("fill_(): value ") + nb::cast<std::string>(nb::str(value)) +
                           " is out of range for " + d.name)
                              .c_str());
  }
  return d.bits == 64 ? u : u & ((uint64_t(1) << d.bits) - 1);
}

// The Buffer a method was called on; a foreign `self` (Buffer.fill_(x)) is a TypeError.
PyBuffer& buffer_self(nb::handle self, const char* caller) {
  if (!nb::isinstance<PyBuffer>(self)) {
    type_error_got(std::string(caller) + " expected an mpsrt.Buffer", self);
  }
  return nb::cast<PyBuffer&>(self);
}

void check_live(const PyBuffer& b) {
  if (b.nbytes != 0 && !b.buf.defined()) {
    throw nb::value_error("Buffer: this buffer was released (free()); allocate a new one");
  }
  b.buf.check_owner();
}

// Host access waits for every stream of the device: any of them may still use the memory.
void wait_for(const PyBuffer& b) {
  if (!b.buf.defined()) return;
  nb::gil_scoped_release release;
  synchronize(b.device);
}

nb::ndarray<> as_ndarray(PyBuffer& b, nb::handle self) {
  check_live(b);
  ++b.exports;
  Py_INCREF(self.ptr());
  nb::object owner = nb::steal(PyCapsule_New(self.ptr(), "mpsrt.export", [](PyObject* cap) {
    auto* s = static_cast<PyObject*>(PyCapsule_GetPointer(cap, "mpsrt.export"));
    nb::inst_ptr<PyBuffer>(s)->exports--;
    Py_DECREF(s);
  }));
  void* p = b.buf.host_ptr();
  if (p == nullptr && b.nbytes != 0) {
    throw std::runtime_error("[buffer] this device's memory is not host-visible; copy it first");
  }
  std::vector<size_t> shape(b.shape.begin(), b.shape.end());
  return nb::ndarray<>(p, shape.size(), shape.data(), owner, nullptr,
                       dl::dtype{b.dtype->code, b.dtype->bits, 1}, nb::device::cpu::value, 0);
}

// A host copy of the buffer's bytes, owned by the returned array (DLPack copy=True).
nb::ndarray<> host_copy(const PyBuffer& b) {
  check_live(b);
  const void* src = b.buf.host_ptr();
  if (src == nullptr && b.nbytes != 0) {
    throw std::runtime_error("[buffer] this device's memory is not host-visible; copy it first");
  }
  std::unique_ptr<uint8_t[]> bytes(new uint8_t[std::max<size_t>(b.nbytes, 1)]);
  if (b.nbytes != 0) std::memcpy(bytes.get(), src, b.nbytes);
  nb::capsule owner(bytes.get(), [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
  void* p = bytes.release();
  std::vector<size_t> shape(b.shape.begin(), b.shape.end());
  return nb::ndarray<>(p, shape.size(), shape.data(), owner, nullptr,
                       dl::dtype{b.dtype->code, b.dtype->bits, 1}, nb::device::cpu::value, 0);
}

// __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None), as the array API
// defines it for a producer whose memory the host reads directly (kDLCPU).
nb::object dlpack_export(nb::handle self, nb::kwargs kwargs) {
  PyBuffer& b = buffer_self(self, "__dlpack__()");
  nb::object stream = nb::none(), max_version = nb::none(), dl_device = nb::none(),
             copy = nb::none();
  for (auto [key, value] : kwargs) {
    const std::string k = nb::cast<std::string>(nb::str(key));
    if (k == "stream") {
      stream = nb::borrow(value);
    } else if (k == "max_version") {
      max_version = nb::borrow(value);
    } else if (k == "dl_device") {
      dl_device = nb::borrow(value);
    } else if (k == "copy") {
      copy = nb::borrow(value);
    } else {
      throw nb::type_error(("__dlpack__(): unsupported keyword argument '" + k +
                            "'; expected stream, max_version, dl_device or copy")
                               .c_str());
    }
  }
  bool wait = true;
  if (!stream.is_none()) {
    if (PyBool_Check(stream.ptr()) || !PyLong_Check(stream.ptr())) {
      type_error_got("__dlpack__(): stream must be None, -1 or an int >= 0", stream);
    }
    const long long v = PyLong_AsLongLong(stream.ptr());
    if (v == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      throw nb::value_error("__dlpack__(): stream is out of range; expected None, -1 or an int");
    }
    if (v < -1) {
      throw nb::value_error(("__dlpack__(): stream " + std::to_string(v) +
                             " is not valid; expected None, -1 (no synchronisation) or an int "
                             ">= 0")
                                .c_str());
    }
    wait = v != -1;
  }
  if (!dl_device.is_none()) {
    if (!nb::isinstance<nb::tuple>(dl_device) || nb::len(dl_device) != 2) {
      type_error_got("__dlpack__(): dl_device must be None or a (device_type, index) tuple",
                     dl_device);
    }
    if (!dl_device.equal(nb::make_tuple(int(nb::device::cpu::value), 0))) {
      throw nb::buffer_error(
          "__dlpack__: mpsrt buffers can only be exported to the device (kDLCPU, 0)");
    }
  }
  bool copy_bytes = false;
  if (!copy.is_none()) {
    if (!PyBool_Check(copy.ptr()))
      type_error_got("__dlpack__(): copy must be None or a bool", copy);
    copy_bytes = copy.ptr() == Py_True;
  }
  if (wait || copy_bytes) wait_for(b);
  nb::object nd =
      nb::cast(nb::ndarray<nb::array_api>(copy_bytes ? host_copy(b) : as_ndarray(b, self)));
  // nanobind checks max_version and returns a versioned capsule for (1, 0) and later.
  return nd.attr("__dlpack__")(nb::arg("max_version") = max_version);
}

// A Python Buffer over bytes [offset, offset + count * itemsize(dtype)) of `b`, with `shape`.
nb::object make_view(nb::handle self, PyBuffer& b, size_t offset, const Shape& shape, size_t count,
                     const DType& dt) {
  check_live(b);
  const size_t item = itemsize(dt);
  if (count > std::numeric_limits<size_t>::max() / item) {
    throw nb::value_error("view(): the size in bytes overflows 64 bits");
  }
  PyBuffer v;
  v.buf = b.buf.view(offset, count * item);  // the range check (std::invalid_argument)
  if (v.buf.offset() % item != 0) {
    throw nb::value_error(("[buffer] view: byte offset " + std::to_string(v.buf.offset()) +
                           " from the start of the memory is not a multiple of the " + dt.name +
                           " itemsize " + std::to_string(item) + "; elements must be aligned")
                              .c_str());
  }
  v.shape = shape;
  v.dtype = &dt;
  v.device = b.device;
  v.nbytes = count * item;
  v.base = b.base.is_valid() && !b.base.is_none() ? b.base : nb::borrow(self);
  return nb::cast(std::move(v), nb::rv_policy::move);
}

size_t row_bytes(const PyBuffer& b, Shape* row_shape) {
  size_t n = itemsize(*b.dtype);
  for (size_t i = 1; i < b.shape.size(); ++i) {
    row_shape->dims[row_shape->ndim++] = b.shape[i];
    n *= static_cast<size_t>(b.shape[i]);
  }
  return n;
}

// buf[i] (row i, one dimension less) and buf[a:b] (rows a..b) along the first dimension: views.
nb::object getitem(nb::handle self, nb::handle key) {
  PyBuffer& b = buffer_self(self, "__getitem__()");
  if (b.shape.empty()) throw nb::type_error("invalid index of a 0-d Buffer");
  const auto n = static_cast<Py_ssize_t>(b.shape[0]);
  Shape row;
  const size_t rb = row_bytes(b, &row);
  const size_t row_count = rb / itemsize(*b.dtype);
  if (PyLong_Check(key.ptr()) && !PyBool_Check(key.ptr())) {
    int overflow = 0;
    long long i = PyLong_AsLongLongAndOverflow(key.ptr(), &overflow);
    if (overflow == 0 && i < 0) i += n;
    if (overflow != 0 || i < 0 || i >= n) {
      throw nb::index_error(("index " + nb::cast<std::string>(nb::str(key)) +
                             " is out of bounds for dimension 0 with size " + std::to_string(n))
                                .c_str());
    }
    return make_view(self, b, static_cast<size_t>(i) * rb, row, row_count, *b.dtype);
  }
  if (PySlice_Check(key.ptr())) {
    Py_ssize_t start = 0, stop = 0, step = 0;
    if (PySlice_Unpack(key.ptr(), &start, &stop, &step) < 0) throw nb::python_error();
    const Py_ssize_t len = PySlice_AdjustIndices(n, &start, &stop, step);
    if (step != 1) {
      throw nb::value_error(("[buffer] a Buffer slice must have step 1 (Buffers are contiguous), "
                             "got step " +
                             std::to_string(step))
                                .c_str());
    }
    Shape shape;
    shape.dims[shape.ndim++] = len;
    for (int64_t d : row) shape.dims[shape.ndim++] = d;
    return make_view(self, b, static_cast<size_t>(start) * rb, shape,
                     static_cast<size_t>(len) * row_count, *b.dtype);
  }
  type_error_got("Buffer indices must be ints or slices (step 1)", key);
}

nb::object view_method(nb::handle self, nb::handle offset, nb::handle size, nb::handle dtype) {
  PyBuffer& b = buffer_self(self, "view()");
  check_live(b);
  if (!PyLong_Check(offset.ptr()) || PyBool_Check(offset.ptr())) {
    type_error_got("view(): offset must be an int (bytes)", offset);
  }
  int overflow = 0;
  const long long off = PyLong_AsLongLongAndOverflow(offset.ptr(), &overflow);
  if (overflow != 0 || off < 0) {
    throw nb::value_error(("view(): offset must be >= 0 and fit in 64 bits, got " +
                           nb::cast<std::string>(nb::str(offset)))
                              .c_str());
  }
  const DType& dt = parse_dtype(dtype, *b.dtype);
  const size_t item = itemsize(dt);
  const auto o = static_cast<size_t>(off);
  if (size.is_none()) {
    if (o > b.nbytes) b.buf.view(o, 0);  // throws the range error
    const size_t rest = b.nbytes - o;
    if (rest % item != 0) {
      throw nb::value_error(("view(): the " + std::to_string(rest) + " bytes from offset " +
                             std::to_string(o) + " are not a whole number of " + dt.name +
                             " elements; pass a shape")
                                .c_str());
    }
    Shape shape;
    shape.dims[shape.ndim++] = static_cast<int64_t>(rest / item);
    return make_view(self, b, o, shape, rest / item, dt);
  }
  size_t count = 0;
  const Shape shape = parse_shape(size, &count, "view()");
  return make_view(self, b, o, shape, count, dt);
}

std::string repr(const PyBuffer& b) {
  std::string shape;
  for (int64_t d : b.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  if (b.shape.size() == 1) shape += ",";
  const bool is_view = b.base.is_valid() && !b.base.is_none();
  return "Buffer(shape=(" + shape + "), dtype=" + b.dtype->name +
         ", device=" + std::to_string(b.device) + ", nbytes=" + std::to_string(b.nbytes) +
         (is_view ? ", byte_offset=" + std::to_string(b.buf.offset()) : "") +
         (b.nbytes != 0 && !b.buf.defined() ? ", released" : "") + ")";
}

// Frames of files under this prefix (the mpsrt package's own wrappers) are left out at the
// innermost end, so that a stack starts at the caller's code. Written with the GIL held.
std::string g_package_prefix;
// Frames taken by a binding before it released the GIL (empty_cache), for the allocator's
// request on the same thread.
thread_local std::shared_ptr<const StackFrames> t_pending_frames;
std::atomic<bool> g_recording_frames{false};

// The calling Python code's frames, innermost first (allocation history with stacks).
std::shared_ptr<const StackFrames> walk_frames();

// Called by the allocator outside its lock. With the GIL held: the frames now. Without it: the
// frames a binding took before releasing the GIL, or else, on a thread that runs Python code
// but released the GIL (torch's operators do, before they allocate through the PyTorch device
// glue), the frames taken by acquiring the GIL for the walk, as torch.cuda's allocator does.
std::shared_ptr<const StackFrames> capture_frames() {
  if (PyGILState_Check()) return walk_frames();
  if (t_pending_frames || !Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr ||
      _Py_IsFinalizing()) {
    return t_pending_frames;
  }
  const PyGILState_STATE st = PyGILState_Ensure();
  auto frames = walk_frames();
  PyGILState_Release(st);
  return frames;
}

std::shared_ptr<const StackFrames> walk_frames() {
  auto frames = std::make_shared<StackFrames>();
  PyFrameObject* f = PyEval_GetFrame();
  Py_XINCREF(f);
  bool leading = !g_package_prefix.empty();
  while (f != nullptr && frames->size() < 64) {
    PyCodeObject* code = PyFrame_GetCode(f);
    nb::object c = nb::steal(reinterpret_cast<PyObject*>(code));
    std::string filename = nb::cast<std::string>(c.attr("co_filename"));
    leading = leading && filename.compare(0, g_package_prefix.size(), g_package_prefix) == 0;
    if (!leading) {
      frames->push_back({std::move(filename), PyFrame_GetLineNumber(f),
                         nb::cast<std::string>(c.attr("co_name"))});
    }
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  Py_XDECREF(f);
  return frames;
}

nb::list frames_list(const std::shared_ptr<const StackFrames>& frames) {
  nb::list out;
  if (!frames) return out;
  for (const StackFrame& f : *frames) {
    nb::dict d;
    d["filename"] = f.filename;
    d["line"] = f.line;
    d["name"] = f.name;
    out.append(d);
  }
  return out;
}

}  // namespace

const DType& parse_dtype(nb::handle obj, const DType& dflt) {
  if (obj.is_none()) return dflt;
  const DType* d = nullptr;
  if (obj.ptr() == reinterpret_cast<PyObject*>(&PyFloat_Type)) return *find_dtype("float64");
  if (obj.ptr() == reinterpret_cast<PyObject*>(&PyLong_Type)) return *find_dtype("int64");
  if (obj.ptr() == reinterpret_cast<PyObject*>(&PyBool_Type)) return *find_dtype("bool");
  if (PyUnicode_Check(obj.ptr())) {
    d = find_dtype(nb::cast<std::string>(obj));
  } else {
    // numpy dtypes and torch dtypes print their names; numpy scalar types print "<class ...>".
    d = find_dtype(nb::cast<std::string>(nb::str(obj)));
    if (d == nullptr && nb::hasattr(obj, "__name__")) {
      d = find_dtype(nb::cast<std::string>(obj.attr("__name__")));
    }
    if (d == nullptr && !nb::hasattr(obj, "itemsize") && !nb::hasattr(obj, "is_floating_point")) {
      type_error_got("dtype must be a str, a numpy dtype or a torch dtype", obj);
    }
  }
  if (d == nullptr) {
    throw nb::value_error(("unsupported dtype " + nb::cast<std::string>(nb::repr(obj)) +
                           "; expected one of " + dtype_list())
                              .c_str());
  }
  return *d;
}

void init_memory(nb::module_& m) {
  nb::class_<PyBuffer>(m, "Buffer", "Device memory from the caching allocator.")
      .def_prop_ro("shape",
                   [](const PyBuffer& b) {
                     nb::list l;
                     for (int64_t d : b.shape) l.append(d);
                     return nb::tuple(l);
                   })
      .def_prop_ro("dtype", [](const PyBuffer& b) { return b.dtype->name; })
      .def_prop_ro("itemsize", [](const PyBuffer& b) { return itemsize(*b.dtype); })
      .def_prop_ro("nbytes", [](const PyBuffer& b) { return b.nbytes; })
      .def_prop_ro("device", [](const PyBuffer& b) { return b.device; })
      .def_prop_ro("data_ptr",
                   [](const PyBuffer& b) {
                     check_live(b);
                     return b.buf.address();
                   })
      .def_prop_ro(
          "base",
          [](const PyBuffer& b) -> nb::object { return b.base.is_valid() ? b.base : nb::none(); },
          "The Buffer whose memory this view shares (the original owner, also for a view of a "
          "view), or None.")
      .def_prop_ro(
          "byte_offset", [](const PyBuffer& b) { return b.buf.offset(); },
          "Bytes from the start of the memory to this Buffer's first byte (0 unless a view).")
      .def("view", &view_method, nb::arg("offset") = 0, nb::arg("shape") = nb::none(),
           nb::arg("dtype") = nb::none(),
           "A Buffer over this one's bytes [offset, offset + its size): the same memory, kept\n"
           "alive while the view lives. offset in bytes (a multiple of the dtype's itemsize\n"
           "from the start of the memory); shape: default all bytes from offset as 1-D;\n"
           "dtype: default this Buffer's (a reinterpretation, as numpy's view).")
      .def("__getitem__", &getitem, nb::arg("key").none(),
           "buf[i] / buf[a:b]: a view of row i / rows a..b along the first dimension.")
      .def("__repr__", &repr)
      .def("__len__",
           [](const PyBuffer& b) {
             if (b.shape.empty()) throw nb::type_error("len() of a 0-d Buffer");
             return b.shape[0];
           })
      .def(
          "numpy",
          [](nb::handle self) {
            PyBuffer& b = buffer_self(self, "numpy()");
            wait_for(b);
            if (b.dtype->code == uint8_t(DC::Bfloat)) {
              throw nb::type_error("numpy() : numpy has no bfloat16; use torch.from_dlpack()");
            }
            return nb::ndarray<nb::numpy>(as_ndarray(b, self));
          },
          "A numpy array sharing the memory (waits for pending work on the buffer first).")
      .def(
          "_raw",
          [](nb::handle self) {
            PyBuffer& b = buffer_self(self, "_raw()");
            wait_for(b);
            check_live(b);
            size_t shape[1] = {b.nbytes};
            return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(b.buf.host_ptr(), 1, shape, self);
          },
          "A flat uint8 numpy view of the bytes (waits for pending work first).")
      .def("__dlpack__", &dlpack_export,
           "DLPack export (array API rules). stream: None waits for the buffer's pending work,\n"
           "-1 skips that (the consumer orders its reads itself), another int >= 0 waits too.\n"
           "max_version >= (1, 0) gives a versioned (writable) capsule; dl_device must be\n"
           "None or (kDLCPU, 0); copy=True exports a host copy, None/False share the memory.")
      .def("__dlpack_device__",
           [](const PyBuffer&) { return nb::make_tuple(int(nb::device::cpu::value), 0); })
      .def(
          "fill_",
          [](nb::handle self, nb::handle value) {
            PyBuffer& b = buffer_self(self, "fill_()");
            check_live(b);
            const uint64_t p = pattern_of(value, *b.dtype);
            const Stream s = current_stream(b.device);
            nb::gil_scoped_release release;  // the stream's lock may be held by a committer
            b.buf.fill(p, static_cast<unsigned>(itemsize(*b.dtype)), s);
            return nb::borrow(self);
          },
          nb::arg("value").none(), "Fills every element with value, on the current stream.")
      .def(
          "copy_",
          [](nb::handle self, nb::handle src) {
            PyBuffer& b = buffer_self(self, "copy_()");
            check_live(b);
            if (nb::isinstance<PyBuffer>(src)) {
              const PyBuffer& s = nb::cast<const PyBuffer&>(src);
              check_live(s);
              const Stream st = current_stream(b.device);
              nb::gil_scoped_release release;
              b.buf.copy_from(s.buf, st);
            } else {
              // Host data: numbers in any buffer-protocol object of the same size (not text,
              // not Python objects, whose bytes are pointers).
              constexpr const char* kWhat =
                  "copy_(): expected an mpsrt.Buffer or host data with a numeric dtype (e.g. a "
                  "numpy array)";
              if (src.is_none() || PyUnicode_Check(src.ptr())) type_error_got(kWhat, src);
              nb::object arr = nb::module_::import_("numpy").attr("ascontiguousarray")(src);
              const nb::object dtype = arr.attr("dtype");
              const nb::str kind(dtype.attr("kind"));
              const std::string k = kind.c_str();
              if (k.size() != 1 || std::string("biufc").find(k[0]) == std::string::npos) {
                throw nb::type_error((std::string(kWhat) + ", got " +
                                      nb::type_name(src.type()).c_str() + " of dtype " +
                                      nb::str(dtype).c_str())
                                         .c_str());
              }
              const size_t n = nb::cast<size_t>(arr.attr("nbytes"));
              if (n != b.nbytes) {
                throw nb::value_error(("copy_(): the source has " + std::to_string(n) +
                                       " bytes but the buffer " + std::to_string(b.nbytes) +
                                       "; sizes must match")
                                          .c_str());
              }
              const auto addr =
                  nb::cast<uintptr_t>(arr.attr("__array_interface__")["data"][nb::int_(0)]);
              nb::gil_scoped_release release;
              b.buf.copy_from_host(reinterpret_cast<const void*>(addr), n);
            }
            return nb::borrow(self);
          },
          nb::arg("src").none(),
          "Copies a Buffer (on the current stream) or host data (at once) of equal size.")
      .def(
          "record_stream",
          [](PyBuffer& b, nb::handle stream) {
            const Stream s = stream_of(stream, "record_stream()");
            check_live(b);
            b.buf.record_stream(s);
          },
          nb::arg("stream"),
          "Marks the buffer as used by `stream`: its memory is not reused elsewhere until the "
          "stream's work so far is done (commands on other streams record this themselves).")
      .def(
          "free",
          [](PyBuffer& b) {
            if (b.exports > 0) throw nb::buffer_error("free(): numpy/DLPack views are alive");
            b.buf.reset();
          },
          "Returns the memory to the cache now (stream-ordered); the Buffer can no longer be "
          "used. While views share the memory, only this Buffer's hold goes: the last Buffer "
          "over the memory returns it.");

  m.def(
      "empty",
      [](nb::handle size, nb::handle dtype, nb::handle device, nb::handle stream) {
        size_t count = 0;
        const Shape shape = parse_shape(size, &count);
        const DType& dt = parse_dtype(dtype, kUInt8);
        const int dev = device.is_none() && !stream.is_none() && nb::isinstance<Stream>(stream)
                            ? nb::cast<Stream>(stream).device()
                            : device_arg(device, "empty");
        const Stream s = stream_arg(stream, dev);
        if (count > std::numeric_limits<size_t>::max() / itemsize(dt)) {
          throw nb::value_error("empty(): the size in bytes overflows 64 bits");
        }
        PyBuffer b;
        b.shape = shape;
        b.dtype = &dt;
        b.device = dev;
        b.nbytes = count * itemsize(dt);
        b.buf = Buffer(b.nbytes, s);
        // Moved into the Python object's own storage: one allocation in all.
        return nb::cast(std::move(b), nb::rv_policy::move);
      },
      nb::arg("size").none(), nb::arg("dtype") = nb::none(), nb::arg("device") = nb::none(),
      nb::arg("stream") = nb::none(), "Uninitialised device memory from the caching allocator.");

  m.def("memory_stats", &memory_stats, nb::arg("device") = -1);
  m.def("reset_peak_memory_stats", &reset_peak_memory_stats, nb::arg("device") = -1);
  m.def("current_allocated_memory", &current_allocated_memory, nb::arg("device") = -1);
  m.def("reserved_memory", &reserved_memory, nb::arg("device") = -1);
  m.def("recommended_max_memory", &recommended_max_memory, nb::arg("device") = -1);
  m.def(
      "empty_cache",
      [](int device) {
        // The caller's frames for history's segment_free entries, taken while the GIL is held.
        std::shared_ptr<const StackFrames> frames;
        if (g_recording_frames.load(std::memory_order_relaxed)) frames = capture_frames();
        t_pending_frames = std::move(frames);
        {
          nb::gil_scoped_release release;
          try {
            empty_cache(device);
          } catch (...) {
            t_pending_frames.reset();
            throw;
          }
        }
        t_pending_frames.reset();
      },
      nb::arg("device") = -1);
  m.def("reset_accumulated_memory_stats", &reset_accumulated_memory_stats, nb::arg("device") = -1);
  m.def("get_per_process_memory_fraction", &get_per_process_memory_fraction,
        nb::arg("device") = -1);
  m.def(
      "mem_get_info",
      [](int device) {
        const auto [free, total] = mem_get_info(device);
        return nb::make_tuple(free, total);
      },
      nb::arg("device") = -1);
  m.def("set_per_process_memory_fraction", &set_per_process_memory_fraction, nb::arg("fraction"),
        nb::arg("device") = -1);
  m.def("set_cache_limit", &set_cache_limit, nb::arg("bytes"), nb::arg("device") = -1);
  m.def(
      "add_reclaim_callback",
      [](nb::callable fn, int device) {
        // Runs on the allocating thread with the GIL released by nothing: take it to call.
        auto holder = std::make_shared<nb::object>(fn);
        auto call = [holder](size_t needed) -> bool {
          nb::gil_scoped_acquire gil;
          try {
            return nb::cast<bool>((*holder)(needed));
          } catch (nb::python_error& e) {
            const std::string what = e.what();
            throw std::runtime_error(what);
          }
        };
        return add_reclaim_callback(call, device);
      },
      nb::arg("fn"), nb::arg("device") = -1);
  m.def("remove_reclaim_callback", &remove_reclaim_callback, nb::arg("id"), nb::arg("device") = -1);
  m.def(
      "_record_memory_history",
      [](bool enabled, size_t max_entries, int context, std::vector<std::string> skip_actions,
         bool clear_history, std::string package_prefix, int device) {
        if (context < 0 || context > static_cast<int>(HistoryContext::All)) {
          throw nb::value_error("_record_memory_history(): context must be 0 (None) to 3 (all)");
        }
        HistoryOptions o;
        o.max_entries = max_entries;
        o.context = static_cast<HistoryContext>(context);
        o.skip_actions = std::move(skip_actions);
        o.clear_history = clear_history;
        if (o.context != HistoryContext::None) o.frames_fn = &capture_frames;
        g_package_prefix = std::move(package_prefix);
        record_memory_history(enabled, o, device);
        if (enabled && o.context == HistoryContext::All) g_recording_frames = true;
      },
      nb::arg("enabled"), nb::arg("max_entries") = 0, nb::arg("context") = 3,
      nb::arg("skip_actions") = std::vector<std::string>(), nb::arg("clear_history") = false,
      nb::arg("package_prefix") = "", nb::arg("device") = -1);
  m.def(
      "_memory_snapshot",
      [](int device) {
        const MemorySnapshot snap = memory_snapshot(device);
        nb::list segments;
        for (const SegmentInfo& s : snap.segments) {
          nb::dict d;
          d["address"] = s.address;
          d["frames"] = frames_list(s.frames);
          d["total_size"] = s.total_size;
          d["allocated_size"] = s.allocated_size;
          d["requested_size"] = s.requested_size;
          d["pool"] = s.pool;
          nb::list blocks;
          for (const BlockInfo& b : s.blocks) {
            nb::dict bd;
            bd["address"] = b.address;
            bd["size"] = b.size;
            bd["requested_size"] = b.requested_size;
            bd["allocated"] = b.allocated;
            bd["frames"] = frames_list(b.frames);
            blocks.append(bd);
          }
          d["blocks"] = blocks;
          segments.append(d);
        }
        nb::list trace;
        for (const TraceInfo& t : snap.trace) {
          nb::dict d;
          d["action"] = t.action;
          d["addr"] = t.address;
          d["size"] = t.size;
          d["stream"] = t.stream;
          d["time_us"] = t.time_us;
          d["frames"] = frames_list(t.frames);
          trace.append(d);
        }
        return nb::make_tuple(segments, trace);
      },
      nb::arg("device") = -1);
}

}  // namespace mpsrt::python
