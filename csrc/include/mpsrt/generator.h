// Philox random-number generators and random fills of Buffers.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "mpsrt/allocator.h"
#include "mpsrt/api.h"
#include "mpsrt/stream.h"

namespace mpsrt {

namespace detail {
class GeneratorImpl;
struct Access;
}  // namespace detail

/// Size of the state blob of get_state()/set_state() (the layout of torch.mps):
/// bytes 0-27 uint32 state[7] ([0] = 1, [1..4] the last Philox output block, [5..6] the seed's
/// low/high words), bytes 28-35 uint64 seed, bytes 36-43 uint64 offset; little-endian.
constexpr size_t kRngStateSize = 44;
using RngState = std::array<uint8_t, kRngStateSize>;

/// A Philox4x32-10 generator: a (seed, offset) pair. Each random op reserves the Philox
/// blocks it uses when it is encoded, so results do not depend on threads, streams or backend.
/// Cheap to copy: copies share the state.
class MPSRT_API Generator {
 public:
  /// A new generator on `device`, seeded nondeterministically.
  explicit Generator(int device = -1);
  /// The device's default generator (seeded nondeterministically on first use).
  static Generator default_generator(int device = -1);

  /// Sets the seed and resets the offset to 0.
  void manual_seed(uint64_t seed);
  /// Seeds nondeterministically; returns the new seed.
  uint64_t seed();
  uint64_t initial_seed() const;
  uint64_t offset() const;
  void set_offset(uint64_t offset);
  RngState get_state() const;
  /// Throws std::invalid_argument unless size == kRngStateSize and data is not null.
  void set_state(const uint8_t* data, size_t size);
  /// A new generator on the same device with a copy of this one's (seed, offset): the two
  /// then advance independently (torch.Generator.clone_state()).
  Generator clone_state() const;
  /// 64 random bits from this generator's stream: the first two words of the next Philox
  /// block (word 0 low), which the offset then moves past. For seeding another generator from
  /// this one (e.g. a library's own generator for an op mpsrt has no kernel for).
  uint64_t random_u64();
  int device() const noexcept { return device_; }

 private:
  friend struct detail::Access;  // the core's way in (csrc/core/access.h)
  Generator(std::shared_ptr<detail::GeneratorImpl> impl, int device)
      : impl_(std::move(impl)), device_(device) {}
  std::shared_ptr<detail::GeneratorImpl> impl_;
  int device_ = 0;
};

/// What a random fill writes (see mpsrt/philox.h for the exact definition).
struct RandomSpec {
  enum class Op : uint8_t { Bits, Uniform, Normal, IntRange, Bernoulli } op = Op::Bits;
  /// Element type: "uint8", "int32", "int64", "uint32", "float16", "bfloat16", "float32",
  /// "float64", "bool", "int8", "int16", "uint16" or "uint64" (which ops accept which:
  /// random_supported()). Values are stable: later dtypes are appended.
  enum class DType : uint8_t {
    U8,
    I32,
    I64,
    U32,
    F16,
    BF16,
    F32,
    F64,
    Bool,
    I8,
    I16,
    U16,
    U64
  } dtype = DType::U32;
  double a = 0.0;      ///< Uniform: low; Normal: mean
  double b = 1.0;      ///< Uniform: high; Normal: std
  int64_t low = 0;     ///< IntRange: the range is [low, low + range)
  uint64_t range = 1;  ///< IntRange (>= 1)
  double p = 0.5;      ///< Bernoulli: probability of 1
};

/// Which op writes which element type -- the one rule every layer asks (the Python layer
/// through mpsrt._C, the backends' kernels through backends/backend.h):
/// Bits: uint32; Uniform, Normal: float16, bfloat16, float32, float64; IntRange (torch's
/// random_ / randint): every dtype (integers, floats and bool); Bernoulli: every dtype but
/// uint16, uint32 and uint64 (torch's bernoulli_ has no kernel for them). False for values
/// outside the enums.
constexpr bool random_supported(RandomSpec::Op op, RandomSpec::DType dtype) noexcept {
  using Op = RandomSpec::Op;
  using D = RandomSpec::DType;
  if (static_cast<uint8_t>(dtype) > static_cast<uint8_t>(D::U64)) return false;
  switch (op) {
    case Op::Bits:
      return dtype == D::U32;
    case Op::Uniform:
    case Op::Normal:
      return dtype == D::F16 || dtype == D::BF16 || dtype == D::F32 || dtype == D::F64;
    case Op::IntRange:
      return true;
    case Op::Bernoulli:
      return dtype != D::U16 && dtype != D::U32 && dtype != D::U64;
  }
  return false;
}

/// The dtype's name ("uint8", ..., "bool"), or nullptr outside the enum.
MPSRT_API const char* random_dtype_name(RandomSpec::DType dtype) noexcept;
/// The op's name ("bits", "uniform", "normal", "int", "bernoulli"), or nullptr outside the enum.
MPSRT_API const char* random_op_name(RandomSpec::Op op) noexcept;

/// The integers IntRange can write into dtype: [min, max). Integer dtypes: their range
/// (uint64: [0, 2^63), torch's bound); floating-point dtypes: the integers they hold exactly,
/// [-2^digits, 2^digits] (so max = 2^digits + 1: float16 11, bfloat16 8, float32 24, float64
/// 53 digits); bool: [0, 2). `max` is also random_()'s default high (torch's random_() range).
/// {0, 0} outside the enum.
struct RandomIntBounds {
  int64_t min = 0;
  uint64_t max = 0;
};
MPSRT_API RandomIntBounds random_int_bounds(RandomSpec::DType dtype) noexcept;

/// Fills the first `count` elements of `buffer` on `stream` with the generator's next numbers.
/// Throws std::invalid_argument, before anything is encoded, when
/// - op or dtype is outside its enum, or op cannot write dtype (random_supported());
/// - Uniform: a or b is not finite, or a > b; Normal: a or b is not finite, or b < 0;
///   IntRange: range is 0, or [low, low + range) does not fit in dtype (floating-point
///   dtypes: every value must be an exact integer of it, [-2^digits, 2^digits]; bool: [0, 2);
///   uint64: [0, 2^63), torch's bound);
///   Bernoulli: p is not finite or outside [0, 1] (checked even when count is 0);
/// - count x the element size is more than buffer.nbytes(), or the buffer is empty;
/// - the buffer, the generator and the stream are not on one device.
MPSRT_API void random_fill(Buffer& buffer, uint64_t count, const RandomSpec& spec,
                           Generator& generator, const Stream& stream);

}  // namespace mpsrt
