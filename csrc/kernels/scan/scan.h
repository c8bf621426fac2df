// The scan kernel's interface (scan.comp; the glue's ops/scan.cpp): its ops, workgroup,
// specialisation constants and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_SCAN_H
#define MPSRT_KERNELS_SCAN_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(scan)

// The ops.
MPSRT_CONST(OP_TOTALS, 0)  // each segment's total (sum or product) into totals
MPSRT_CONST(OP_SCAN, 1)    // the inclusive scan, each segment from the totals of those before
MPSRT_CONST(OP_SAMPLE, 2)  // multinomial draws: a binary search of a row's running sums

// The workgroup (local_size_x), the elements each invocation scans in a row's segment, and so
// the segment a workgroup scans.
MPSRT_CONST(LOCAL, 256)
MPSRT_CONST(PER_INVOCATION, 8)
MPSRT_CONST(SEGMENT, 2048)

// Specialisation constants.
MPSRT_SPEC(0, OP, 0)        // the op
MPSRT_SPEC(1, DTX, DT_F32)  // the input's dtype (mpsrt/dtype_ids.h)
MPSRT_SPEC(2, DTY, DT_F32)  // the output's
MPSRT_SPEC(3, INT_MATH, 0)  // 64-bit integer math (1) or float32 (0)
MPSRT_SPEC(4, PROD, 0)      // a running product (1) or sum (0)

// Push constants: rows, n (a row's elements; OP_SAMPLE: its categories), inner (the rows
// within one outer index: a row is (outer, inner) and its element k lies at
// outer * ostride + k * kstride + inner_index, the same geometry for input and output), the
// segments per row, the input's outer and k strides, the output's; OP_SAMPLE: m, the draws per
// row.
#define MPSRT_SCAN_PUSH(F, A) \
  F(uint, rows)               \
  F(uint, n)                  \
  F(uint, inner)              \
  F(uint, segs)               \
  F(uint, xo)                 \
  F(uint, xk)                 \
  F(uint, yo)                 \
  F(uint, yk)                 \
  F(uint, m)
MPSRT_PUSH(MPSRT_SCAN_PUSH)

MPSRT_FAMILY_END

#endif
