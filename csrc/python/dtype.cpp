// Bindings' element types: the dtype table and what names a dtype, shapes, fill values.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <limits>
#include <string>

#include "mpsrt/half.h"
#include "python/args.h"
#include "python/buffer.h"

namespace mpsrt::python {

namespace {

using D = mpsrt::DType;

// In the order error messages list them.
constexpr DType kDTypes[] = {
    make_dtype(D::U8),   make_dtype(D::I8),   make_dtype(D::I16), make_dtype(D::U16),
    make_dtype(D::I32),  make_dtype(D::U32),  make_dtype(D::I64), make_dtype(D::U64),
    make_dtype(D::F16),  make_dtype(D::BF16), make_dtype(D::F32), make_dtype(D::F64),
    make_dtype(D::Bool),
};
static_assert(sizeof(kDTypes) / sizeof(kDTypes[0]) == size_t(kDTypeCount), "every dtype");

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

}  // namespace

Shape ShapeArg::get(size_t* count, const char* caller_name) const {
  const nb::handle size = obj;
  Shape shape;
  // The message's text is made on the error path only (empty(n)'s cost is counted in ns).
  auto add = [&](nb::handle h) {
    if (!PyLong_Check(h.ptr()) || PyBool_Check(h.ptr())) {
      type_error_got(std::string(caller_name) + ": size must be an int or a sequence of ints", h);
    }
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
    if (overflow != 0 || v < 0) {
      throw nb::value_error((std::string(caller_name) +
                             ": sizes must be >= 0 and fit in 64 bits, got " +
                             nb::cast<std::string>(nb::str(h)))
                                .c_str());
    }
    if (shape.ndim == Shape::kMaxDims) {
      throw nb::value_error(
          (std::string(caller_name) + ": at most 16 dimensions are supported").c_str());
    }
    shape.dims[shape.ndim++] = v;
  };
  if (PyLong_CheckExact(size.ptr())) {  // one dimension: the common case, checked at once
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(size.ptr(), &overflow);
    if (overflow == 0 && v >= 0) {
      shape.dims[0] = v;
      shape.ndim = 1;
      *count = static_cast<size_t>(v);
      return shape;
    }
  }
  if (PyLong_Check(size.ptr()) && !PyBool_Check(size.ptr())) {
    add(size);
  } else if (PyTuple_Check(size.ptr())) {
    const Py_ssize_t n = PyTuple_GET_SIZE(size.ptr());
    for (Py_ssize_t i = 0; i < n; ++i) add(PyTuple_GET_ITEM(size.ptr(), i));
  } else if (PyList_Check(size.ptr())) {
    const Py_ssize_t n = PyList_GET_SIZE(size.ptr());
    for (Py_ssize_t i = 0; i < n; ++i) add(PyList_GET_ITEM(size.ptr(), i));
  } else {
    type_error_got(std::string(caller_name) + ": size must be an int or a sequence of ints", size);
  }
  size_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<size_t>::max() / static_cast<size_t>(d)) {
      throw nb::value_error(
          (std::string(caller_name) + ": the number of elements overflows 64 bits").c_str());
    }
    n *= static_cast<size_t>(d);
  }
  *count = n;
  return shape;
}

// The bit pattern of `value` in `dtype` (little-endian), for fill_.
uint64_t fill_pattern(nb::handle value, const DType& d) {
  const bool is_bool = PyBool_Check(value.ptr());
  const bool is_int = PyLong_Check(value.ptr()) && !is_bool;
  const bool is_float = PyFloat_Check(value.ptr());
  if (!is_bool && !is_int && !is_float) {
    type_error_got("fill_(): value must be a bool, int or float", value);
  }
  if (d.id == D::Bool) return PyObject_IsTrue(value.ptr()) ? 1 : 0;
  if (dtype_is_float(d.id)) {
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
    return d.id == D::BF16 ? float_to_bfloat16_bits(f) : float_to_half_bits(f);
  }
  if (is_float) {
    throw nb::type_error(
        (std::string("fill_(): a float cannot fill a buffer of ") + d.name + "; pass an int")
            .c_str());
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  const bool is_signed = dtype_info(d.id).code == DLPackCode::Int;
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

const DType& DTypeArg::get(const DType& dflt) const {
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

const DType& default_dtype() {
  return kDTypes[0];
}

}  // namespace mpsrt::python
