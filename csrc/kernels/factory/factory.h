// The factory kernel's interface (factory.comp; the glue's ops/factory.cpp): tensors written
// from their index (arange, linspace, eye) and index-conditioned copies (tril / triu, roll),
// over a geometry of up to 3 dims. See ../interface.h.
#ifndef MPSRT_KERNELS_FACTORY_H
#define MPSRT_KERNELS_FACTORY_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(factory)

// The ops. Operand 0 is the output, operand 1 the input of the copies.
MPSRT_CONST(OP_ARANGE, 0)    // start + step * i (a: start, b: step)
MPSRT_CONST(OP_LINSPACE, 1)  // i < mid ? start + step * i : end - step * (steps - i - 1)
MPSRT_CONST(OP_EYE, 2)       // col == row ? 1 : 0
MPSRT_CONST(OP_TRIL, 3)      // col - row <= k ? in : 0
MPSRT_CONST(OP_TRIU, 4)      // col - row >= k ? in : 0
MPSRT_CONST(OP_ROLL, 5)      // in at ((row + rows - k) % rows) along dim 1

// How arange / linspace compute: float64, float32 (linspace: rounded to the output's dtype
// after each operation, as torch's float16 / bfloat16 arithmetic), 64-bit integers.
MPSRT_CONST(MATH_F64, 0)
MPSRT_CONST(MATH_F32, 1)
MPSRT_CONST(MATH_I64, 2)

// Specialisation constants.
MPSRT_SPEC(0, OP, 0)
MPSRT_SPEC(1, DT0, DT_F32)  // the output's dtype (the copies: an integer of its width)
MPSRT_SPEC(2, DT1, DT_F32)  // the input's
MPSRT_SPEC(3, MATH, 0)

// Push constants: n elements; sizes (innermost first: cols, rows, batch) and the output's and
// input's strides in elements; k (the diagonal, the shift); a, b, c: start, step, end as
// float64 or int64 bits (MATH_F32: float32 bits in the low word); mid, steps (linspace).
#define MPSRT_FACTORY_PUSH(F, A) \
  F(uint, n)                     \
  A(uint, sizes, 3)              \
  A(int, ostrides, 3)            \
  A(int, istrides, 3)            \
  F(int, k)                      \
  A(uint, a, 2)                  \
  A(uint, b, 2)                  \
  A(uint, c, 2)                  \
  F(uint, mid)                   \
  F(uint, steps)
MPSRT_PUSH(MPSRT_FACTORY_PUSH)

MPSRT_FAMILY_END

#endif
