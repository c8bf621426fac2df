// What the GPU backends' random kernels (vulkan random.comp, metal: the same GLSL translated to
// MSL) take from a RandomParams, computed once for both: the kernel variant (its specialisation
// constants) and the argument fields every dispatch shares.
#pragma once

#include <cstdint>

#include "backends/backend.h"

namespace mpsrt::backend {

/// The kernel variant: op, dtype, wide, element size, words per element (the kernels'
/// constants 0-4), and the key that tells variants apart.
struct RandomVariant {
  uint32_t values[5];
  uint32_t key;
};

inline RandomVariant random_variant(const RandomParams& p) noexcept {
  RandomVariant v{
      {static_cast<uint32_t>(p.op), static_cast<uint32_t>(p.dtype), random_is_wide(p) ? 1u : 0u,
       static_cast<uint32_t>(dtype_size(p.dtype)), random_words_per_element(p)},
      0};
  v.key = v.values[0] | v.values[1] << 8 | v.values[2] << 16;
  return v;
}

/// Fills the fields every dispatch of p shares: seed, range, low, thresh (pairs of 32-bit
/// words, low first), fa / fb (float32: uniform low and high - low, normal mean and std) and
/// da / db (the same in float64, stored by dbl(double), so a backend can keep the bits).
template <class Args, class Dbl>
void pack_random_args(const RandomParams& p, Args& a, Dbl dbl) {
  a.seed[0] = static_cast<uint32_t>(p.seed);
  a.seed[1] = static_cast<uint32_t>(p.seed >> 32);
  const uint64_t range = p.range == 0 ? 1 : p.range;
  a.range[0] = static_cast<uint32_t>(range);
  // Wide: the high word; at most 2^32: 1 in the high word for exactly 2^32.
  a.range[1] = random_is_wide(p)              ? static_cast<uint32_t>(range >> 32)
               : range == (uint64_t(1) << 32) ? 1u
                                              : 0u;
  const uint64_t low = static_cast<uint64_t>(p.low);
  a.low[0] = static_cast<uint32_t>(low);
  a.low[1] = static_cast<uint32_t>(low >> 32);
  a.thresh[0] = static_cast<uint32_t>(p.threshold);
  a.thresh[1] = static_cast<uint32_t>(p.threshold >> 32);
  if (p.op == RandomOp::Uniform) {
    const float lo = static_cast<float>(p.a), hi = static_cast<float>(p.b);
    a.fa = lo;
    a.fb = hi - lo;
    a.da = dbl(p.a);
    a.db = dbl(p.b - p.a);
  } else {
    a.fa = static_cast<float>(p.a);
    a.fb = static_cast<float>(p.b);
    a.da = dbl(p.a);
    a.db = dbl(p.b);
  }
}

}  // namespace mpsrt::backend
