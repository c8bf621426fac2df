// The softmax kernel's interface (softmax.comp; the glue's ops/norm.cpp): its ops, workgroup,
// specialisation constants and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_NORM_SOFTMAX_H
#define MPSRT_KERNELS_NORM_SOFTMAX_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(norm::softmax)

// The ops.
MPSRT_CONST(OP_SOFTMAX, 0)
MPSRT_CONST(OP_LOG_SOFTMAX, 1)
MPSRT_CONST(OP_SOFTMAX_BWD, 2)  // argument 2: softmax's output
MPSRT_CONST(OP_LOG_BWD, 3)      // argument 2: log_softmax's output

// The workgroup: a row's invocations where PER_GROUP (local_size_x).
MPSRT_CONST(LOCAL, 256)

// Specialisation constants.
MPSRT_SPEC(0, OP, 0)        // the op
MPSRT_SPEC(1, DT0, DT_F32)  // the dtypes of arguments 0-2 (mpsrt/dtype_ids.h)
MPSRT_SPEC(2, DT1, DT_F32)
MPSRT_SPEC(3, DT2, DT_F32)
MPSRT_SPEC(4, PER_GROUP, 1)  // a workgroup per row (1) or an invocation (0)
MPSRT_SPEC(5, ONDIM, 1)      // row dims after coalescing, 1..3

// Push constants: rows, len (elements along the dim), the row dims' sizes (innermost first),
// each argument's strides over them (argument-major, in elements), each argument's stride
// along the dim.
#define MPSRT_SOFTMAX_PUSH(F, A) \
  F(uint, rows)                  \
  F(uint, len)                   \
  A(uint, osize, 3)              \
  A(uint, ostride, 9)            \
  A(uint, dstride, 3)
MPSRT_PUSH(MPSRT_SOFTMAX_PUSH)

MPSRT_FAMILY_END

#endif
