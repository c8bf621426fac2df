// Bindings: strided Buffer views (torch's narrow() along any dimension, and indexing a strided
// view): shape + element strides over a byte range of the memory, and the operations that work
// on them -- fills and copies as one command per run of contiguous elements, host copies in.
// numpy() and DLPack export them with their strides (buffer_host.cpp); the operations that need
// contiguous memory (view(), _raw(), the random fills) refuse them with require_contiguous().
#include <nanobind/stl/optional.h>

#include <algorithm>
#include <cstring>
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

namespace {

using BufferObject = nb::typed<nb::object, PyBuffer>;

Shape row_major(const Shape& shape) {
  Shape s;
  s.ndim = shape.ndim;
  int64_t step = 1;
  for (size_t i = shape.ndim; i-- > 0;) {
    s.dims[i] = step;
    step *= shape[i];
  }
  return s;
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string tuple_text(const Shape& s) {
  std::string t;
  for (int64_t d : s) t += (t.empty() ? "" : ", ") + std::to_string(d);
  return "(" + t + (s.size() == 1 ? ",)" : ")");
}

// Calls f(a_byte_offset, b_byte_offset, bytes) for each run of elements that is contiguous in
// two layouts of `shape` (element strides a and b, itemsize `item`), in element order: the
// innermost dimensions that are row-major in both make one run, the outer ones are walked.
template <class F>
void for_each_run(const Shape& shape, const Shape& a, const Shape& b, size_t item, F&& f) {
  if (numel(shape) == 0) return;
  int64_t run = 1;
  size_t outer = shape.ndim;  // dimensions [0, outer) are walked
  while (outer > 0) {
    const size_t d = outer - 1;
    if (shape[d] != 1 && (a[d] != run || b[d] != run)) break;
    run *= shape[d];
    --outer;
  }
  std::vector<int64_t> index(outer, 0);
  int64_t off_a = 0, off_b = 0;
  const auto isize = static_cast<int64_t>(item);
  while (true) {
    f(static_cast<size_t>(off_a * isize), static_cast<size_t>(off_b * isize),
      static_cast<size_t>(run * isize));
    size_t d = outer;  // the odometer: the last walked dimension turns fastest
    while (d > 0) {
      --d;
      if (++index[d] < shape[d]) {
        off_a += a[d];
        off_b += b[d];
        break;
      }
      off_a -= a[d] * (shape[d] - 1);
      off_b -= b[d] * (shape[d] - 1);
      index[d] = 0;
      if (d == 0) return;
    }
    if (outer == 0) return;
  }
}

// The dimension argument of narrow() / stride(), wrapped as torch wraps it.
size_t wrap_dim(nb::handle dim_obj, size_t ndim, const char* caller) {
  if (!PyLong_Check(dim_obj.ptr()) || PyBool_Check(dim_obj.ptr())) {
    type_error_got((std::string(caller) + ": dim must be an int").c_str(), dim_obj);
  }
  const long long dim = PyLong_AsLongLong(dim_obj.ptr());
  const auto n = static_cast<long long>(ndim == 0 ? 1 : ndim);
  if ((dim == -1 && PyErr_Occurred()) || dim < -n || dim >= n) {
    PyErr_Clear();
    throw nb::index_error(("Dimension out of range (expected to be in range of [" +
                           std::to_string(-n) + ", " + std::to_string(n - 1) + "], but got " +
                           nb::str(dim_obj).c_str() + ")")
                              .c_str());
  }
  return static_cast<size_t>(dim < 0 ? dim + n : dim);
}

long long int_arg(nb::handle v, const char* name) {
  if (!PyLong_Check(v.ptr()) || PyBool_Check(v.ptr())) {
    type_error_got((std::string("narrow(): ") + name + " must be an int").c_str(), v);
  }
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow != 0) {
    throw nb::value_error((std::string("narrow(): ") + name + " does not fit in 64 bits").c_str());
  }
  return x;
}

// torch's narrow(dim, start, length): a view of indices [start, start + length) of `dim`, with
// torch's checks and texts (IndexError for dim and start; ValueError, where torch raises
// RuntimeError, for the rest: API.md's type for a wrong value).
BufferObject narrow(nb::handle self, nb::handle dim_obj, nb::handle start_obj,
                    nb::handle length_obj) {
  PyBuffer& b = buffer_self(self, "narrow()");
  check_live(b);
  if (b.shape.empty()) throw nb::value_error("narrow() cannot be applied to a 0-dim Buffer.");
  const size_t dim = wrap_dim(dim_obj, b.shape.size(), "narrow()");
  long long start = int_arg(start_obj, "start");
  const long long length = int_arg(length_obj, "length");
  const long long size = b.shape[dim];
  if (start < -size || start > size) {
    throw nb::index_error(("start out of range (expected to be in range of [" +
                           std::to_string(-size) + ", " + std::to_string(size) + "], but got " +
                           std::to_string(start) + ")")
                              .c_str());
  }
  if (start < 0) start += size;
  if (length < 0) throw nb::value_error("narrow(): length must be non-negative.");
  if (start > size - length) {
    throw nb::value_error(("start (" + std::to_string(start) + ") + length (" +
                           std::to_string(length) + ") exceeds dimension size (" +
                           std::to_string(size) + ").")
                              .c_str());
  }
  const Shape strides = strides_of(b);
  Shape shape = b.shape;
  shape.dims[dim] = length;
  return BufferObject(strided_view(self, b, start * strides[dim], shape, strides));
}

nb::object stride(const PyBuffer& b, std::optional<nb::handle> dim) {
  const Shape s = strides_of(b);
  if (dim && !dim->is_none()) {
    if (b.shape.empty()) wrap_dim(*dim, 0, "stride()");  // torch: [-1, 0] for a 0-d tensor
    return nb::int_(b.shape.empty() ? 0 : s[wrap_dim(*dim, b.shape.size(), "stride()")]);
  }
  nb::list l;
  for (int64_t d : s) l.append(d);
  return nb::tuple(l);
}

}  // namespace

Shape strides_of(const PyBuffer& b) {
  return b.strides ? *b.strides : row_major(b.shape);
}

void require_contiguous(const PyBuffer& b, const char* what) {
  if (MPSRT_LIKELY(!b.strided)) return;
  throw nb::value_error((std::string("[buffer] ") + what +
                         ": this Buffer is a strided view (shape " + tuple_text(b.shape) +
                         ", strides " + tuple_text(*b.strides) + "), and " + what +
                         " needs contiguous memory; copy it into a contiguous Buffer first "
                         "(mpsrt.empty(v.shape, v.dtype, v.device).copy_(v))")
                            .c_str());
}

nb::object strided_view(nb::handle self, PyBuffer& b, int64_t first, const Shape& shape,
                        const Shape& strides) {
  check_live(b);
  const size_t item = itemsize(*b.dtype);
  const int64_t count = numel(shape);
  // The elements span [first, first + 1 + sum((size - 1) * stride)) of b's element range.
  int64_t last = first;
  for (size_t i = 0; i < shape.size(); ++i) last += (shape[i] - 1) * strides[i];
  const bool contiguous = count == 0 || [&] {
    const Shape rm = row_major(shape);
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] != 1 && strides[i] != rm[i]) return false;
    }
    return true;
  }();
  const int64_t span = count == 0 ? 0 : last - first + 1;
  // No element: an empty range where the elements would start, kept inside b's bytes (a
  // strided b may end before `first`, as its last row does).
  if (count == 0) first = std::min<int64_t>(first, static_cast<int64_t>(b.buf.nbytes() / item));
  PyBuffer v;
  v.buf = b.buf.view(static_cast<size_t>(first) * item, static_cast<size_t>(span) * item);
  v.shape = shape;
  const Shape rm = row_major(shape);
  if (!std::equal(rm.begin(), rm.end(), strides.begin())) {
    v.strides = std::make_unique<Shape>(strides);
  }
  v.strided = !contiguous;
  v.dtype = b.dtype;
  v.device = b.device;
  v.nbytes = static_cast<size_t>(count) * item;
  v.base = b.base.is_valid() && !b.base.is_none() ? b.base : nb::borrow(self);
  return nb::cast(std::move(v), nb::rv_policy::move);
}

void fill_strided(PyBuffer& b, uint64_t pattern, const Stream& stream) {
  const Shape s = strides_of(b);
  const auto size = static_cast<unsigned>(itemsize(*b.dtype));
  for_each_run(b.shape, s, s, size,
               [&](size_t at, size_t, size_t n) { b.buf.view(at, n).fill(pattern, size, stream); });
}

void copy_strided(PyBuffer& dst, const PyBuffer& src, const Stream& stream) {
  for_each_run(dst.shape, strides_of(dst), strides_of(src), itemsize(*dst.dtype),
               [&](size_t to, size_t from, size_t n) {
                 dst.buf.view(to, n).copy_from(src.buf.view(from, n), stream);
               });
}

void copy_strided_from_host(PyBuffer& dst, const void* src) {
  if (void* host = dst.buf.host_ptr()) {
    synchronize(dst.device);  // as copy_from_host: after the device's pending work
    const Shape s = strides_of(dst);
    for_each_run(dst.shape, s, row_major(dst.shape), itemsize(*dst.dtype),
                 [&](size_t to, size_t from, size_t n) {
                   std::memcpy(static_cast<uint8_t*>(host) + to,
                               static_cast<const uint8_t*>(src) + from, n);
                 });
    return;
  }
  // Discrete memory: staged into a contiguous Buffer, then device copies into the view.
  const Stream stream = current_stream(dst.device);
  PyBuffer staged;
  staged.shape = dst.shape;
  staged.dtype = dst.dtype;
  staged.device = dst.device;
  staged.nbytes = dst.nbytes;
  staged.buf = Buffer(dst.nbytes, stream);
  staged.buf.copy_from_host(src, dst.nbytes);
  copy_strided(dst, staged, stream);
  Stream(stream).synchronize();  // complete when it returns, as every host copy in
}

void bind_strided(nb::class_<PyBuffer>& cls) {
  cls.def("narrow", &narrow, nb::arg("dim"), nb::arg("start"), nb::arg("length"),
          nb::sig("def narrow(self, dim: int, start: int, length: int) -> Buffer"),
          "A view of indices [start, start + length) of dimension dim, as torch's narrow().\n"
          "\n"
          "The same memory, with torch's shape, strides (stride()) and offset; a strided view\n"
          "where the elements are not contiguous (is_contiguous() False). Strided views work\n"
          "with fill_, copy_, numpy(), DLPack, indexing and narrow(); view() and the random\n"
          "fills need contiguous memory and refuse them.\n"
          "\n"
          "Args:\n"
          "    dim: The dimension (negative: from the end).\n"
          "    start: The first index kept (negative: from the end).\n"
          "    length: How many indices are kept, >= 0.\n"
          "\n"
          "Returns:\n"
          "    mpsrt.Buffer: The view.\n"
          "\n"
          "Raises:\n"
          "    IndexError: dim is out of range.\n"
          "    ValueError: start + length exceeds the dimension's size.")
      .def("stride", &stride, nb::arg("dim") = nb::none(),
           nb::sig("def stride(self, dim: int | None = None) -> tuple[int, ...] | int"),
           "The element strides, as torch's Tensor.stride(): row-major for a contiguous Buffer.\n"
           "\n"
           "Args:\n"
           "    dim: A dimension (negative: from the end), or None for all.\n"
           "\n"
           "Returns:\n"
           "    tuple[int, ...] | int: Every dimension's stride, or dim's.\n"
           "\n"
           "Raises:\n"
           "    IndexError: dim is out of range.")
      .def(
          "is_contiguous", [](const PyBuffer& b) { return !is_strided(b); },
          "Whether the elements are contiguous in row-major order (torch's\n"
          "Tensor.is_contiguous()).\n"
          "\n"
          "Returns:\n"
          "    bool: False for a strided view, True otherwise.");
}

}  // namespace mpsrt::python
