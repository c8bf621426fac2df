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

class PyBuffer {
 public:
  Buffer buf;
  std::vector<int64_t> shape;
  const DType* dtype = nullptr;
  int device = 0;
  size_t nbytes = 0;
};

}  // namespace mpsrt::python
