// The random-number fill of the cpu backend (mpsrt/philox.h's stream definition), written once
// over a generator policy G and instantiated per ISA in random_<isa>.cpp, each compiled with
// its own -m flags and -ffp-contract=off (a contracted multiply-add would change uniform's
// low + (high - low) * u and normal's mean + std * z; normal_impl.h writes its fused
// multiply-adds out, the same on every table). Everything here
// has internal linkage; the SIMD translation units call no external inline function either
// (philox.h's functions are used by the scalar table only), so no AVX-512 code can reach the scalar
// path through a merged inline definition.
//
// G provides:
//   kStepBlocks                 blocks per step of its fused loops (0: no fused loops)
//   blocks(out, seed, blk, nb)  the 4 * nb words of blocks blk .. blk + nb - 1, memory order
//   u_f32(w), u_f16(w), u_bf16(w), u_f64(lo, hi)   philox.h's uniform transforms
//   normal_f32(w, z, pairs, mean, sd), normal_f64(...)  normal_impl.h's box_muller_f32 /
//                               box_muller over the table's simd.h layer (the same algorithm,
//                               so the same bits); they write whole multiples of
//                               kNormalLanesF32 / kNormalLanesF64 pairs (nrm::Normal<S>)
//   kHalfFused                  whether it converts to float16 / bfloat16 in vector registers
// and, when kStepBlocks > 0, fused loops that write `steps` * kStepBlocks blocks' worth of
// elements starting at block blk (`aligned`: out is 64-byte aligned; `nt`: streaming stores):
//   bits(uint32_t* out, seed, blk, steps, aligned, nt)
//   uniform_f32(float* out, seed, blk, steps, lo, span, aligned, nt)
//   uniform_f64(double* out, seed, blk, steps, lo, span, aligned, nt)
// and, when kHalfFused, the float16 / bfloat16 (bf16) uniform and conversion:
//   uniform_half(uint16_t* out, seed, blk, steps, lo, span, bf16, aligned, nt)
//   half_from_f32(src, dst, n, bf16)  float32 -> float16 / bfloat16, as f32_to_f16 / _bf16
// and, when it has kNormalStepBlocks (blocks per step), the float32 normal fused with Philox:
//   normal_f32_fused(float* out, seed, blk, steps, mean, sd, aligned, nt)
// A member a table lacks is never named for it (if constexpr).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/backend.h"
#include "mpsrt/half.h"

namespace mpsrt::cpu {
namespace {

namespace rnd {

using backend::RandomDType;
using backend::RandomOp;
using backend::RandomParams;

/// From this many bytes up, fused loops use streaming stores (~L2 size). The size that counts
/// is the whole op's (p.count) or this call's, whichever is larger: a fill split over threads
/// into small pieces still bypasses the cache when the whole fill would not fit in it.
constexpr uint64_t kNtMinBytes = uint64_t(1) << 20;
/// Blocks generated per round trip through the word buffer of the generic loops (4 KiB).
constexpr uint64_t kChunkBlocks = 256;

inline uint64_t min_u64(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}

__extension__ typedef unsigned __int128 u128;

/// a % d for 32-bit a and 1 <= d <= 2^32 without a division (Lemire, Kaser and Kurz, "Faster
/// remainder by direct computation", 2019: exact for 32-bit operands with a 64-bit reciprocal;
/// d = 2^32 gives m = 2^32 and a back, d = 1 gives m = 0).
struct FastMod32 {
  uint64_t m, d;
  explicit FastMod32(uint64_t divisor) : m(~uint64_t(0) / divisor + 1), d(divisor) {}
  uint64_t operator()(uint32_t a) const {
    const uint64_t low = m * a;
    return static_cast<uint64_t>((static_cast<u128>(low) * d) >> 64);
  }
};

/// float32 -> float16 / bfloat16 bits: the runtime's one conversion (mpsrt/half.h).
inline uint16_t f32_to_f16(float f) {
  return float_to_half_bits(f);
}
inline uint16_t f32_to_bf16(float f) {
  return float_to_bfloat16_bits(f);
}

/// Generic loop: element e of [first, first + n) is f(words wpe * e .. wpe * e + wpe - 1).
template <class G, class T, class F>
void generic_loop(T* dst, const RandomParams& p, uint64_t first, uint64_t n, unsigned wpe, F f) {
  alignas(64) uint32_t buf[kChunkBlocks * 4];
  const uint64_t max_elems = (kChunkBlocks - 1) * 4 / wpe;  // room for a ragged first block
  uint64_t e = first;
  const uint64_t end = first + n;
  while (e < end) {
    const uint64_t m = min_u64(end - e, max_elems);
    const uint64_t w0 = e * wpe, w1 = (e + m) * wpe;
    const uint64_t b0 = w0 / 4, b1 = (w1 + 3) / 4;
    G::blocks(buf, p.seed, p.offset + b0, b1 - b0);
    const uint32_t* w = buf + (w0 - 4 * b0);
    T* d = dst + e;
    for (uint64_t i = 0; i < m; ++i) d[i] = f(w + wpe * i);
    e += m;
  }
}

/// float32 -> float16 / bfloat16 bits, element by element (the tables without a vector form).
inline void half_from_f32_scalar(const float* src, uint16_t* dst, uint64_t n, bool bf16) {
  if (bf16) {
    for (uint64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
  } else {
    for (uint64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
  }
}

/// float32 -> float16 / bfloat16 bits: G's vector conversion where it has one (kHalfFused).
template <class G>
void half_from_f32(const float* src, uint16_t* dst, uint64_t n, bool bf16) {
  if constexpr (G::kHalfFused) {
    G::half_from_f32(src, dst, n, bf16);
  } else {
    half_from_f32_scalar(src, dst, n, bf16);
  }
}

/// Normal: element e comes from the word pair (e & ~1, e | 1); even elements take the cosine,
/// odd ones the sine. G::normal_f32 / G::normal_f64 (normal_impl.h's box_muller) turn the pairs
/// of a chunk into mean + std * Z (float or double); float16 / bfloat16 round the float32 value.
template <class G, class T, class Z>
void normal_loop(T* dst, const RandomParams& p, uint64_t first, uint64_t n, bool bf16 = false) {
  constexpr uint64_t kPad = 32;  // words past the chunk: box_muller rounds pairs up to its lanes
  alignas(64) uint32_t buf[kChunkBlocks * 4 + kPad];
  alignas(64) Z z[kChunkBlocks * 4 + kPad];
  std::memset(buf, 0, sizeof buf);  // the padding pairs are computed and dropped
  const uint64_t end = first + n;
  uint64_t q = first / 2;                // first pair
  const uint64_t q_end = (end + 1) / 2;  // one past the last pair
  const uint64_t max_pairs = (kChunkBlocks - 1) * 2;
  while (q < q_end) {
    const uint64_t m = min_u64(q_end - q, max_pairs);
    const uint64_t w0 = 2 * q, w1 = 2 * (q + m);
    const uint64_t b0 = w0 / 4, b1 = (w1 + 3) / 4;
    G::blocks(buf, p.seed, p.offset + b0, b1 - b0);
    const uint32_t* w = buf + (w0 - 4 * b0);
    const uint64_t e0 = 2 * q;
    const uint64_t lo = first > e0 ? first - e0 : 0;
    const uint64_t hi = min_u64(2 * m, end - e0);
    // Whole multiples of the kernel's lanes go straight to dst when the chunk is all wanted
    // (no copy through z); the rest through z.
    uint64_t direct = 0;
    if constexpr (sizeof(T) == sizeof(Z)) {
      constexpr uint64_t lanes = sizeof(Z) == 4 ? G::kNormalLanesF32 : G::kNormalLanesF64;
      if (lo == 0 && hi == 2 * m) direct = m / lanes * lanes;
    }
    const auto normal = [&](const uint32_t* ww, Z* out, uint64_t pairs) {
      if (pairs == 0) return;
      if constexpr (sizeof(Z) == 4) {
        G::normal_f32(ww, out, pairs, static_cast<float>(p.a), static_cast<float>(p.b));
      } else {
        G::normal_f64(ww, out, pairs, p.a, p.b);
      }
    };
    if constexpr (sizeof(T) == sizeof(Z)) normal(w, reinterpret_cast<Z*>(dst + e0), direct);
    normal(w + 2 * direct, z + 2 * direct, m - direct);
    if constexpr (sizeof(T) == sizeof(Z)) {
      const uint64_t from = lo > 2 * direct ? lo : 2 * direct;
      if (hi > from) std::memcpy(dst + e0 + from, z + from, (hi - from) * sizeof(T));
    } else {
      half_from_f32<G>(z + lo, dst + e0 + lo, hi - lo, bf16);
    }
    q += m;
  }
}

/// A fused loop for the body and generic(first, n) for the ragged head and tail. Elements use
/// wpe words each (1 or 2); fused(out, blk, steps, aligned, nt) writes steps * step_blocks
/// blocks' worth of elements at out, which starts at block blk.
template <class T, class Generic, class Fused>
void fused_loop(T* dst, const RandomParams& p, uint64_t first, uint64_t n, unsigned wpe,
                uint64_t step_blocks, Generic generic, Fused fused) {
  const uint64_t epb = 4 / wpe;            // elements per block
  const uint64_t eps = epb * step_blocks;  // elements per step
  const uint64_t end = first + n;
  uint64_t e0 = (first + epb - 1) / epb * epb;  // first block boundary
  bool aligned = false;
  const uintptr_t base = reinterpret_cast<uintptr_t>(dst);
  for (uint64_t c = e0, k = 0; k < 64 / (epb * sizeof(T)); ++k, c += epb) {
    if (((base + c * sizeof(T)) & 63) == 0) {
      e0 = c;
      aligned = true;
      break;
    }
  }
  if (e0 >= end || end - e0 < eps) {
    generic(first, n);
    return;
  }
  const uint64_t steps = (end - e0) / eps;
  const bool nt = aligned && (n > p.count ? n : p.count) * sizeof(T) >= kNtMinBytes;
  generic(first, e0 - first);
  fused(dst + e0, p.offset + e0 * wpe / 4, steps, aligned, nt);
  const uint64_t e1 = e0 + steps * eps;
  generic(e1, end - e1);
}

/// Body or generic, by whether G has fused loops (for this op: Enable).
template <class G, bool Enable = (G::kStepBlocks > 0), class T, class F, class Fused>
void body_loop(T* dst, const RandomParams& p, uint64_t first, uint64_t n, unsigned wpe, F f,
               Fused fused) {
  if constexpr (Enable) {
    fused_loop(
        dst, p, first, n, wpe, G::kStepBlocks,
        [&](uint64_t a, uint64_t k) { generic_loop<G>(dst, p, a, k, wpe, f); }, fused);
  } else {
    (void)fused;
    generic_loop<G>(dst, p, first, n, wpe, f);
  }
}

template <class G, class = void>
struct HasNormalFused : std::false_type {};
template <class G>
struct HasNormalFused<G, std::void_t<decltype(G::kNormalStepBlocks)>> : std::true_type {};

/// Normal float32: Philox fused with Box-Muller for the body where G has it (no word buffer).
template <class G>
void normal_f32(float* dst, const RandomParams& p, uint64_t first, uint64_t n) {
  const auto generic = [&](uint64_t a, uint64_t k) {
    if (k > 0) normal_loop<G, float, float>(dst, p, a, k);
  };
  if constexpr (HasNormalFused<G>::value) {
    const float mean = static_cast<float>(p.a), sd = static_cast<float>(p.b);
    fused_loop(dst, p, first, n, 1, G::kNormalStepBlocks, generic,
               [&](float* out, uint64_t blk, uint64_t steps, bool aligned, bool nt) {
                 G::normal_f32_fused(out, p.seed, blk, steps, mean, sd, aligned, nt);
               });
  } else {
    generic(first, n);
  }
}

template <class G, class T>
void bernoulli(void* dst, const RandomParams& p, uint64_t first, uint64_t n, T one) {
  const uint64_t t = p.threshold;
  generic_loop<G>(static_cast<T*>(dst), p, first, n, 1,
                  [t, one](const uint32_t* w) { return w[0] < t ? one : T(0); });
}

/// IntRange: element e is conv(low + x) with x = w % r (r <= 2^32, one word) or
/// ((hi << 32) | lo) % r (two words), the sum in two's complement; conv writes it as T.
template <class G, class T, class Conv>
void int_range(void* dst, const RandomParams& p, uint64_t first, uint64_t n, Conv conv) {
  const uint64_t low = static_cast<uint64_t>(p.low);
  const uint64_t r = p.range == 0 ? 1 : p.range;
  if (r <= (uint64_t(1) << 32)) {
    if constexpr (G::kStepBlocks > 0) {  // the SIMD tables: no division
      const FastMod32 mod(r);
      generic_loop<G>(static_cast<T*>(dst), p, first, n, 1,
                      [low, mod, conv](const uint32_t* w) { return conv(low + mod(w[0])); });
    } else {  // the scalar table: the definition itself
      generic_loop<G>(static_cast<T*>(dst), p, first, n, 1,
                      [low, r, conv](const uint32_t* w) { return conv(low + w[0] % r); });
    }
  } else {
    generic_loop<G>(static_cast<T*>(dst), p, first, n, 2, [low, r, conv](const uint32_t* w) {
      return conv(low + ((static_cast<uint64_t>(w[1]) << 32) | w[0]) % r);
    });
  }
}

/// IntRange into an integer dtype: the low bytes of the two's complement sum.
template <class G, class T>
void int_range(void* dst, const RandomParams& p, uint64_t first, uint64_t n) {
  int_range<G, T>(dst, p, first, n, [](uint64_t v) { return static_cast<T>(v); });
}

/// The value of IntRange's sum: a signed integer (the core keeps it within the dtype's
/// exact range, |v| <= 2^53 for floats, so every conversion below is exact).
inline int64_t int_range_value(uint64_t v) {
  return static_cast<int64_t>(v);
}

/// Bits: the words themselves (uint32 only).
template <class G>
void bits_op(void* dst, const RandomParams& p, uint64_t first, uint64_t n) {
  if (p.dtype != RandomDType::U32) return;
  body_loop<G>(
      static_cast<uint32_t*>(dst), p, first, n, 1, [](const uint32_t* w) { return w[0]; },
      [&](uint32_t* out, uint64_t blk, uint64_t steps, bool aligned, bool nt) {
        if constexpr (G::kStepBlocks > 0) G::bits(out, p.seed, blk, steps, aligned, nt);
      });
}

/// Uniform float32: low + (high - low) u in float32. (The fused loops of these ops call G's
/// only where G has them: body_loop calls its fused lambda only then.)
template <class G>
void uniform_f32(float* dst, const RandomParams& p, uint64_t first, uint64_t n) {
  const float lo = static_cast<float>(p.a), hi = static_cast<float>(p.b);
  const float span = hi - lo;
  body_loop<G>(
      dst, p, first, n, 1,
      [lo, span](const uint32_t* w) {
        const float t = span * G::u_f32(w[0]);
        return lo + t;
      },
      [&](float* out, uint64_t blk, uint64_t steps, bool aligned, bool nt) {
        if constexpr (G::kStepBlocks > 0) {
          G::uniform_f32(out, p.seed, blk, steps, lo, span, aligned, nt);
        }
      });
}

/// Uniform float16 / bfloat16 (Bf16): the float32 value low + (high - low) u, rounded.
template <class G, bool Bf16>
void uniform_half(uint16_t* dst, const RandomParams& p, uint64_t first, uint64_t n) {
  const float lo = static_cast<float>(p.a), hi = static_cast<float>(p.b);
  const float span = hi - lo;
  body_loop<G, G::kHalfFused>(
      dst, p, first, n, 1,
      [lo, span](const uint32_t* w) {
        if constexpr (Bf16) {
          const float t = span * G::u_bf16(w[0]);
          return f32_to_bf16(lo + t);
        } else {
          const float t = span * G::u_f16(w[0]);
          return f32_to_f16(lo + t);
        }
      },
      [&](uint16_t* out, uint64_t blk, uint64_t steps, bool aligned, bool nt) {
        if constexpr (G::kHalfFused) {
          G::uniform_half(out, p.seed, blk, steps, lo, span, Bf16, aligned, nt);
        }
      });
}

/// Uniform float64: low + (high - low) u in double, u from two words.
template <class G>
void uniform_f64(double* dst, const RandomParams& p, uint64_t first, uint64_t n) {
  const double lo = p.a, span = p.b - p.a;
  body_loop<G>(
      dst, p, first, n, 2,
      [lo, span](const uint32_t* w) {
        const double t = span * G::u_f64(w[0], w[1]);
        return lo + t;
      },
      [&](double* out, uint64_t blk, uint64_t steps, bool aligned, bool nt) {
        if constexpr (G::kStepBlocks > 0) {
          G::uniform_f64(out, p.seed, blk, steps, lo, span, aligned, nt);
        }
      });
}

template <class G>
void uniform_op(void* dst, const RandomParams& p, uint64_t first, uint64_t n) {
  switch (p.dtype) {
    case RandomDType::F32:
      uniform_f32<G>(static_cast<float*>(dst), p, first, n);
      return;
    case RandomDType::F16:
      uniform_half<G, false>(static_cast<uint16_t*>(dst), p, first, n);
      return;
    case RandomDType::BF16:
      uniform_half<G, true>(static_cast<uint16_t*>(dst), p, first, n);
      return;
    case RandomDType::F64:
      uniform_f64<G>(static_cast<double*>(dst), p, first, n);
      return;
    default:
      return;
  }
}

template <class G>
void normal_op(void* dst, const RandomParams& p, uint64_t first, uint64_t n) {
  switch (p.dtype) {
    case RandomDType::F32:
      normal_f32<G>(static_cast<float*>(dst), p, first, n);
      return;
    case RandomDType::F16:
    case RandomDType::BF16:
      normal_loop<G, uint16_t, float>(static_cast<uint16_t*>(dst), p, first, n,
                                      p.dtype == RandomDType::BF16);
      return;
    case RandomDType::F64:
      normal_loop<G, double, double>(static_cast<double*>(dst), p, first, n);
      return;
    default:
      return;
  }
}

template <class G>
void int_range_op(void* dst, const RandomParams& p, uint64_t first, uint64_t n) {
  switch (p.dtype) {
    case RandomDType::U8:
    case RandomDType::I8:
      int_range<G, uint8_t>(dst, p, first, n);
      return;
    case RandomDType::I16:
    case RandomDType::U16:
      int_range<G, uint16_t>(dst, p, first, n);
      return;
    case RandomDType::I32:
    case RandomDType::U32:
      int_range<G, uint32_t>(dst, p, first, n);
      return;
    case RandomDType::I64:
    case RandomDType::U64:
      int_range<G, uint64_t>(dst, p, first, n);
      return;
    case RandomDType::Bool:
      int_range<G, uint8_t>(dst, p, first, n,
                            [](uint64_t v) { return static_cast<uint8_t>(v != 0); });
      return;
    case RandomDType::F16:
      int_range<G, uint16_t>(dst, p, first, n, [](uint64_t v) {
        return f32_to_f16(static_cast<float>(int_range_value(v)));
      });
      return;
    case RandomDType::BF16:
      int_range<G, uint16_t>(dst, p, first, n, [](uint64_t v) {
        return f32_to_bf16(static_cast<float>(int_range_value(v)));
      });
      return;
    case RandomDType::F32:
      int_range<G, float>(dst, p, first, n,
                          [](uint64_t v) { return static_cast<float>(int_range_value(v)); });
      return;
    case RandomDType::F64:
      int_range<G, double>(dst, p, first, n,
                           [](uint64_t v) { return static_cast<double>(int_range_value(v)); });
      return;
    default:
      return;
  }
}

template <class G>
void bernoulli_op(void* dst, const RandomParams& p, uint64_t first, uint64_t n) {
  switch (p.dtype) {
    case RandomDType::U8:
    case RandomDType::I8:
    case RandomDType::Bool:
      bernoulli<G, uint8_t>(dst, p, first, n, 1);
      return;
    case RandomDType::I16:
      bernoulli<G, uint16_t>(dst, p, first, n, 1);
      return;
    case RandomDType::I32:
      bernoulli<G, uint32_t>(dst, p, first, n, 1);
      return;
    case RandomDType::I64:
      bernoulli<G, uint64_t>(dst, p, first, n, 1);
      return;
    case RandomDType::F16:
      bernoulli<G, uint16_t>(dst, p, first, n, 0x3c00);
      return;
    case RandomDType::BF16:
      bernoulli<G, uint16_t>(dst, p, first, n, 0x3f80);
      return;
    case RandomDType::F32:
      bernoulli<G, float>(dst, p, first, n, 1.0f);
      return;
    case RandomDType::F64:
      bernoulli<G, double>(dst, p, first, n, 1.0);
      return;
    default:
      return;
  }
}

/// The table's SimdOps::random: elements [first, first + n) of the fill p.
template <class G>
void random_impl(void* dst, const RandomParams& p, uint64_t first, uint64_t n) {
  if (n == 0) return;
  switch (p.op) {
    case RandomOp::Bits:
      bits_op<G>(dst, p, first, n);
      return;
    case RandomOp::Uniform:
      uniform_op<G>(dst, p, first, n);
      return;
    case RandomOp::Normal:
      normal_op<G>(dst, p, first, n);
      return;
    case RandomOp::IntRange:
      int_range_op<G>(dst, p, first, n);
      return;
    case RandomOp::Bernoulli:
      bernoulli_op<G>(dst, p, first, n);
      return;
  }
}

}  // namespace rnd
}  // namespace
}  // namespace mpsrt::cpu
