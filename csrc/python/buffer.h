// The Python Buffer: a caching-allocator Buffer with a shape and a dtype.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpsrt/allocator.h"
#include "mpsrt/dtype.h"
#include "python/args.h"
#include "python/bindings.h"

namespace mpsrt::python {

/// A dtype as the bindings use it: mpsrt/dtype.h's, with what the Python side reads of it at
/// hand (make_dtype derives every field from the one table).
struct DType {
  mpsrt::DType id;
  const char* name;
  uint8_t code;  // DLPack type code
  uint8_t bits;
};
constexpr DType make_dtype(mpsrt::DType id) noexcept {
  const DTypeInfo& i = dtype_info(id);
  return {id, i.name, static_cast<uint8_t>(i.code), static_cast<uint8_t>(8 * i.size)};
}

inline size_t itemsize(const DType& d) {
  return d.bits / 8;
}

/// The dtype of empty() without one: uint8.
const DType& default_dtype();

/// The bit pattern (little-endian, in the low itemsize bytes) of `value` (a bool, an int or a
/// float) as dtype `d`, for fill_; TypeError / ValueError when it cannot be one.
uint64_t fill_pattern(nb::handle value, const DType& d);

/// Up to kMaxDims dimensions, stored inline (no allocation on the empty() path). dims[0, ndim)
/// hold the shape; the rest is never set nor read (a copy moves the ndim dimensions only):
/// making and copying a Shape costs what it holds, not 128 bytes.
struct Shape {
  static constexpr size_t kMaxDims = 16;
  int64_t dims[kMaxDims];
  size_t ndim = 0;
  Shape() noexcept {}  // NOLINT(cppcoreguidelines-pro-type-member-init): dims past ndim unset
  Shape(const Shape& o) noexcept : ndim(o.ndim) { std::copy_n(o.dims, o.ndim, dims); }
  Shape& operator=(const Shape& o) noexcept {
    ndim = o.ndim;
    std::copy_n(o.dims, o.ndim, dims);
    return *this;
  }
  const int64_t* begin() const noexcept { return dims; }
  const int64_t* end() const noexcept { return dims + ndim; }
  size_t size() const noexcept { return ndim; }
  bool empty() const noexcept { return ndim == 0; }
  int64_t operator[](size_t i) const noexcept { return dims[i]; }
};

/// A Python Buffer: contiguous (row-major elements) or a strided view (`strided`; `strides`
/// the element strides of each dimension, >= 0, as torch's; made by narrow() or by indexing a
/// strided view). `buf` holds the bytes: for a strided view the range from its first element
/// to one past its last, of which the elements are a subset.
class PyBuffer {
 public:
  Buffer buf;
  Shape shape;
  // Element strides where they are not row-major (null: row-major): a strided view's, or a
  // contiguous view's whose dimensions of size 0 or 1 keep torch's strides (stride() reports
  // them, exports carry them).
  std::unique_ptr<Shape> strides;
  bool strided = false;  // the elements are not contiguous (a strided view)
  const DType* dtype = nullptr;
  int device = 0;
  size_t nbytes = 0;
  int exports = 0;  // live numpy / DLPack views
  nb::object base;  // the Buffer whose memory this one views (the first owner), or None
};

/// True for a strided (non-contiguous) view.
inline bool is_strided(const PyBuffer& b) noexcept {
  return b.strided;
}
/// The element strides of `b`: a strided view's own, row-major ones for a contiguous Buffer.
Shape strides_of(const PyBuffer& b);
/// ValueError for an operation (`what`, e.g. "view()") that needs contiguous memory, called on
/// a strided view; nothing for a contiguous Buffer.
void require_contiguous(const PyBuffer& b, const char* what);
/// A Python Buffer viewing the elements of `b` (the object `self`) at element offset `first`
/// from b's first element, with `shape` and element `strides`: contiguous when they are
/// row-major (up to dimensions of size 1) or it has no element, else a strided view.
nb::object strided_view(nb::handle self, PyBuffer& b, int64_t first, const Shape& shape,
                        const Shape& strides);
/// Encodes a fill of every element of a strided view on `stream`: one fill per run of
/// contiguous elements.
void fill_strided(PyBuffer& b, uint64_t pattern, const Stream& stream);
/// dst <- src element by element (equal shapes, equal itemsizes, either or both strided; src on
/// any device, `stream` on dst's): one Buffer::copy_from per run of elements contiguous in both.
void copy_strided(PyBuffer& dst, const PyBuffer& src, const Stream& stream);
/// dst <- `n` contiguous host bytes in element order, into a strided view: complete when it
/// returns, after the device's pending work.
void copy_strided_from_host(PyBuffer& dst, const void* src);

/// The Buffer a method was called on; a foreign `self` (Buffer.fill_(x)) is a TypeError that
/// names `caller`.
PyBuffer& buffer_self(nb::handle self, const char* caller);

/// ValueError when the Buffer was freed; the runtime's check that it belongs to this process.
void check_live(const PyBuffer& b);

/// A new contiguous Buffer (as a Python object) of `size` and `dtype` (None: uint8) from the
/// caching allocator, on `device` (None: the stream's, else the current device) and `stream`
/// (None: the device's current stream): empty() and the random constructors. Errors name
/// `caller` ("empty"; `call` its "empty()" form). Never inlined: each constructor's own frame stays
/// on the native stacks that allocation history records (stacks="all"), as torch's show the op that
/// allocated.
[[gnu::noinline]] nb::object new_buffer(ShapeArg size, DTypeArg dtype, DeviceArg device,
                                        OptStreamArg stream, const char* caller, const char* call);

/// Binds Buffer and empty() (buffer.cpp); the random fills add their methods to the class
/// (random.cpp).
nb::class_<PyBuffer> init_buffer(nb::module_& m);
/// Buffer's host access (buffer_host.cpp): _raw(), __dlpack__() and __dlpack_device__(); and
/// numpy(), the class's last method (see init_buffer).
void bind_host_access(nb::class_<PyBuffer>& cls);
void bind_numpy(nb::class_<PyBuffer>& cls);
/// narrow(), stride() and is_contiguous() (buffer_strided.cpp).
void bind_strided(nb::class_<PyBuffer>& cls);
void init_random(nb::module_& m, nb::class_<PyBuffer>& buffer);

}  // namespace mpsrt::python
