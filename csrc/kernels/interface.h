// The language of the kernel families' interface headers (csrc/kernels/<family>/<family>.h):
// one header per family, included by its GLSL kernels and by the C++ that launches them (the
// PyTorch glue's ops/<family>.cpp), so that op ids, specialisation-constant ids and the push
// layout have one source. The same lines read as
//   GLSL (glslc defines VULKAN)       C++
//   MPSRT_FAMILY_BEGIN(f)             namespace mpsrt::kernels::f {
//   MPSRT_CONST(NAME, v)              const uint NAME = v;          constexpr uint32_t NAME = v;
//   MPSRT_SPEC(id, NAME, default)     layout(constant_id = id) const uint NAME = default;
//                                     constexpr uint32_t SPEC_NAME = id;
//   MPSRT_PUSH(FIELDS)                the push-constant block `pc` (uint base[8], then FIELDS)
//                                     struct Push {FIELDS}, with static checks that every
//                                     field's offset is the one std430 gives it in the block
// where FIELDS is a macro FIELDS(F, A) listing F(type, name) and A(type, name, count) of the
// types uint, int and float (4-byte scalars, the block's only kinds).
#ifndef MPSRT_KERNELS_INTERFACE_H
#define MPSRT_KERNELS_INTERFACE_H

#include "mpsrt/dtype_ids.h"

#ifdef VULKAN

// The dtype ids as GLSL uint constants.
const uint DT_U8 = MPSRT_DTYPE_ID_UINT8;
const uint DT_I32 = MPSRT_DTYPE_ID_INT32;
const uint DT_I64 = MPSRT_DTYPE_ID_INT64;
const uint DT_U32 = MPSRT_DTYPE_ID_UINT32;
const uint DT_F16 = MPSRT_DTYPE_ID_FLOAT16;
const uint DT_BF16 = MPSRT_DTYPE_ID_BFLOAT16;
const uint DT_F32 = MPSRT_DTYPE_ID_FLOAT32;
const uint DT_F64 = MPSRT_DTYPE_ID_FLOAT64;
const uint DT_BOOL = MPSRT_DTYPE_ID_BOOL;
const uint DT_I8 = MPSRT_DTYPE_ID_INT8;
const uint DT_I16 = MPSRT_DTYPE_ID_INT16;
const uint DT_U16 = MPSRT_DTYPE_ID_UINT16;
const uint DT_U64 = MPSRT_DTYPE_ID_UINT64;

#define MPSRT_FAMILY_BEGIN(f)
#define MPSRT_FAMILY_END
#define MPSRT_CONST(NAME, v) const uint NAME = v;
#define MPSRT_SPEC(id, NAME, dflt) layout(constant_id = id) const uint NAME = dflt;
#define MPSRT_GLSL_FIELD(t, n) t n;
#define MPSRT_GLSL_ARRAY(t, n, k) t n[k];
#define MPSRT_PUSH(FIELDS)                     \
  layout(push_constant) uniform Push {         \
    uint base[8];                              \
    FIELDS(MPSRT_GLSL_FIELD, MPSRT_GLSL_ARRAY) \
  }                                            \
  pc;

#else

#include <cstddef>
#include <cstdint>

namespace mpsrt::kernels::glsl {
using uint = uint32_t;
using int_ = int32_t;
using float_ = float;
// Whether fields of these sizes and alignments, at these offsets, lie as std430 lays out a
// block of 4-byte scalars and arrays of them: each at the end of the previous one.
template <size_t N>
constexpr bool std430(const size_t (&offset)[N], const size_t (&size)[N]) {
  for (size_t i = 0; i < N; ++i) {
    if (offset[i] != (i == 0 ? 0 : offset[i - 1] + size[i - 1])) return false;
  }
  return true;
}
}  // namespace mpsrt::kernels::glsl

#define MPSRT_GLSL_TYPE_uint ::mpsrt::kernels::glsl::uint
#define MPSRT_GLSL_TYPE_int ::mpsrt::kernels::glsl::int_
#define MPSRT_GLSL_TYPE_float ::mpsrt::kernels::glsl::float_
#define MPSRT_FAMILY_BEGIN(f) namespace mpsrt::kernels::f {
#define MPSRT_FAMILY_END }
#define MPSRT_CONST(NAME, v) constexpr uint32_t NAME = v;
#define MPSRT_SPEC(id, NAME, dflt) constexpr uint32_t SPEC_##NAME = id;
#define MPSRT_CXX_FIELD(t, n) MPSRT_GLSL_TYPE_##t n;
#define MPSRT_CXX_ARRAY(t, n, k) MPSRT_GLSL_TYPE_##t n[k];
#define MPSRT_CXX_OFFSET(t, n) offsetof(Push, n),
#define MPSRT_CXX_OFFSET_A(t, n, k) offsetof(Push, n),
#define MPSRT_CXX_SIZE(t, n) sizeof(MPSRT_GLSL_TYPE_##t),
#define MPSRT_CXX_SIZE_A(t, n, k) sizeof(MPSRT_GLSL_TYPE_##t) * (k),
#define MPSRT_PUSH(FIELDS)                                                                 \
  struct Push {                                                                            \
    FIELDS(MPSRT_CXX_FIELD, MPSRT_CXX_ARRAY)                                               \
  };                                                                                       \
  inline constexpr size_t kPushOffsets[] = {FIELDS(MPSRT_CXX_OFFSET, MPSRT_CXX_OFFSET_A)}; \
  inline constexpr size_t kPushSizes[] = {FIELDS(MPSRT_CXX_SIZE, MPSRT_CXX_SIZE_A)};       \
  static_assert(::mpsrt::kernels::glsl::std430(kPushOffsets, kPushSizes),                  \
                "the push fields lie as std430 lays out the GLSL block");                  \
  static_assert(sizeof(Push) <= 96, "a kernel has at most 96 bytes of push constants");

#endif

#endif
