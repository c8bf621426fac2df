// Element types, once for every layer: the core, the backends' kernels, the C API, the bindings
// and the PyTorch device's glue all name a dtype by mpsrt::DType and ask this header what it is
// (size, name, DLPack code, the integers it holds) and which random op may write it.
// Header-only and dependency-free (the ground floor: backends/backend.h includes it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mpsrt/dtype_ids.h"

namespace mpsrt {

/// Element types. The values are stable, and come from mpsrt/dtype_ids.h, as the C API's
/// MPSRT_DTYPE_* constants and the GLSL kernels' DT_* do: a new dtype is appended there.
enum class DType : uint8_t {
  U8 = MPSRT_DTYPE_ID_UINT8,
  I32 = MPSRT_DTYPE_ID_INT32,
  I64 = MPSRT_DTYPE_ID_INT64,
  U32 = MPSRT_DTYPE_ID_UINT32,
  F16 = MPSRT_DTYPE_ID_FLOAT16,
  BF16 = MPSRT_DTYPE_ID_BFLOAT16,
  F32 = MPSRT_DTYPE_ID_FLOAT32,
  F64 = MPSRT_DTYPE_ID_FLOAT64,
  Bool = MPSRT_DTYPE_ID_BOOL,
  I8 = MPSRT_DTYPE_ID_INT8,
  I16 = MPSRT_DTYPE_ID_INT16,
  U16 = MPSRT_DTYPE_ID_UINT16,
  U64 = MPSRT_DTYPE_ID_UINT64,
};
/// Number of dtypes: the values of DType are 0 .. kDTypeCount - 1.
constexpr int kDTypeCount = MPSRT_DTYPE_ID_COUNT;

/// DLPack's type codes (dlpack.h DLDataTypeCode) of the kinds mpsrt has.
enum class DLPackCode : uint8_t { Int = 0, UInt = 1, Float = 2, BFloat = 4, Bool = 6 };

/// What a dtype is.
struct DTypeInfo {
  const char* name;  ///< "uint8", "int32", ..., "bool" (numpy's and torch's names)
  uint8_t size;      ///< bytes of one element
  DLPackCode code;   ///< its DLPack type code (bits: 8 x size)
  uint8_t digits;    ///< binary digits of a floating-point significand (torch's
                     ///< std::numeric_limits<T>::digits); 0 for integers and bool
  /// The integers a random integer-range fill may write: [int_min, int_max). Integers: the
  /// type's range (uint64: [0, 2^63), torch's bound); floating point: those it holds exactly,
  /// [-2^digits, 2^digits] (so int_max = 2^digits + 1); bool: [0, 2). int_max is also the
  /// default high of random_() (torch's).
  int64_t int_min;
  uint64_t int_max;  ///< one past the highest integer of that range (see int_min)
};

namespace detail {
constexpr uint64_t two_to(int n) noexcept {
  return uint64_t(1) << n;
}
// Indexed by DType's value.
constexpr DTypeInfo kDTypes[kDTypeCount] = {
    {"uint8", 1, DLPackCode::UInt, 0, 0, two_to(8)},
    {"int32", 4, DLPackCode::Int, 0, -(int64_t(1) << 31), two_to(31)},
    {"int64", 8, DLPackCode::Int, 0, INT64_MIN, two_to(63)},
    {"uint32", 4, DLPackCode::UInt, 0, 0, two_to(32)},
    {"float16", 2, DLPackCode::Float, 11, -int64_t(two_to(11)), two_to(11) + 1},
    {"bfloat16", 2, DLPackCode::BFloat, 8, -int64_t(two_to(8)), two_to(8) + 1},
    {"float32", 4, DLPackCode::Float, 24, -int64_t(two_to(24)), two_to(24) + 1},
    {"float64", 8, DLPackCode::Float, 53, -int64_t(two_to(53)), two_to(53) + 1},
    {"bool", 1, DLPackCode::Bool, 0, 0, 2},
    {"int8", 1, DLPackCode::Int, 0, -128, two_to(7)},
    {"int16", 2, DLPackCode::Int, 0, -32768, two_to(15)},
    {"uint16", 2, DLPackCode::UInt, 0, 0, two_to(16)},
    {"uint64", 8, DLPackCode::UInt, 0, 0, two_to(63)},
};
}  // namespace detail

/// True for the values of the enum (a DType read from a C caller or a file may be anything).
constexpr bool dtype_valid(DType d) noexcept {
  return static_cast<uint8_t>(d) < kDTypeCount;
}
/// What d is; d must be valid (dtype_valid()).
constexpr const DTypeInfo& dtype_info(DType d) noexcept {
  return detail::kDTypes[static_cast<uint8_t>(d)];
}
/// Bytes of one element of d (d valid).
constexpr size_t dtype_size(DType d) noexcept {
  return dtype_info(d).size;
}
/// d's name, or nullptr when d is not valid.
constexpr const char* dtype_name(DType d) noexcept {
  return dtype_valid(d) ? dtype_info(d).name : nullptr;
}
/// The dtype named `name` ("float32", ...): true and *out set, or false.
constexpr bool dtype_from_name(std::string_view name, DType* out) noexcept {
  for (int i = 0; i < kDTypeCount; ++i) {
    if (name == detail::kDTypes[i].name) {
      *out = static_cast<DType>(i);
      return true;
    }
  }
  return false;
}
/// True for the floating-point dtypes (float16, bfloat16, float32, float64); d must be valid.
constexpr bool dtype_is_float(DType d) noexcept {
  return dtype_info(d).digits != 0;
}

// ---------------------------------------------------------------- random fills

/// What a random fill writes (mpsrt/philox.h defines each exactly). Values are stable.
enum class RandomOp : uint8_t {
  Bits,       ///< raw 32-bit words (uint32 only)
  Uniform,    ///< a + (b - a) u, u uniform in [0, 1)
  Normal,     ///< a + b z, z standard normal (Box-Muller on word pairs)
  IntRange,   ///< low + w % range, as the dtype's value of that integer
  Bernoulli,  ///< 1 with probability p, else 0
};
/// Number of random ops: the values of RandomOp are 0 .. kRandomOpCount - 1.
constexpr int kRandomOpCount = 5;

/// The op's name ("bits", "uniform", "normal", "int", "bernoulli"), or nullptr outside the enum.
constexpr const char* random_op_name(RandomOp op) noexcept {
  constexpr const char* kNames[kRandomOpCount] = {"bits", "uniform", "normal", "int", "bernoulli"};
  return static_cast<uint8_t>(op) < kRandomOpCount ? kNames[static_cast<uint8_t>(op)] : nullptr;
}

/// Which op writes which dtype -- the one rule every layer asks (the Python layer and the C API
/// through the core, the backends' kernels through backends/backend.h): Bits: uint32; Uniform,
/// Normal: float16, bfloat16, float32, float64; IntRange (torch's random_ / randint): every
/// dtype; Bernoulli: every dtype but uint16, uint32 and uint64 (torch's bernoulli_ has no
/// kernel for them). False for values outside the enums.
constexpr bool random_supported(RandomOp op, DType d) noexcept {
  if (!dtype_valid(d)) return false;
  switch (op) {
    case RandomOp::Bits:
      return d == DType::U32;
    case RandomOp::Uniform:
    case RandomOp::Normal:
      return dtype_is_float(d);
    case RandomOp::IntRange:
      return true;
    case RandomOp::Bernoulli:
      return d != DType::U16 && d != DType::U32 && d != DType::U64;
  }
  return false;
}

/// 32-bit Philox words one element takes: 2 for float64 uniforms and integer ranges wider than
/// 2^32 (`wide`), else 1 (normal takes a pair of words per pair of elements).
constexpr uint32_t random_words_per_element(RandomOp op, DType d, bool wide) noexcept {
  return (op == RandomOp::Uniform && d == DType::F64) || (op == RandomOp::IntRange && wide) ? 2 : 1;
}

}  // namespace mpsrt
