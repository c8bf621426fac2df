// The layer_norm kernel's interface (layer_norm.comp; the glue's ops/norm.cpp): its ops,
// workgroup, specialisation constants and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_NORM_LAYER_NORM_H
#define MPSRT_KERNELS_NORM_LAYER_NORM_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(norm::layer_norm)

// The ops.
MPSRT_CONST(OP_FORWARD, 0)   // out, mean, rstd
MPSRT_CONST(OP_BACKWARD, 1)  // the input's gradient

// The workgroup: a row's invocations (local_size_x).
MPSRT_CONST(LOCAL, 256)

// Specialisation constants.
MPSRT_SPEC(0, OP, 0)        // the op
MPSRT_SPEC(1, DTX, DT_F32)  // x's dtype (also out / dx; mpsrt/dtype_ids.h)
MPSRT_SPEC(2, DTW, DT_F32)  // weight's and bias's
MPSRT_SPEC(3, DTS, DT_F32)  // mean's and rstd's
MPSRT_SPEC(4, HAS_W, 0)     // has weight
MPSRT_SPEC(5, HAS_B, 0)     // has bias
MPSRT_SPEC(6, ONDIM, 1)     // row dims after coalescing, 1..3
MPSRT_SPEC(7, INDIM, 1)     // normalized dims after coalescing, 1..3
MPSRT_SPEC(8, DTG, DT_F32)  // dy's dtype

// Push constants: rows, len (elements per row), eps, the row dims' sizes (innermost first), x's
// and dy's strides over them, the normalized dims' sizes, x's and dy's strides over them (in
// elements).
#define MPSRT_LAYER_NORM_PUSH(F, A) \
  F(uint, rows)                     \
  F(uint, len)                      \
  F(float, eps)                     \
  A(uint, osize, 3)                 \
  A(uint, ostride, 6)               \
  A(uint, isize, 3)                 \
  A(uint, istride, 6)
MPSRT_PUSH(MPSRT_LAYER_NORM_PUSH)

MPSRT_FAMILY_END

#endif
