// Bindings: Buffer (views, host access, DLPack, fills and copies) and empty().
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mpsrt/allocator.h"
#include "mpsrt/device.h"
#include "mpsrt/stream.h"
#include "python/args.h"
#include "python/bindings.h"
#include "python/buffer.h"

namespace mpsrt::python {

// The Buffer a method was called on; a foreign `self` (Buffer.fill_(x)) is a TypeError.
PyBuffer& buffer_self(nb::handle self, const char* caller) {
  return cast_or_type_error<PyBuffer>(self, std::string(caller) + " expected an mpsrt.Buffer");
}

void check_live(const PyBuffer& b) {
  if (b.nbytes != 0 && !b.buf.defined()) {
    throw nb::value_error("Buffer: this buffer was released (free()); allocate a new one");
  }
  b.buf.check_owner();
}

namespace {

namespace dl = nb::dlpack;
using DC = dl::dtype_code;
using BufferObject = nb::typed<nb::object, PyBuffer>;

Stream stream_arg(nb::handle stream, int device) {
  if (stream.is_none()) return current_stream(device);
  const Stream s =
      cast_or_type_error<Stream>(stream, "empty(): stream must be an mpsrt.Stream or None");
  if (s.device() != device) {
    throw nb::value_error(("empty(): the stream is on device " + std::to_string(s.device()) +
                           " but device " + std::to_string(device) + " was asked for")
                              .c_str());
  }
  return s;
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
BufferObject make_view(nb::handle self, PyBuffer& b, size_t offset, const Shape& shape,
                       size_t count, const DType& dt) {
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
  return BufferObject(nb::cast(std::move(v), nb::rv_policy::move));
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
BufferObject getitem(nb::handle self, IndexArg index) {
  const nb::handle key = index.obj;
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

BufferObject view_method(nb::handle self, IntArg offset_arg, std::optional<ShapeArg> size,
                         DTypeArg dtype) {
  const nb::handle offset = offset_arg.obj;
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
  const DType& dt = dtype.get(*b.dtype);
  const size_t item = itemsize(dt);
  const auto o = static_cast<size_t>(off);
  if (!size) {
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
  const Shape shape = size->get(&count, "view()");
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

BufferObject fill_(nb::handle self, ScalarArg value) {
  PyBuffer& b = buffer_self(self, "fill_()");
  check_live(b);
  const uint64_t p = fill_pattern(value.obj, *b.dtype);
  const Stream s = current_stream(b.device);
  nb::gil_scoped_release release;  // the stream's lock may be held by a committer
  b.buf.fill(p, static_cast<unsigned>(itemsize(*b.dtype)), s);
  return BufferObject(nb::borrow(self));
}

BufferObject copy_(nb::handle self, CopySourceArg source) {
  const nb::handle src = source.obj;
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
      throw nb::type_error((std::string(kWhat) + ", got " + nb::type_name(src.type()).c_str() +
                            " of dtype " + nb::str(dtype).c_str())
                               .c_str());
    }
    const size_t n = nb::cast<size_t>(arr.attr("nbytes"));
    if (n != b.nbytes) {
      throw nb::value_error(("copy_(): the source has " + std::to_string(n) +
                             " bytes but the buffer " + std::to_string(b.nbytes) +
                             "; sizes must match")
                                .c_str());
    }
    const auto addr = nb::cast<uintptr_t>(arr.attr("__array_interface__")["data"][nb::int_(0)]);
    nb::gil_scoped_release release;
    b.buf.copy_from_host(reinterpret_cast<const void*>(addr), n);
  }
  return BufferObject(nb::borrow(self));
}

nb::ndarray<nb::numpy> numpy_view(nb::handle self) {
  PyBuffer& b = buffer_self(self, "numpy()");
  wait_for(b);
  if (b.dtype->code == uint8_t(DC::Bfloat)) {
    throw nb::type_error("numpy() : numpy has no bfloat16; use torch.from_dlpack()");
  }
  return nb::ndarray<nb::numpy>(as_ndarray(b, self));
}

}  // namespace

nb::class_<PyBuffer> init_buffer(nb::module_& m) {
  nb::class_<PyBuffer> cls(m, "Buffer", "Device memory from the caching allocator.");
  cls.def_prop_ro("shape",
                  [](const PyBuffer& b) {
                    nb::list l;
                    for (int64_t d : b.shape) l.append(d);
                    return nb::typed<nb::tuple, int, nb::ellipsis>(nb::tuple(l));
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
          [](const PyBuffer& b) -> std::optional<BufferObject> {
            if (!b.base.is_valid() || b.base.is_none()) return std::nullopt;
            return BufferObject(b.base);
          },
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
           nb::sig("def __getitem__(self, key: int | slice) -> Buffer"),
           "buf[i] / buf[a:b]: a view of row i / rows a..b along the first dimension.")
      .def("__repr__", &repr)
      .def("__len__",
           [](const PyBuffer& b) {
             if (b.shape.empty()) throw nb::type_error("len() of a 0-d Buffer");
             return b.shape[0];
           })
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
           nb::sig("def __dlpack__(self, *, stream: int | None = None, max_version: "
                   "tuple[int, int] | None = None, dl_device: tuple[int, int] | None = None, "
                   "copy: bool | None = None) -> typing_extensions.CapsuleType"),
           "DLPack export (array API rules). stream: None waits for the buffer's pending work,\n"
           "-1 skips that (the consumer orders its reads itself), another int >= 0 waits too.\n"
           "max_version >= (1, 0) gives a versioned (writable) capsule; dl_device must be\n"
           "None or (kDLCPU, 0); copy=True exports a host copy, None/False share the memory.")
      .def("__dlpack_device__",
           [](const PyBuffer&) {
             return nb::typed<nb::tuple, int, int>(nb::make_tuple(int(nb::device::cpu::value), 0));
           })
      .def("fill_", &fill_, nb::arg("value").none(),
           nb::sig("def fill_(self, value: bool | int | float) -> Buffer"),
           "Fills every element with value, on the current stream.")
      .def("copy_", &copy_, nb::arg("src").none(),
           nb::sig("def copy_(self, src: Buffer | numpy.typing.ArrayLike) -> Buffer"),
           "Copies a Buffer (on the current stream) or host data (at once) of equal size.")
      .def(
          "record_stream",
          [](PyBuffer& b, StreamArg stream) {
            const Stream s = stream.get("record_stream()");
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
          "over the memory returns it.")
      // Last: in the stubs, the class attribute `numpy` would hide the module numpy from the
      // annotations of every method after it.
      .def("numpy", &numpy_view, nb::sig("def numpy(self) -> numpy.typing.NDArray[typing.Any]"),
           "A numpy array sharing the memory (waits for pending work on the buffer first).");

  m.def(
      "empty",
      [](ShapeArg size, DTypeArg dtype, DeviceArg device, OptStreamArg stream_arg_) {
        const nb::handle stream = stream_arg_.obj;
        size_t count = 0;
        const Shape shape = size.get(&count, "empty()");
        const DType& dt = dtype.get(default_dtype());
        const int dev = device.obj.is_none() && !stream.is_none() && nb::isinstance<Stream>(stream)
                            ? nb::cast<Stream>(stream).device()
                            : device.get("empty");
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
        return BufferObject(nb::cast(std::move(b), nb::rv_policy::move));
      },
      nb::arg("size").none(), nb::arg("dtype") = nb::none(), nb::arg("device") = nb::none(),
      nb::arg("stream") = nb::none(),
      nb::sig("def empty(size: int | collections.abc.Sequence[int], dtype: str | "
              "numpy.dtype[typing.Any] | type | None = None, device: int | str | None = None, "
              "stream: Stream | None = None) -> Buffer"),
      "Uninitialised device memory from the caching allocator.");

  return cls;
}

}  // namespace mpsrt::python
