// Bindings: Buffer (views, host access, DLPack, fills and copies) and empty().
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
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

// True where the host addresses the Buffer's memory directly (the unified memory model; an empty
// Buffer has no memory to stage either). On discrete memory every host access is a copy.
bool host_visible(const PyBuffer& b) {
  return b.nbytes == 0 || !b.buf.defined() || b.buf.host_ptr() != nullptr;
}

// The DLPack device type of memory the host cannot address: the backend's device API.
int device_dl_type() {
  const std::string name = backend_name();
  if (name == "vulkan") return nb::device::vulkan::value;
  if (name == "metal") return nb::device::metal::value;
  return nb::device::none::value;
}

// `owner` keeps `self` alive and counted as exported (free() refuses while an export lives).
nb::object export_owner(PyBuffer& b, nb::handle self) {
  ++b.exports;
  Py_INCREF(self.ptr());
  return nb::steal(PyCapsule_New(self.ptr(), "mpsrt.export", [](PyObject* cap) {
    auto* s = static_cast<PyObject*>(PyCapsule_GetPointer(cap, "mpsrt.export"));
    nb::inst_ptr<PyBuffer>(s)->exports--;
    Py_DECREF(s);
  }));
}

// An array over the Buffer's memory, as the host sees it (unified memory).
nb::ndarray<> as_ndarray(PyBuffer& b, nb::handle self) {
  check_live(b);
  void* p = b.buf.host_ptr();
  if (p == nullptr && b.nbytes != 0) {
    throw std::runtime_error(
        "[buffer] this device's memory is not host-visible (discrete memory); use a copy: "
        "Buffer.numpy() or __dlpack__(dl_device=(kDLCPU, 0), copy=True)");
  }
  nb::object owner = export_owner(b, self);
  std::vector<size_t> shape(b.shape.begin(), b.shape.end());
  return nb::ndarray<>(p, shape.size(), shape.data(), owner, nullptr,
                       dl::dtype{b.dtype->code, b.dtype->bits, 1}, nb::device::cpu::value, 0);
}

// An array over the Buffer's device memory as the device sees it (discrete memory): the data
// pointer is the device address (Buffer.data_ptr), the device (kDLVulkan or kDLMetal, index).
nb::ndarray<> as_device_ndarray(PyBuffer& b, nb::handle self) {
  check_live(b);
  nb::object owner = export_owner(b, self);
  std::vector<size_t> shape(b.shape.begin(), b.shape.end());
  auto* p = reinterpret_cast<void*>(static_cast<uintptr_t>(b.buf.address()));
  return nb::ndarray<>(p, shape.size(), shape.data(), owner, nullptr,
                       dl::dtype{b.dtype->code, b.dtype->bits, 1}, device_dl_type(), b.device);
}

// Host memory for a copy of n bytes (freed with std::free). From 2 MiB up it is 2 MiB-aligned
// and advised for transparent huge pages, so that filling it costs a page fault per 2 MiB
// instead of per 4 KiB: a fresh 256 MiB array filled at 2.6 GB/s in 4 KiB pages and 12 GB/s in
// huge pages on the development VM, where the copy itself is the point.
void* host_bytes(size_t n) {
  constexpr size_t kHuge = size_t(2) << 20;
  void* p = nullptr;
  if (n >= kHuge) {
    if (posix_memalign(&p, kHuge, n) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(p, n / kHuge * kHuge, MADV_HUGEPAGE);  // advice only: whole huge pages inside it
#endif
    return p;
  }
  p = std::malloc(std::max<size_t>(n, 1));
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

// A host copy of the buffer's bytes, owned by the returned array (numpy() and _raw() on discrete
// memory, DLPack copy=True), after the device's pending work: staged on discrete memory.
nb::ndarray<> host_copy(const PyBuffer& b, bool flat_bytes = false) {
  check_live(b);
  std::unique_ptr<void, void (*)(void*)> bytes(host_bytes(b.nbytes), &std::free);
  if (b.nbytes != 0) {
    nb::gil_scoped_release release;
    b.buf.copy_to_host(bytes.get(), b.nbytes);
  }
  nb::capsule owner(bytes.get(), [](void* p) noexcept { std::free(p); });
  void* p = bytes.release();
  if (flat_bytes) {
    const size_t n[1] = {b.nbytes};
    return nb::ndarray<>(p, 1, n, owner, nullptr, nb::dtype<uint8_t>(), nb::device::cpu::value, 0);
  }
  std::vector<size_t> shape(b.shape.begin(), b.shape.end());
  return nb::ndarray<>(p, shape.size(), shape.data(), owner, nullptr,
                       dl::dtype{b.dtype->code, b.dtype->bits, 1}, nb::device::cpu::value, 0);
}

// A new Buffer (as a Python object) with b's shape, dtype and a device copy of its bytes, on the
// device's current stream: DLPack copy=True to the device itself.
nb::object device_copy(const PyBuffer& b) {
  check_live(b);
  PyBuffer v;
  v.shape = b.shape;
  v.dtype = b.dtype;
  v.device = b.device;
  v.nbytes = b.nbytes;
  const Stream s = current_stream(b.device);
  v.buf = Buffer(b.nbytes, s);
  {
    nb::gil_scoped_release release;
    v.buf.copy_from(b.buf, s);
  }
  return nb::cast(std::move(v), nb::rv_policy::move);
}

[[noreturn]] void refuse_implicit_host_copy(const PyBuffer& b) {
  throw nb::buffer_error(
      ("[buffer] __dlpack__: this Buffer lives in device memory the host cannot address (device " +
       std::to_string(b.device) + ", " + backend_name() +
       ", discrete memory), so a host consumer gets only a copy, and only when it asks for one: "
       "use Buffer.numpy(), or numpy.from_dlpack(buf, copy=True) (__dlpack__(dl_device=(kDLCPU, "
       "0), copy=True))")
          .c_str());
}

// __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None), as the array API
// defines it. Unified memory: the host reads the memory directly (kDLCPU). Discrete memory: the
// device memory is exported as (kDLVulkan / kDLMetal, device index), data = its device address;
// a host consumer must ask for a copy (dl_device=(kDLCPU, 0), copy=True). numpy 2.x's
// from_dlpack names dl_device=None without a stream (it passes dl_device, copy and max_version,
// and reads host memory only); that call form is taken as a host consumer's, so that numpy gets
// the error that names the copy call instead of its own "Unsupported device in DLTensor".
nb::object dlpack_export(nb::handle self, nb::kwargs kwargs) {
  PyBuffer& b = buffer_self(self, "__dlpack__()");
  nb::object stream = nb::none(), max_version = nb::none(), dl_device = nb::none(),
             copy = nb::none();
  bool stream_given = false, dl_device_given = false;
  for (auto [key, value] : kwargs) {
    const std::string k = nb::cast<std::string>(nb::str(key));
    if (k == "stream") {
      stream = nb::borrow(value);
      stream_given = true;
    } else if (k == "max_version") {
      max_version = nb::borrow(value);
    } else if (k == "dl_device") {
      dl_device = nb::borrow(value);
      dl_device_given = true;
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
  const nb::object cpu = nb::make_tuple(int(nb::device::cpu::value), 0);
  const bool visible = host_visible(b);
  const nb::object own = visible ? cpu : nb::make_tuple(device_dl_type(), b.device);
  if (!dl_device.is_none()) {
    if (!nb::isinstance<nb::tuple>(dl_device) || nb::len(dl_device) != 2) {
      type_error_got("__dlpack__(): dl_device must be None or a (device_type, index) tuple",
                     dl_device);
    }
    if (!dl_device.equal(own) && !dl_device.equal(cpu)) {
      const std::string allowed = visible ? "(kDLCPU, 0)"
                                          : "(" + std::to_string(device_dl_type()) + ", " +
                                                std::to_string(b.device) +
                                                ") (its own device) or (kDLCPU, 0) with copy=True";
      throw nb::buffer_error(("__dlpack__: this mpsrt buffer can only be exported to the device " +
                              allowed + ", not " + nb::cast<std::string>(nb::str(dl_device)))
                                 .c_str());
    }
  }
  bool copy_bytes = false;
  if (!copy.is_none()) {
    if (!PyBool_Check(copy.ptr()))
      type_error_got("__dlpack__(): copy must be None or a bool", copy);
    copy_bytes = copy.ptr() == Py_True;
  }
  nb::ndarray<> nd;
  if (visible) {
    if (wait && !copy_bytes) wait_for(b);
    nd = copy_bytes ? host_copy(b) : as_ndarray(b, self);
  } else {
    const bool to_host =
        dl_device.equal(cpu) || (dl_device_given && dl_device.is_none() && !stream_given);
    if (to_host) {
      if (!copy_bytes) refuse_implicit_host_copy(b);
      nd = host_copy(b);  // after the device's pending work
    } else if (copy_bytes) {
      nb::object fresh = device_copy(b);
      if (wait) wait_for(b);
      nd = as_device_ndarray(nb::cast<PyBuffer&>(fresh), fresh);
    } else {
      if (wait) wait_for(b);
      nd = as_device_ndarray(b, self);
    }
  }
  nb::object out = nb::cast(nb::ndarray<nb::array_api>(nd));
  // nanobind checks max_version and returns a versioned capsule for (1, 0) and later.
  return out.attr("__dlpack__")(nb::arg("max_version") = max_version);
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

// Unified memory: an array over the Buffer's memory (after its pending work). Discrete memory:
// a host copy that owns its bytes (writes to it do not reach the device).
nb::ndarray<nb::numpy> numpy_view(nb::handle self) {
  PyBuffer& b = buffer_self(self, "numpy()");
  check_live(b);
  if (b.dtype->code == uint8_t(DC::Bfloat)) {
    throw nb::type_error("numpy() : numpy has no bfloat16; use torch.from_dlpack()");
  }
  if (!host_visible(b)) return nb::ndarray<nb::numpy>(host_copy(b));
  wait_for(b);
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
            check_live(b);
            if (!host_visible(b)) {
              return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(host_copy(b, true));
            }
            wait_for(b);
            size_t shape[1] = {b.nbytes};
            return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(b.buf.host_ptr(), 1, shape, self);
          },
          "A flat uint8 numpy array of the bytes, after pending work: a view on unified memory,\n"
          "a copy on discrete memory.")
      .def("__dlpack__", &dlpack_export,
           nb::sig("def __dlpack__(self, *, stream: int | None = None, max_version: "
                   "tuple[int, int] | None = None, dl_device: tuple[int, int] | None = None, "
                   "copy: bool | None = None) -> typing_extensions.CapsuleType"),
           "DLPack export (array API rules). stream: None waits for the buffer's pending work,\n"
           "-1 skips that (the consumer orders its reads itself), another int >= 0 waits too.\n"
           "max_version >= (1, 0) gives a versioned (writable) capsule. Unified memory: the\n"
           "device is (kDLCPU, 0); dl_device must be None or that; copy=True exports a host\n"
           "copy, None/False share the memory. Discrete memory: the device memory is exported\n"
           "as __dlpack_device__() says (data = the device address) for dl_device None or that\n"
           "device (copy=True: a device copy); dl_device=(kDLCPU, 0) needs copy=True (a host\n"
           "copy), else BufferError.")
      .def(
          "__dlpack_device__",
          [](const PyBuffer& b) {
            const bool visible = host_visible(b);
            return nb::typed<nb::tuple, int, int>(nb::make_tuple(
                visible ? int(nb::device::cpu::value) : device_dl_type(), visible ? 0 : b.device));
          },
          "(kDLCPU, 0) on unified memory; on discrete memory (kDLVulkan=7 or kDLMetal=8, the\n"
          "device index).")
      .def("fill_", &fill_, nb::arg("value").none(),
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
          "over the memory returns it.")
      // Last: in the stubs, the class attribute `numpy` would hide the module numpy from the
      // annotations of every method after it.
      .def("numpy", &numpy_view, nb::sig("def numpy(self) -> numpy.typing.NDArray[typing.Any]"),
           "The elements as a numpy array, after pending work: on unified memory an array\n"
           "sharing the memory; on discrete memory a host copy owning its bytes (writes to it do\n"
           "not reach the device; copy_() does).");

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
