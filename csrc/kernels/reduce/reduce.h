// The reduce kernel's interface (reduce.comp; the glue's ops/reduce.cpp): its ops, what it
// writes, its workgroup, specialisation constants and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_REDUCE_H
#define MPSRT_KERNELS_REDUCE_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(reduce)

// The ops.
MPSRT_CONST(OP_SUM, 0)
MPSRT_CONST(OP_MEAN, 1)
MPSRT_CONST(OP_MAX, 2)  // amax, max, argmax (by OUT)
MPSRT_CONST(OP_MIN, 3)
MPSRT_CONST(OP_VAR, 4)
MPSRT_CONST(OP_STD, 5)

// What is written (OUT).
MPSRT_CONST(OUT_VALUE, 0)  // the values (argument 0)
MPSRT_CONST(OUT_INDEX, 1)  // the indices (argument 0, int64)
MPSRT_CONST(OUT_BOTH, 2)   // the values, and the indices or var/std's mean (argument 2)

// The workgroup: a row's invocations where PER_GROUP (local_size_x).
MPSRT_CONST(LOCAL, 256)

// Specialisation constants.
MPSRT_SPEC(0, OP, 0)         // the op
MPSRT_SPEC(1, DTI, DT_F32)   // the input's dtype (mpsrt/dtype_ids.h)
MPSRT_SPEC(2, DTO, DT_F32)   // the output's
MPSRT_SPEC(3, INT_MATH, 0)   // 64-bit integer math (1) or float32 (0)
MPSRT_SPEC(4, PER_GROUP, 1)  // a workgroup per row (1) or an invocation (0)
MPSRT_SPEC(5, ONDIM, 1)      // kept dims after coalescing, 1..4
MPSRT_SPEC(6, RNDIM, 1)      // reduced dims after coalescing, 1..4
MPSRT_SPEC(7, OUT, 0)        // what is written (OUT_*)

// Push constants: rows, len (elements per row), the kept dims' sizes and input strides (in
// elements, innermost first), the reduced dims' sizes and strides, var/std's correction.
#define MPSRT_REDUCE_PUSH(F, A) \
  F(uint, rows)                 \
  F(uint, len)                  \
  A(uint, osize, 4)             \
  A(uint, ostride, 4)           \
  A(uint, rsize, 4)             \
  A(uint, rstride, 4)           \
  F(float, correction)
MPSRT_PUSH(MPSRT_REDUCE_PUSH)

MPSRT_FAMILY_END

#endif
