// Philox random-number generators and random fills of Buffers.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "mpsrt/allocator.h"
#include "mpsrt/api.h"
#include "mpsrt/dtype.h"
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
/// The state blob of Generator::get_state() and set_state().
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
  /// The seed in force: the generator's first (nondeterministic) seed until manual_seed(),
  /// seed() or set_state() sets another.
  uint64_t initial_seed() const;
  /// The offset: how many Philox blocks (128 bits each) are used up, so the next random op
  /// starts at this block. manual_seed() and seed() reset it to 0.
  uint64_t offset() const;
  /// Sets the block the next random op starts at; the seed stays.
  void set_offset(uint64_t offset);
  /// The (seed, offset) state as torch.mps's 44-byte blob (kRngStateSize).
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
  /// Index of the generator's device.
  int device() const noexcept { return device_; }

 private:
  friend struct detail::Access;  // the core's way in (csrc/core/access.h)
  Generator(std::shared_ptr<detail::GeneratorImpl> impl, int device)
      : impl_(std::move(impl)), device_(device) {}
  std::shared_ptr<detail::GeneratorImpl> impl_;
  int device_ = 0;
};

/// What a random fill writes (see mpsrt/philox.h for the exact definition): the op, the dtype
/// (mpsrt/dtype.h: which op may write which dtype is random_supported() there) and the op's
/// parameters.
struct RandomSpec {
  /// mpsrt::RandomOp, so that a spec reads RandomSpec::Op::Uniform.
  using Op = RandomOp;
  /// mpsrt::DType, so that a spec reads RandomSpec::DType::F32.
  using DType = mpsrt::DType;
  /// What is written.
  Op op = Op::Bits;
  /// The element type written.
  DType dtype = DType::U32;
  double a = 0.0;      ///< Uniform: low; Normal: mean
  double b = 1.0;      ///< Uniform: high; Normal: std
  int64_t low = 0;     ///< IntRange: the range is [low, low + range)
  uint64_t range = 1;  ///< IntRange (>= 1)
  double p = 0.5;      ///< Bernoulli: probability of 1
};

/// The integers IntRange can write into dtype: [min, max) (DTypeInfo::int_min / int_max of
/// mpsrt/dtype.h); `max` is also random_()'s default high. {0, 0} outside the enum.
struct RandomIntBounds {
  int64_t min = 0;   ///< the lowest integer
  uint64_t max = 0;  ///< one past the highest integer
};
/// The RandomIntBounds of `dtype`.
constexpr RandomIntBounds random_int_bounds(DType dtype) noexcept {
  return dtype_valid(dtype) ? RandomIntBounds{dtype_info(dtype).int_min, dtype_info(dtype).int_max}
                            : RandomIntBounds{};
}

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
