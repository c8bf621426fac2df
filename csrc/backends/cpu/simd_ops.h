// The cpu backend's fill, copy and random routines, one table per instruction set, chosen at run
// time ("kernels" in mpsrt names the GPU kernels of csrc/kernels only).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/backend.h"

namespace mpsrt::cpu {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

/// The routines. `nt` asks for non-temporal stores (large buffers that would only
/// evict the cache); the scalar table ignores it.
struct SimdOps {
  Isa isa;
  /// Writes n bytes at dst; byte i is byte (i % 8) of the little-endian `pattern8` (a 1-, 2-,
  /// 4- or 8-byte pattern replicated to 8 bytes).
  void (*fill)(void* dst, size_t n, uint64_t pattern8, bool nt);
  /// Copies n bytes; the ranges must not overlap.
  void (*copy)(void* dst, const void* src, size_t n, bool nt);
  /// Writes elements [first, first + n) of the random fill `p` (mpsrt/philox.h's stream
  /// definition) into dst, which points at element 0. For RandomOp::Normal, first is even.
  /// Every table is bit-identical to the scalar one (normal too: one algorithm, normal_impl.h).
  void (*random)(void* dst, const backend::RandomParams& p, uint64_t first, uint64_t n);
};

const char* isa_name(Isa isa) noexcept;
/// True when this build has the table and this CPU can run it.
bool isa_supported(Isa isa) noexcept;
/// The best table this CPU supports.
Isa best_isa() noexcept;
/// The table for isa; isa must be supported.
const SimdOps& simd_ops_for(Isa isa) noexcept;

/// True when all 8 bytes of a replicated pattern are equal (a memset).
inline bool is_byte_pattern(uint64_t p8) noexcept {
  return p8 == (p8 & 0xff) * 0x0101010101010101ULL;
}

/// Replicates a 1-, 2-, 4- or 8-byte pattern to 8 bytes.
uint64_t replicate_pattern(uint64_t pattern, unsigned pattern_size) noexcept;

// Per-ISA tables (defined in simd_ops_<isa>.cpp).
extern const SimdOps kScalarOps;
#if defined(MPSRT_HAVE_X86_KERNELS)
extern const SimdOps kAvx2Ops;
extern const SimdOps kAvx512Ops;
#endif

/// The random-number kernels' signature (SimdOps::random).
using RandomFn = void (*)(void* dst, const backend::RandomParams& p, uint64_t first, uint64_t n);
/// True when SimdOps::random implements op with output dtype (the others write nothing); the
/// rule is mpsrt::random_supported(). IntRange writes two's complement.
using backend::random_supported;

// Per-ISA random kernels (defined in random_<isa>.cpp, compiled with the ISA's -m flags).
void random_scalar(void* dst, const backend::RandomParams& p, uint64_t first, uint64_t n);
#if defined(MPSRT_HAVE_X86_KERNELS)
void random_avx2(void* dst, const backend::RandomParams& p, uint64_t first, uint64_t n);
void random_avx512(void* dst, const backend::RandomParams& p, uint64_t first, uint64_t n);
#endif

}  // namespace mpsrt::cpu
