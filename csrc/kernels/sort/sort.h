// The sort kernel's interface (sort.comp; the glue's ops/sort.cpp): its ops, workgroup,
// specialisation constants and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_SORT_H
#define MPSRT_KERNELS_SORT_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(sort)

// The ops (steps of a bitonic sort of each row, padded to a power of two `p`).
MPSRT_CONST(OP_BLOCKS, 0)  // reads x, sorts each block of `block` positions in shared memory
MPSRT_CONST(OP_STEP, 1)    // one compare-exchange step (k, j) over whole rows (j >= block)
MPSRT_CONST(OP_MERGE, 2)   // the steps (k, j < block) of each block, in shared memory

// The workgroup (local_size_x) and the largest block it sorts in shared memory.
MPSRT_CONST(LOCAL, 256)
MPSRT_CONST(BLOCK, 1024)

// Specialisation constants.
MPSRT_SPEC(0, OP, 0)          // the op
MPSRT_SPEC(1, DTX, DT_F32)    // the input's dtype (mpsrt/dtype_ids.h); the values' too
MPSRT_SPEC(2, DESCENDING, 0)  // largest first (1)
MPSRT_SPEC(3, FINAL, 0)       // the op's result is the sorted rows: write values and indices

// Push constants: rows, n (a row's elements), m (the first m sorted positions written: n for
// sort, k for topk), p (n padded to a power of two), block (min(p, BLOCK)), the step's k and
// j, inner (rows per outer index: row r's element i of x lies at
// (r / inner) * n * inner + i * inner + r % inner, of the outputs with m for n).
#define MPSRT_SORT_PUSH(F, A) \
  F(uint, rows)               \
  F(uint, n)                  \
  F(uint, m)                  \
  F(uint, p)                  \
  F(uint, block)              \
  F(uint, k)                  \
  F(uint, j)                  \
  F(uint, inner)
MPSRT_PUSH(MPSRT_SORT_PUSH)

MPSRT_FAMILY_END

#endif
