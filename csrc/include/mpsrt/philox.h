// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
// stream definition of mpsrt's random numbers. Header-only: host code, tests and every
// backend's kernels (cpu SIMD; the GLSL and Metal kernels restate it) follow this file.
//
// Stream definition. key = (seed & 0xffffffff, seed >> 32). A generator's offset counts the
// 128-bit blocks already used. An op needing n 32-bit words uses blocks offset, offset + 1, ...
// (the block number is the 128-bit counter, as four little-endian uint32 words), takes word j
// from block j / 4, lane j % 4, and advances the offset by ceil(n / 4). The raw words equal
// Random123's philox4x32-10 for that key and counters.
//
// Transforms (bit-exact on every backend unless noted):
//   float32 uniform [0,1)  (w >> 8) * 2^-24                  one word
//   float16 uniform        (w >> 21) * 2^-11                 one word
//   bfloat16 uniform       (w >> 24) * 2^-8                  one word
//   float64 uniform        (((hi << 32) | lo) >> 11) * 2^-53   two words (lo = word 2e)
//   uniform(low, high)     low + (high - low) * u, in float32 (float64 for float64 output)
//   integers in [low, high) with r = high - low: r <= 2^32: low + w % r (one word);
//                          larger: low + ((hi << 32) | lo) % r (two words)
//   bernoulli(p)           w < ceil(p * 2^32) (p = 1 always true), one word
//   normal                 Box-Muller on word pairs (2e, 2e+1): u1 = ((w0 >> 8) + 1) * 2^-24,
//                          u2 = (w1 >> 8) * 2^-24, r = sqrt(-2 ln u1), element 2e = r cos(2 pi
//                          u2), element 2e+1 = r sin(2 pi u2); then mean + std * z. Agrees to
//                          within 2 ulp of float32 across backends (libm differs).
#pragma once

#include <cmath>
#include <cstdint>

/// Philox4x32-10 and the transforms of mpsrt's random numbers, header-only: the definition
/// every backend's kernels follow (see the top of mpsrt/philox.h).
namespace mpsrt::philox {

constexpr uint32_t kM0 = 0xD2511F53u;  ///< the multiplier of counter word 0
constexpr uint32_t kM1 = 0xCD9E8D57u;  ///< the multiplier of counter word 2
constexpr uint32_t kW0 = 0x9E3779B9u;  ///< key word 0's increment per round (golden ratio)
constexpr uint32_t kW1 = 0xBB67AE85u;  ///< key word 1's increment per round (sqrt(3) - 1)
constexpr int kRounds = 10;            ///< rounds per block (the "-10" of Philox4x32-10)

/// One 128-bit Philox block: four 32-bit words, word 0 first.
struct Words {
  uint32_t w[4];  ///< the words
};

/// One round: two 32x32->64 multiplies and a permutation.
inline void round(uint32_t c[4], const uint32_t k[2]) noexcept {
  const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  c[0] = hi1 ^ c[1] ^ k[0];
  c[1] = lo1;
  c[2] = hi0 ^ c[3] ^ k[1];
  c[3] = lo0;
}

/// philox4x32-10 of a counter and a key (Random123's philox4x32_R(10, ctr, key)).
inline Words philox4x32_10(const uint32_t ctr[4], const uint32_t key[2]) noexcept {
  uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  uint32_t k[2] = {key[0], key[1]};
  for (int r = 0; r < kRounds; ++r) {
    if (r > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    round(c, k);
  }
  return Words{{c[0], c[1], c[2], c[3]}};
}

/// Block number `block` of the stream of `seed`.
inline Words block(uint64_t seed, uint64_t block) noexcept {
  const uint32_t ctr[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0};
  const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  return philox4x32_10(ctr, key);
}

/// Word j of an op whose first block is `offset`.
inline uint32_t word(uint64_t seed, uint64_t offset, uint64_t j) noexcept {
  return block(seed, offset + j / 4).w[j % 4];
}

/// Blocks an op of n words uses: ceil(n / 4).
constexpr uint64_t blocks_for_words(uint64_t n) noexcept {
  return (n + 3) / 4;
}

/// float32 uniform in [0, 1) from one word: (w >> 8) * 2^-24.
inline float uniform_f32(uint32_t w) noexcept {
  return static_cast<float>(w >> 8) * 5.9604644775390625e-08f;  // 2^-24
}
/// float16 uniform in [0, 1) from one word, (w >> 21) * 2^-11, as a float (exact in float16).
inline float uniform_f16_value(uint32_t w) noexcept {
  return static_cast<float>(w >> 21) * 4.8828125e-04f;  // 2^-11; exact in float16
}
/// bfloat16 uniform in [0, 1) from one word, (w >> 24) * 2^-8, as a float (exact in bfloat16).
inline float uniform_bf16_value(uint32_t w) noexcept {
  return static_cast<float>(w >> 24) * 3.90625e-03f;  // 2^-8; exact in bfloat16
}
/// float64 uniform in [0, 1) from two words: (((hi << 32) | lo) >> 11) * 2^-53.
inline double uniform_f64(uint32_t lo, uint32_t hi) noexcept {
  const uint64_t u = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(u >> 11) * 1.1102230246251565e-16;  // 2^-53
}
/// bernoulli threshold: w < threshold(p) is true with probability p (p in [0, 1]).
inline uint64_t bernoulli_threshold(double p) noexcept {
  if (!(p > 0.0)) return 0;
  if (p >= 1.0) return uint64_t(1) << 32;
  return static_cast<uint64_t>(std::ceil(p * 4294967296.0));
}

}  // namespace mpsrt::philox
