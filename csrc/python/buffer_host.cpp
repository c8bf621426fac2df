// Bindings: Buffer's host access: numpy(), _raw() and the DLPack export (__dlpack__,
// __dlpack_device__). On unified memory the host addresses a Buffer's memory directly; on
// discrete memory every host access is a copy, staged by the runtime.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "mpsrt/allocator.h"
#include "mpsrt/device.h"
#include "mpsrt/stream.h"
#include "python/bindings.h"
#include "python/buffer.h"

namespace mpsrt::python {

namespace {

namespace dl = nb::dlpack;
using DC = dl::dtype_code;

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

// The element strides an export carries: a strided view's, none (row-major) otherwise.
const int64_t* element_strides(const PyBuffer& b) {
  return b.strides ? b.strides->dims : nullptr;
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
  return nb::ndarray<>(p, shape.size(), shape.data(), owner, element_strides(b),
                       dl::dtype{b.dtype->code, b.dtype->bits, 1}, nb::device::cpu::value, 0);
}

// An array over the Buffer's device memory as the device sees it (discrete memory): the data
// pointer is the device address (Buffer.data_ptr), the device (kDLVulkan or kDLMetal, index).
nb::ndarray<> as_device_ndarray(PyBuffer& b, nb::handle self) {
  check_live(b);
  nb::object owner = export_owner(b, self);
  std::vector<size_t> shape(b.shape.begin(), b.shape.end());
  auto* p = reinterpret_cast<void*>(static_cast<uintptr_t>(b.buf.address()));
  return nb::ndarray<>(p, shape.size(), shape.data(), owner, element_strides(b),
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
// A strided view's copy holds the bytes its elements span, with its strides.
nb::ndarray<> host_copy(const PyBuffer& b, bool flat_bytes = false) {
  check_live(b);
  const size_t n = b.buf.nbytes();  // == b.nbytes unless strided
  std::unique_ptr<void, void (*)(void*)> bytes(host_bytes(n), &std::free);
  if (n != 0) {
    nb::gil_scoped_release release;
    b.buf.copy_to_host(bytes.get(), n);
  }
  nb::capsule owner(bytes.get(), [](void* p) noexcept { std::free(p); });
  void* p = bytes.release();
  if (flat_bytes) {
    const size_t n[1] = {b.nbytes};
    return nb::ndarray<>(p, 1, n, owner, nullptr, nb::dtype<uint8_t>(), nb::device::cpu::value, 0);
  }
  std::vector<size_t> shape(b.shape.begin(), b.shape.end());
  return nb::ndarray<>(p, shape.size(), shape.data(), owner, element_strides(b),
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
  if (b.strides) v.strides = std::make_unique<Shape>(*b.strides);  // a copy of the span
  v.strided = b.strided;
  const Stream s = current_stream(b.device);
  v.buf = Buffer(b.buf.nbytes(), s);
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
//
// What a __dlpack__ call asks for, from its keywords (checked in this order: the names, stream,
// dl_device, copy).
struct DlpackRequest {
  bool wait = true;            // stream None or >= 0: after the buffer's pending work; -1: at once
  bool copy = false;           // copy=True
  bool host_consumer = false;  // dl_device=(kDLCPU, 0), or numpy's call form (see above)
  nb::object max_version = nb::none();
};

// stream=: None or -1 (no synchronisation) or an int >= 0; whether the export waits.
bool dlpack_wait(const nb::object& stream) {
  if (stream.is_none()) return true;
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
  return v != -1;
}

// dl_device=: None, the Buffer's own device or (kDLCPU, 0).
void check_dl_device(const PyBuffer& b, const nb::object& dl_device, const nb::object& cpu) {
  if (dl_device.is_none()) return;
  if (!nb::isinstance<nb::tuple>(dl_device) || nb::len(dl_device) != 2) {
    type_error_got("__dlpack__(): dl_device must be None or a (device_type, index) tuple",
                   dl_device);
  }
  const bool visible = host_visible(b);
  const nb::object own = visible ? cpu : nb::make_tuple(device_dl_type(), b.device);
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

// The keywords of __dlpack__ (all optional, keyword-only), checked.
DlpackRequest dlpack_request(const PyBuffer& b, const nb::kwargs& kwargs) {
  nb::object stream = nb::none(), dl_device = nb::none(), copy = nb::none();
  bool stream_given = false, dl_device_given = false;
  DlpackRequest r;
  for (auto [key, value] : kwargs) {
    const std::string k = nb::cast<std::string>(nb::str(key));
    if (k == "stream") {
      stream = nb::borrow(value);
      stream_given = true;
    } else if (k == "max_version") {
      r.max_version = nb::borrow(value);
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
  r.wait = dlpack_wait(stream);
  const nb::object cpu = nb::make_tuple(int(nb::device::cpu::value), 0);
  check_dl_device(b, dl_device, cpu);
  if (!copy.is_none()) {
    if (!PyBool_Check(copy.ptr()))
      type_error_got("__dlpack__(): copy must be None or a bool", copy);
    r.copy = copy.ptr() == Py_True;
  }
  r.host_consumer =
      dl_device.equal(cpu) || (dl_device_given && dl_device.is_none() && !stream_given);
  return r;
}

// The array a checked request exports.
nb::ndarray<> dlpack_array(nb::handle self, PyBuffer& b, const DlpackRequest& r) {
  if (host_visible(b)) {
    if (r.wait && !r.copy) wait_for(b);
    return r.copy ? host_copy(b) : as_ndarray(b, self);
  }
  if (r.host_consumer) {
    if (!r.copy) refuse_implicit_host_copy(b);
    return host_copy(b);  // after the device's pending work
  }
  if (r.copy) {
    nb::object fresh = device_copy(b);
    if (r.wait) wait_for(b);
    return as_device_ndarray(nb::cast<PyBuffer&>(fresh), fresh);
  }
  if (r.wait) wait_for(b);
  return as_device_ndarray(b, self);
}

nb::object dlpack_export(nb::handle self, nb::kwargs kwargs) {
  PyBuffer& b = buffer_self(self, "__dlpack__()");
  const DlpackRequest r = dlpack_request(b, kwargs);
  nb::object out = nb::cast(nb::ndarray<nb::array_api>(dlpack_array(self, b, r)));
  // nanobind checks max_version and returns a versioned capsule for (1, 0) and later.
  return out.attr("__dlpack__")(nb::arg("max_version") = r.max_version);
}

nb::typed<nb::tuple, int, int> dlpack_device(const PyBuffer& b) {
  const bool visible = host_visible(b);
  return nb::typed<nb::tuple, int, int>(nb::make_tuple(
      visible ? int(nb::device::cpu::value) : device_dl_type(), visible ? 0 : b.device));
}

// A flat uint8 array of the bytes, after pending work: a view on unified memory, a copy on
// discrete memory.
nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> raw_bytes(nb::handle self) {
  PyBuffer& b = buffer_self(self, "_raw()");
  check_live(b);
  require_contiguous(b, "_raw()");
  if (!host_visible(b)) {
    return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(host_copy(b, true));
  }
  wait_for(b);
  size_t shape[1] = {b.nbytes};
  return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(b.buf.host_ptr(), 1, shape, self);
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

void bind_host_access(nb::class_<PyBuffer>& cls) {
  cls.def("_raw", &raw_bytes,
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
      .def("__dlpack_device__", &dlpack_device,
           "(kDLCPU, 0) on unified memory; on discrete memory (kDLVulkan=7 or kDLMetal=8, the\n"
           "device index).");
}

void bind_numpy(nb::class_<PyBuffer>& cls) {
  cls.def("numpy", &numpy_view, nb::sig("def numpy(self) -> numpy.typing.NDArray[typing.Any]"),
          "The elements as a numpy array, after the Buffer's pending work.\n"
          "\n"
          "Returns:\n"
          "    numpy.ndarray: On unified memory an array sharing the memory; on discrete\n"
          "    memory a host copy owning its bytes (writes to it do not reach the device;\n"
          "    copy_() does).\n"
          "\n"
          "Raises:\n"
          "    TypeError: The dtype is bfloat16 (numpy has none; use torch.from_dlpack()).\n"
          "    ValueError: The Buffer was released.");
}

}  // namespace mpsrt::python
