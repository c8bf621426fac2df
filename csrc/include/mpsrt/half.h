// float32 -> float16 / bfloat16 bit patterns: the one conversion the runtime uses wherever it
// writes a 16-bit float (Buffer.fill_, the random fills' scalar paths; the SIMD paths match it
// bit for bit: vcvtps2ph's IEEE rounding).
#pragma once

#include <cstdint>
#include <cstring>

namespace mpsrt {

/// IEEE binary16 bits of f, rounded to nearest even: overflow gives infinity, a NaN stays a
/// quiet NaN with the top bits of its payload (as x86's vcvtps2ph and ARM's fcvt).
inline uint16_t float_to_half_bits(float f) noexcept {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf, nan
    return static_cast<uint16_t>(sign | 0x7c00u |
                                 (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
  }
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (ax < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
    const uint32_t e = ax >> 23;
    if (e < 102) return static_cast<uint16_t>(sign);  // below 2^-25 (or a tie at it): zero
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 .. 24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  const uint32_t r = ax - (112u << 23);  // rebias 127 -> 15
  uint32_t q = r >> 13;
  const uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

/// bfloat16 bits of f, rounded to nearest even (a NaN stays a quiet NaN).
inline uint16_t float_to_bfloat16_bits(float f) noexcept {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace mpsrt
