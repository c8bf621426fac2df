// The layer_norm_cols kernel's interface (layer_norm_cols.comp; the glue's ops/norm.cpp): its
// workgroup's shape, specialisation constants and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_NORM_LAYER_NORM_COLS_H
#define MPSRT_KERNELS_NORM_LAYER_NORM_COLS_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(norm::layer_norm_cols)

// A workgroup covers COLS columns with SLICES invocations each (COLS * SLICES = local_size_x),
// which loop over every SLICES-th row.
MPSRT_CONST(COLS, 32)
MPSRT_CONST(SLICES, 8)

// Specialisation constants.
MPSRT_SPEC(0, DTX, DT_F32)  // x's dtype (mpsrt/dtype_ids.h)
MPSRT_SPEC(1, DTG, DT_F32)  // dy's
MPSRT_SPEC(2, DTS, DT_F32)  // mean's and rstd's
MPSRT_SPEC(3, DTW, DT_F32)  // dw's and db's
MPSRT_SPEC(4, WANT_W, 1)    // dw wanted
MPSRT_SPEC(5, WANT_B, 1)    // db wanted
MPSRT_SPEC(6, ONDIM, 1)     // row dims after coalescing, 1..3
MPSRT_SPEC(7, INDIM, 1)     // normalized dims after coalescing, 1..3

// Push constants: rows, len (columns), the row dims' sizes (innermost first), x's and dy's
// strides over them, the normalized dims' sizes, x's and dy's strides over them (in elements).
#define MPSRT_LAYER_NORM_COLS_PUSH(F, A) \
  F(uint, rows)                          \
  F(uint, len)                           \
  A(uint, osize, 3)                      \
  A(uint, ostride, 6)                    \
  A(uint, isize, 3)                      \
  A(uint, istride, 6)
MPSRT_PUSH(MPSRT_LAYER_NORM_COLS_PUSH)

MPSRT_FAMILY_END

#endif
