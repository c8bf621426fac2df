// What every tensor kernel of mpsrt's kernel library shares (see README.md here): the
// extensions, mpsrt/dtype.h's element types, the arguments' bindings and typed element access.
//
// A kernel declares its push constants first, as
//   layout(push_constant) uniform Push { uint base[8]; ...its own fields... } pc;
// (base[i]: the byte offset of argument i inside its binding, set by the runtime), then
// includes this file and declares its arguments with MPSRT_ARG(i) for i = 0, 1, ...
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require

// The dtype ids (DT_*: mpsrt/dtype_ids.h's values as GLSL literals).
#include "interface.h"

uint dtype_size(uint dt) {
  if (dt == DT_U8 || dt == DT_BOOL || dt == DT_I8) return 1u;
  if (dt == DT_F16 || dt == DT_BF16 || dt == DT_I16 || dt == DT_U16) return 2u;
  if (dt == DT_I64 || dt == DT_F64 || dt == DT_U64) return 8u;
  return 4u;
}

bool dtype_is_float(uint dt) {
  return dt == DT_F16 || dt == DT_BF16 || dt == DT_F32 || dt == DT_F64;
}

// float -> bfloat16 bits, rounded to nearest even (NaN stays a quiet NaN), as torch rounds.
uint16_t float_to_bf16(float v) {
  uint u = floatBitsToUint(v);
  if (isnan(v)) return uint16_t(0x7fc0u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float bf16_to_float(uint16_t b) {
  return uintBitsToFloat(uint(b) << 16);
}

// float -> integer as C converts (toward zero); NaN and out-of-range values are undefined in C
// and give what the conversion instruction gives.
int64_t float_to_i64(float v) {
  return int64_t(v);
}

// MPSRT_ARG(b): binding b as arrays of every element width, and its typed accessors:
//   float   ld##b##f(uint dt, uint e)       element e (from the argument's first byte) as float
//   int64_t ld##b##i(uint dt, uint e)       as a 64-bit integer (floats convert toward zero)
//   void    st##b##f(uint dt, uint e, float v)     stores v converted to dt
//   void    st##b##i(uint dt, uint e, int64_t v)
// dt is a specialisation constant in every caller, so each accessor folds to one access.
#define MPSRT_ARG(b) \
  layout(std430, set = 0, binding = b) buffer Arg##b##U8 { uint8_t v[]; } arg##b##_u8; \
  layout(std430, set = 0, binding = b) buffer Arg##b##U16 { uint16_t v[]; } arg##b##_u16; \
  layout(std430, set = 0, binding = b) buffer Arg##b##U32 { uint v[]; } arg##b##_u32; \
  layout(std430, set = 0, binding = b) buffer Arg##b##U64 { uint64_t v[]; } arg##b##_u64; \
  uint at##b(uint dt, uint e) { return pc.base[b] / dtype_size(dt) + e; } \
  float ld##b##f(uint dt, uint e) { \
    uint i = at##b(dt, e); \
    if (dt == DT_F32) return uintBitsToFloat(arg##b##_u32.v[i]); \
    if (dt == DT_F16) return float(uint16BitsToFloat16(arg##b##_u16.v[i])); \
    if (dt == DT_BF16) return bf16_to_float(arg##b##_u16.v[i]); \
    if (dt == DT_F64) return float(uint64BitsToDouble(arg##b##_u64.v[i])); \
    if (dt == DT_I32) return float(int(arg##b##_u32.v[i])); \
    if (dt == DT_U32) return float(arg##b##_u32.v[i]); \
    if (dt == DT_I64) return float(int64_t(arg##b##_u64.v[i])); \
    if (dt == DT_U64) return float(arg##b##_u64.v[i]); \
    if (dt == DT_I16) return float(int16_t(arg##b##_u16.v[i])); \
    if (dt == DT_U16) return float(arg##b##_u16.v[i]); \
    if (dt == DT_I8) return float(int8_t(arg##b##_u8.v[i])); \
    if (dt == DT_BOOL) return arg##b##_u8.v[i] != uint8_t(0) ? 1.0 : 0.0; \
    return float(arg##b##_u8.v[i]); \
  } \
  int64_t ld##b##i(uint dt, uint e) { \
    uint i = at##b(dt, e); \
    if (dtype_is_float(dt)) return float_to_i64(ld##b##f(dt, e)); \
    if (dt == DT_I32) return int64_t(int(arg##b##_u32.v[i])); \
    if (dt == DT_U32) return int64_t(arg##b##_u32.v[i]); \
    if (dt == DT_I64 || dt == DT_U64) return int64_t(arg##b##_u64.v[i]); \
    if (dt == DT_I16) return int64_t(int16_t(arg##b##_u16.v[i])); \
    if (dt == DT_U16) return int64_t(arg##b##_u16.v[i]); \
    if (dt == DT_I8) return int64_t(int8_t(arg##b##_u8.v[i])); \
    if (dt == DT_BOOL) return arg##b##_u8.v[i] != uint8_t(0) ? 1l : 0l; \
    return int64_t(arg##b##_u8.v[i]); \
  } \
  void st##b##f(uint dt, uint e, float x) { \
    uint i = at##b(dt, e); \
    if (dt == DT_F32) arg##b##_u32.v[i] = floatBitsToUint(x); \
    else if (dt == DT_F16) arg##b##_u16.v[i] = float16BitsToUint16(float16_t(x)); \
    else if (dt == DT_BF16) arg##b##_u16.v[i] = float_to_bf16(x); \
    else if (dt == DT_F64) arg##b##_u64.v[i] = doubleBitsToUint64(double(x)); \
    else if (dt == DT_BOOL) arg##b##_u8.v[i] = uint8_t(x != 0.0 ? 1 : 0); \
    else if (dt == DT_I32 || dt == DT_U32) arg##b##_u32.v[i] = uint(int(x)); \
    else if (dt == DT_I64 || dt == DT_U64) arg##b##_u64.v[i] = uint64_t(float_to_i64(x)); \
    else if (dt == DT_I16 || dt == DT_U16) arg##b##_u16.v[i] = uint16_t(int(x)); \
    else arg##b##_u8.v[i] = uint8_t(int(x)); \
  } \
  void st##b##i(uint dt, uint e, int64_t x) { \
    uint i = at##b(dt, e); \
    if (dtype_is_float(dt)) st##b##f(dt, e, float(x)); \
    else if (dt == DT_BOOL) arg##b##_u8.v[i] = uint8_t(x != 0l ? 1 : 0); \
    else if (dt == DT_I32 || dt == DT_U32) arg##b##_u32.v[i] = uint(x); \
    else if (dt == DT_I64 || dt == DT_U64) arg##b##_u64.v[i] = uint64_t(x); \
    else if (dt == DT_I16 || dt == DT_U16) arg##b##_u16.v[i] = uint16_t(x); \
    else arg##b##_u8.v[i] = uint8_t(x); \
  }

// The invocation's linear index over a grid of up to 65535 x 65535 workgroups of
// gl_WorkGroupSize.x invocations, and the grid's size: kernels loop grid-stride over their work.
uint linear_id() {
  return (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x +
         gl_LocalInvocationID.x;
}
uint grid_size() {
  return gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_WorkGroupSize.x;
}
