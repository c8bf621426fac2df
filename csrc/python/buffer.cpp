// Bindings: Buffer (its properties, views, fills and copies; host access and DLPack:
// buffer_host.cpp) and empty().
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <limits>
#include <new>
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
  cls.def_prop_ro(
         "shape",
         [](const PyBuffer& b) {
           nb::list l;
           for (int64_t d : b.shape) l.append(d);
           return nb::typed<nb::tuple, int, nb::ellipsis>(nb::tuple(l));
         },
         "tuple[int, ...]: The size of each dimension (() for a 0-d Buffer).")
      .def_prop_ro(
          "dtype", [](const PyBuffer& b) { return b.dtype->name; },
          "str: The element type's name, one of 'uint8', 'int8', 'int16', 'uint16', 'int32',\n"
          "'uint32', 'int64', 'uint64', 'float16', 'bfloat16', 'float32', 'float64', 'bool'.")
      .def_prop_ro(
          "itemsize", [](const PyBuffer& b) { return itemsize(*b.dtype); },
          "int: Bytes per element.")
      .def_prop_ro(
          "nbytes", [](const PyBuffer& b) { return b.nbytes; },
          "int: The size in bytes (elements x itemsize).")
      .def_prop_ro(
          "device", [](const PyBuffer& b) { return b.device; },
          "int: The index of the Buffer's device.")
      .def_prop_ro(
          "data_ptr",
          [](const PyBuffer& b) {
            check_live(b);
            return b.buf.address();
          },
          "int: The address of the first byte (a host address on unified memory, a device\n"
          "address on discrete memory).\n"
          "\n"
          "Raises:\n"
          "    ValueError: The Buffer was released (free()).")
      .def_prop_ro(
          "base",
          [](const PyBuffer& b) -> std::optional<BufferObject> {
            if (!b.base.is_valid() || b.base.is_none()) return std::nullopt;
            return BufferObject(b.base);
          },
          "mpsrt.Buffer | None: The Buffer whose memory this view shares (the original owner,\n"
          "also for a view of a view), or None.")
      .def_prop_ro(
          "byte_offset", [](const PyBuffer& b) { return b.buf.offset(); },
          "int: Bytes from the start of the memory to this Buffer's first byte (0 unless a\n"
          "view).");
}

// Views (view(), buf[i], buf[a:b]), len() along the first dimension, and repr().
void bind_views(nb::class_<PyBuffer>& cls) {
  cls.def("view", &view_method, nb::arg("offset") = 0, nb::arg("shape") = nb::none(),
          nb::arg("dtype") = nb::none(),
          "A Buffer over this one's bytes [offset, offset + its size): the same memory, kept\n"
          "alive while the view lives.\n"
          "\n"
          "Args:\n"
          "    offset: Bytes from this Buffer's start (a multiple of the dtype's itemsize from\n"
          "        the start of the memory).\n"
          "    shape: The view's shape; None: every byte from offset, as 1-D.\n"
          "    dtype: The view's dtype; None: this Buffer's (another one reinterprets the\n"
          "        bytes, as numpy's view).\n"
          "\n"
          "Returns:\n"
          "    mpsrt.Buffer: The view (its base is the Buffer that owns the memory).\n"
          "\n"
          "Raises:\n"
          "    TypeError: An argument has a wrong type.\n"
          "    ValueError: The range does not fit in the Buffer, is not a whole number of\n"
          "        elements, or is misaligned; the Buffer is a strided view; or it was\n"
          "        released.")
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
          "Fills every element with value, on the current stream.\n"
          "\n"
          "Args:\n"
          "    value: A bool, int or float that the dtype can hold.\n"
          "\n"
          "Returns:\n"
          "    mpsrt.Buffer: This Buffer.\n"
          "\n"
          "Raises:\n"
          "    TypeError: value is not a bool, int or float.\n"
          "    ValueError: value is out of the dtype's range, or the Buffer was released.")
      .def("copy_", &copy_, nb::arg("src").none(),
           nb::sig("def copy_(self, src: Buffer | numpy.typing.ArrayLike) -> Buffer"),
           "Copies a Buffer or host data of equal size into this Buffer.\n"
           "\n"
           "A Buffer is copied on the current stream (bytes; a strided view element by\n"
           "element); host data is copied after the pending work, complete when copy_()\n"
           "returns (staged on discrete memory).\n"
           "\n"
           "Args:\n"
           "    src: An mpsrt.Buffer, or host data with a numeric dtype (a numpy array or\n"
           "        anything numpy.ascontiguousarray() takes) of the same number of bytes.\n"
           "\n"
           "Returns:\n"
           "    mpsrt.Buffer: This Buffer.\n"
           "\n"
           "Raises:\n"
           "    TypeError: src is None, text, or data without a numeric dtype.\n"
           "    ValueError: The sizes differ (the shapes or itemsizes, for a strided view), or\n"
           "        either Buffer was released.")
      .def(
          "record_stream",
          [](PyBuffer& b, StreamArg stream) {
            const Stream s = stream.get("record_stream()");
            check_live(b);
            b.buf.record_stream(s);
          },
          nb::arg("stream"),
          "Marks the Buffer as used by a stream: its memory is not reused elsewhere until the\n"
          "stream's work so far is done (commands on other streams record this themselves).\n"
          "\n"
          "Args:\n"
          "    stream: The mpsrt.Stream that uses the Buffer.\n"
          "\n"
          "Raises:\n"
          "    TypeError: stream is not an mpsrt.Stream.\n"
          "    ValueError: The Buffer was released.")
      .def(
          "free",
          [](PyBuffer& b) {
            if (b.exports > 0) throw nb::buffer_error("free(): numpy/DLPack views are alive");
            b.buf.reset();
          },
          "Returns the memory to the cache now (stream-ordered); the Buffer can no longer be\n"
          "used. While views share the memory, only this Buffer's hold goes: the last Buffer\n"
          "over the memory returns it.\n"
          "\n"
          "Raises:\n"
          "    BufferError: numpy arrays or DLPack capsules over the memory are alive.");
}

// empty()'s own entry point (named on recorded native stacks).
[[gnu::noinline]] BufferObject empty(ShapeArg size, DTypeArg dtype, DeviceArg device,
                                     OptStreamArg stream) {
  return BufferObject(new_buffer(size, dtype, device, stream, "empty", "empty()"));
}

void bind_empty(nb::module_& m) {
  m.def("empty", &empty, nb::arg("size").none(), nb::arg("dtype") = nb::none(),
        nb::arg("device") = nb::none(), nb::arg("stream") = nb::none(),
        nb::sig("def empty(size: int | collections.abc.Sequence[int], dtype: str | "
                "numpy.dtype[typing.Any] | type | None = None, device: int | str | None = None, "
                "stream: Stream | None = None) -> Buffer"),
        "Uninitialised device memory from the caching allocator.\n"
        "\n"
        "Args:\n"
        "    size: The shape: an int or a sequence of ints, each >= 0.\n"
        "    dtype: The element type: a name ('float32'), a numpy dtype or type; None: uint8.\n"
        "    device: The device (an index, a device string such as 'mps:0', or None: the\n"
        "        stream's device, else the current device).\n"
        "    stream: The mpsrt.Stream the memory is first used on; None: the current stream.\n"
        "\n"
        "Returns:\n"
        "    mpsrt.Buffer: A contiguous Buffer of that shape and dtype.\n"
        "\n"
        "Raises:\n"
        "    TypeError: An argument has a wrong type.\n"
        "    ValueError: A size is negative, the dtype is unknown, the device does not exist,\n"
        "        or the stream is on another device.\n"
        "    mpsrt.OutOfMemoryError: The allocator cannot provide the memory (the message says\n"
        "        what is allocated, cached and the limit).\n"
        "\n"
        "Example:\n"
        "    >>> import mpsrt\n"
        "    >>> buf = mpsrt.empty((2, 3), dtype='float32')\n"
        "    >>> buf\n"
        "    Buffer(shape=(2, 3), dtype=float32, device=0, nbytes=24)\n"
        "    >>> buf.fill_(0.5).numpy()\n"
        "    array([[0.5, 0.5, 0.5],\n"
        "           [0.5, 0.5, 0.5]], dtype=float32)\n");
}

}  // namespace

nb::object new_buffer(ShapeArg size, DTypeArg dtype, DeviceArg device, OptStreamArg stream,
                      const char* caller, const char* call) {
  const nb::handle s_obj = stream.obj;
  size_t count = 0;
  const Shape shape = size.get(&count, call);
  const DType& dt = dtype.get(default_dtype());
  const int dev = device.obj.is_none() && !s_obj.is_none() && nb::isinstance<Stream>(s_obj)
                      ? nb::cast<Stream>(s_obj).device()
                      : device.get(caller);
  const Stream s = stream_arg(s_obj, dev);
  if (count > std::numeric_limits<size_t>::max() / itemsize(dt)) {
    throw nb::value_error((std::string(call) + ": the size in bytes overflows 64 bits").c_str());
  }
  const size_t nbytes = count * itemsize(dt);
  Buffer memory(nbytes, s);  // first: an allocation that fails leaves no Python object behind
  // Built in the Python object's own storage (one allocation, nothing moved). The type is
  // looked up once: nanobind's lookup is a hash probe per call.
  static const nb::handle type = nb::type<PyBuffer>();
  nb::object o = nb::inst_alloc(type);
  PyBuffer* b = new (nb::inst_ptr<PyBuffer>(o)) PyBuffer;
  b->buf = std::move(memory);
  b->shape = shape;
  b->dtype = &dt;
  b->device = dev;
  b->nbytes = nbytes;
  nb::inst_mark_ready(o);
  return o;
}

nb::class_<PyBuffer> init_buffer(nb::module_& m) {
  nb::class_<PyBuffer> cls(
      m, "Buffer",
      "Device memory from the caching allocator: a shape, a dtype and a device.\n"
      "\n"
      "Made by empty() and the random functions, or as a view of another Buffer\n"
      "(buf[i], buf[a:b], view(), narrow()). Fills and copies run on the current stream;\n"
      "numpy() and DLPack (numpy.from_dlpack, torch.from_dlpack) give its elements to the\n"
      "host, sharing the memory where it is host-visible (unified memory). Freeing is\n"
      "stream-ordered: the memory returns to the cache when the last Buffer over it goes\n"
      "and its last use on the device is done.\n"
      "\n"
      "Example:\n"
      "    >>> import mpsrt\n"
      "    >>> import numpy as np\n"
      "    >>> buf = mpsrt.empty((2, 4), dtype='float32').fill_(1.0)\n"
      "    >>> buf.shape, buf.dtype, buf.nbytes, buf.stride()\n"
      "    ((2, 4), 'float32', 32, (4, 1))\n"
      "    >>> row = buf[1]  # a view: the same memory\n"
      "    >>> row.copy_(np.arange(4, dtype=np.float32)).base is buf\n"
      "    True\n"
      "    >>> buf.numpy()\n"
      "    array([[1., 1., 1., 1.],\n"
      "           [0., 1., 2., 3.]], dtype=float32)\n"
      "    >>> col = buf.narrow(1, 2, 1)  # a strided view\n"
      "    >>> col.shape, col.is_contiguous()\n"
      "    ((2, 1), False)\n"
      "    >>> col.fill_(9.0).numpy().ravel()\n"
      "    array([9., 9.], dtype=float32)\n"
      "    >>> buf.free()  # the memory goes back to the cache now\n");
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
