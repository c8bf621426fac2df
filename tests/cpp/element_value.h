// A test helper shared by the C++ tests: the value of one element a random fill wrote.
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/backend.h"

namespace mpsrt::test {

/// The floating-point element of dtype d at p as a double (float64 as is; float32, bfloat16 and
/// float16 through float32; float16 values must be normal numbers or zero).
inline double element_as_double(backend::RandomDType d, const uint8_t* p) {
  using backend::RandomDType;
  if (d == RandomDType::F64) {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  uint32_t bits = 0;
  if (d == RandomDType::F32) {
    std::memcpy(&bits, p, 4);
  } else {
    uint16_t h;
    std::memcpy(&h, p, 2);
    if (d == RandomDType::BF16) {
      bits = uint32_t(h) << 16;
    } else {  // f16 -> f32
      const uint32_t sign = uint32_t(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
      bits = e == 0 ? sign : sign | ((e + 112) << 23) | (m << 13);
    }
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace mpsrt::test
