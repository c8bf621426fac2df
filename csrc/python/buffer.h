// The Python Buffer: a caching-allocator Buffer with a shape and a dtype.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mpsrt/allocator.h"
#include "python/bindings.h"

namespace mpsrt::python {

struct DType {
  const char* name;
  uint8_t code;  // DLPack type code
  uint8_t bits;
};

/// The dtype named by a str, a numpy dtype or type, a torch dtype, or None (uint8).
const DType& parse_dtype(nb::handle obj, const DType& dflt);

/// Up to kMaxDims dimensions, stored inline (no allocation on the empty() path).
struct Shape {
  static constexpr size_t kMaxDims = 16;
  int64_t dims[kMaxDims] = {};
  size_t ndim = 0;
  const int64_t* begin() const noexcept { return dims; }
  const int64_t* end() const noexcept { return dims + ndim; }
  size_t size() const noexcept { return ndim; }
  bool empty() const noexcept { return ndim == 0; }
  int64_t operator[](size_t i) const noexcept { return dims[i]; }
};

class PyBuffer {
 public:
  Buffer buf;
  Shape shape;
  const DType* dtype = nullptr;
  int device = 0;
  size_t nbytes = 0;
  int exports = 0;  // live numpy / DLPack views
  nb::object base;  // the Buffer whose memory this one views (the first owner), or None
};

}  // namespace mpsrt::python
