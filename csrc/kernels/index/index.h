// The index kernel's interface (index.comp; the glue's ops/index.cpp): its ops, workgroup,
// specialisation constants and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_INDEX_H
#define MPSRT_KERNELS_INDEX_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(index)

// The ops.
MPSRT_CONST(OP_GATHER, 0)              // out[c . ys] = x[c . xs, c[dim] = index[c . is]]
MPSRT_CONST(OP_SCATTER_ADD_F32, 1)     // out[c . xs, c[dim] = index[c . is]] += src[c . ys]
MPSRT_CONST(OP_SCATTER_ADD_I32, 2)     // the same on int32 elements
MPSRT_CONST(OP_SCATTER, 3)             // out[c . xs, c[dim] = index[c . is]] = src[c . ys]
MPSRT_CONST(OP_SCATTER_REDUCE_F32, 4)  // out[...] = reduce(out[...], src[c . ys]), float32

// scatter_reduce's reductions (REDUCE).
MPSRT_CONST(REDUCE_SUM, 0)
MPSRT_CONST(REDUCE_PROD, 1)
MPSRT_CONST(REDUCE_AMAX, 2)
MPSRT_CONST(REDUCE_AMIN, 3)

// The iteration shape's dims at most.
MPSRT_CONST(MAX_DIMS, 5)

// The workgroup (local_size_x).
MPSRT_CONST(LOCAL, 256)

// Specialisation constants.
MPSRT_SPEC(0, OP, 0)        // the op
MPSRT_SPEC(1, NDIM, 1)      // the iteration shape's dims, 1..MAX_DIMS
MPSRT_SPEC(2, DT0, DT_F32)  // out's dtype (mpsrt/dtype_ids.h)
MPSRT_SPEC(3, DT1, DT_F32)  // the other data operand's (x of a gather, src of a scatter)
MPSRT_SPEC(4, DTI, DT_I64)  // the index's: int32 or int64
MPSRT_SPEC(5, SKIP, 0)      // an index equal to `skip` adds nothing (embedding's padding_idx)
MPSRT_SPEC(6, REDUCE, 0)    // OP_SCATTER_REDUCE_F32's reduction (REDUCE_*)

// Push constants: n (positions of the iteration shape), dim (the indexed dim, innermost-first
// numbering), limit (the indexed dim's size in the indexed operand), skip, the iteration
// shape's sizes (innermost first), the element strides of the indexed operand (x, or out of a
// scatter), of the other data operand (out of a gather, src of a scatter) and of the index.
#define MPSRT_INDEX_PUSH(F, A) \
  F(uint, n)                   \
  F(uint, dim)                 \
  F(uint, limit)               \
  F(int, skip)                 \
  A(uint, sizes, MAX_DIMS)     \
  A(int, xs, MAX_DIMS)         \
  A(int, ys, MAX_DIMS)         \
  A(int, is, MAX_DIMS)
MPSRT_PUSH(MPSRT_INDEX_PUSH)

MPSRT_FAMILY_END

#endif
