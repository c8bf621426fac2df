// Bindings: Buffer (its properties, views, fills and copies; host access and DLPack:
// buffer_host.cpp) and empty().
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>

#include "mpsrt/allocator.h"
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

// An int key as a row index among n rows (a negative one counts from the end), checked with
// torch's IndexError text.
int64_t row_index(nb::handle key, int64_t n) {
  int overflow = 0;
  long long i = PyLong_AsLongLongAndOverflow(key.ptr(), &overflow);
  if (overflow == 0 && i < 0) i += n;
  if (overflow != 0 || i < 0 || i >= n) {
    throw nb::index_error(("index " + nb::cast<std::string>(nb::str(key)) +
                           " is out of bounds for dimension 0 with size " + std::to_string(n))
                              .c_str());
  }
  return i;
}

// buf[i] / buf[a:b] of a Buffer with strides (a strided view, or a contiguous one with torch's
// strides on dimensions of size 0 or 1): a view keeping them, with the same checks and texts.
BufferObject getitem_strided(nb::handle self, PyBuffer& b, nb::handle key) {
  const Shape strides = strides_of(b);
  const int64_t n = b.shape[0];
  Shape shape, sub;
  if (PyLong_Check(key.ptr()) && !PyBool_Check(key.ptr())) {
    const int64_t i = row_index(key, n);
    for (size_t d = 1; d < b.shape.size(); ++d) {
      shape.dims[shape.ndim++] = b.shape[d];
      sub.dims[sub.ndim++] = strides[d];
    }
    return BufferObject(strided_view(self, b, i * strides[0], shape, sub));
  }
  if (!PySlice_Check(key.ptr())) {
    type_error_got("Buffer indices must be ints or slices (step 1)", key);
  }
  Py_ssize_t start = 0, stop = 0, step = 0;
  if (PySlice_Unpack(key.ptr(), &start, &stop, &step) < 0) throw nb::python_error();
  const Py_ssize_t len = PySlice_AdjustIndices(static_cast<Py_ssize_t>(n), &start, &stop, step);
  if (step != 1) {
    throw nb::value_error(
        ("[buffer] a Buffer slice must have step 1, got step " + std::to_string(step)).c_str());
  }
  shape = b.shape;
  shape.dims[0] = len;
  return BufferObject(strided_view(self, b, start * strides[0], shape, strides));
}

// buf[i] (row i, one dimension less) and buf[a:b] (rows a..b) along the first dimension: views.
BufferObject getitem(nb::handle self, IndexArg index) {
  const nb::handle key = index.obj;
  PyBuffer& b = buffer_self(self, "__getitem__()");
  if (b.shape.empty()) throw nb::type_error("invalid index of a 0-d Buffer");
  if (b.strides) return getitem_strided(self, b, key);  // strides other than row-major
  const auto n = static_cast<Py_ssize_t>(b.shape[0]);
  Shape row;
  const size_t rb = row_bytes(b, &row);
  const size_t row_count = rb / itemsize(*b.dtype);
  if (PyLong_Check(key.ptr()) && !PyBool_Check(key.ptr())) {
    const int64_t i = row_index(key, n);
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
  require_contiguous(b, "view()");
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

std::string repr_shape(const Shape& s) {
  std::string t;
  for (int64_t d : s) t += (t.empty() ? "" : ", ") + std::to_string(d);
  return "(" + t + (s.size() == 1 ? ",)" : ")");
}

std::string repr(const PyBuffer& b) {
  std::string shape;
  for (int64_t d : b.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  if (b.shape.size() == 1) shape += ",";
  const bool is_view = b.base.is_valid() && !b.base.is_none();
  std::string strides;
  if (b.strides) {
    for (int64_t d : *b.strides) strides += (strides.empty() ? "" : ", ") + std::to_string(d);
    strides = ", strides=(" + strides + (b.strides->size() == 1 ? ",)" : ")");
  }
  return "Buffer(shape=(" + shape + ")" + strides + ", dtype=" + b.dtype->name +
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
  if (MPSRT_UNLIKELY(is_strided(b))) {
    fill_strided(b, p, s);
  } else {
    b.buf.fill(p, static_cast<unsigned>(itemsize(*b.dtype)), s);
  }
  return BufferObject(nb::borrow(self));
}

// copy_ where either Buffer is a strided view: element by element, so the shapes and the
// itemsizes must agree (a contiguous copy_ is a byte copy of equal sizes).
void copy_between_strided(PyBuffer& b, const PyBuffer& s, const Stream& st) {
  const bool same_shape =
      std::equal(b.shape.begin(), b.shape.end(), s.shape.begin(), s.shape.end());
  if (!same_shape || itemsize(*b.dtype) != itemsize(*s.dtype)) {
    throw nb::value_error(("copy_(): a strided view copies element by element: the shapes and "
                           "itemsizes must match, got shape " +
                           repr_shape(s.shape) + " (" + s.dtype->name + ") into " +
                           repr_shape(b.shape) + " (" + b.dtype->name + ")")
                              .c_str());
  }
  nb::gil_scoped_release release;
  copy_strided(b, s, st);
}

BufferObject copy_(nb::handle self, CopySourceArg source) {
  const nb::handle src = source.obj;
  PyBuffer& b = buffer_self(self, "copy_()");
  check_live(b);
  if (nb::isinstance<PyBuffer>(src)) {
    const PyBuffer& s = nb::cast<const PyBuffer&>(src);
    check_live(s);
    const Stream st = current_stream(b.device);
    if (MPSRT_UNLIKELY(is_strided(b) || is_strided(s))) {
      copy_between_strided(b, s, st);
      return BufferObject(nb::borrow(self));
    }
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
    if (MPSRT_UNLIKELY(is_strided(b))) {
      copy_strided_from_host(b, reinterpret_cast<const void*>(addr));
    } else {
      b.buf.copy_from_host(reinterpret_cast<const void*>(addr), n);
    }
  }
  return BufferObject(nb::borrow(self));
}

// What a Buffer is: shape, dtype, sizes, device, address, and the memory it views.
void bind_properties(nb::class_<PyBuffer>& cls) {
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
          "Bytes from the start of the memory to this Buffer's first byte (0 unless a view).");
}

// Views (view(), buf[i], buf[a:b]), len() along the first dimension, and repr().
void bind_views(nb::class_<PyBuffer>& cls) {
  cls.def("view", &view_method, nb::arg("offset") = 0, nb::arg("shape") = nb::none(),
          nb::arg("dtype") = nb::none(),
          "A Buffer over this one's bytes [offset, offset + its size): the same memory, kept\n"
          "alive while the view lives. offset in bytes (a multiple of the dtype's itemsize\n"
          "from the start of the memory); shape: default all bytes from offset as 1-D;\n"
          "dtype: default this Buffer's (a reinterpretation, as numpy's view).")
      .def("__getitem__", &getitem, nb::arg("key").none(),
           nb::sig("def __getitem__(self, key: int | slice) -> Buffer"),
           "buf[i] / buf[a:b]: a view of row i / rows a..b along the first dimension.")
      .def("__repr__", &repr)
      .def("__len__", [](const PyBuffer& b) {
        if (b.shape.empty()) throw nb::type_error("len() of a 0-d Buffer");
        return b.shape[0];
      });
}

// Work on the memory in stream order: fills, copies, a stream's use, and freeing.
void bind_fills_and_copies(nb::class_<PyBuffer>& cls) {
  cls.def("fill_", &fill_, nb::arg("value").none(),
          nb::sig("def fill_(self, value: bool | int | float) -> Buffer"),
          "Fills every element with value, on the current stream.")
      .def("copy_", &copy_, nb::arg("src").none(),
           nb::sig("def copy_(self, src: Buffer | numpy.typing.ArrayLike) -> Buffer"),
           "Copies a Buffer (on the current stream) or host data of equal size (complete when it\n"
           "returns, after pending work; staged on discrete memory).")
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
          "over the memory returns it.");
}

void bind_empty(nb::module_& m) {
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
}

}  // namespace

nb::class_<PyBuffer> init_buffer(nb::module_& m) {
  nb::class_<PyBuffer> cls(m, "Buffer", "Device memory from the caching allocator.");
  bind_properties(cls);
  bind_views(cls);
  bind_host_access(cls);  // buffer_host.cpp: _raw(), __dlpack__(), __dlpack_device__()
  bind_fills_and_copies(cls);
  bind_strided(cls);  // buffer_strided.cpp: narrow(), stride(), is_contiguous()
  // Last: in the stubs, the class attribute `numpy` would hide the module numpy from the
  // annotations of every method after it.
  bind_numpy(cls);
  bind_empty(m);
  return cls;
}

}  // namespace mpsrt::python
