// The embedding_bag kernel's interface (embedding_bag.comp; the glue's ops/index.cpp): its
// ops, workgroup, specialisation constants and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_EMBEDDING_BAG_H
#define MPSRT_KERNELS_EMBEDDING_BAG_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(embedding_bag)

// The ops.
MPSRT_CONST(OP_BAGS, 0)  // out (and max's argmax) per (bag, column)
MPSRT_CONST(OP_AUX, 1)   // each index's bag (offset2bag) and each bag's size

// The modes (torch's numbering).
MPSRT_CONST(MODE_SUM, 0)
MPSRT_CONST(MODE_MEAN, 1)
MPSRT_CONST(MODE_MAX, 2)

// The workgroup (local_size_x).
MPSRT_CONST(LOCAL, 256)

// Specialisation constants.
MPSRT_SPEC(0, OP, 0)        // the op
MPSRT_SPEC(1, MODE, 0)      // the mode
MPSRT_SPEC(2, DTW, DT_F32)  // weight's dtype (and out's, per_sample_weights'; dtype_ids.h)
MPSRT_SPEC(3, DTI, DT_I64)  // indices' and offsets' (int32 or int64)
MPSRT_SPEC(4, HAS_PSW, 0)   // per_sample_weights given
MPSRT_SPEC(5, HAS_PAD, 0)   // padding_idx given (its entries count nowhere)

// Push constants: bags, width (weight's columns), n (indices), n_offsets, num_weights,
// padding_idx, weight's row and column strides (elements).
#define MPSRT_EMBEDDING_BAG_PUSH(F, A) \
  F(uint, bags)                        \
  F(uint, width)                       \
  F(uint, n)                           \
  F(uint, n_offsets)                   \
  F(uint, num_weights)                 \
  F(int, padding_idx)                  \
  F(uint, ws0)                         \
  F(uint, ws1)
MPSRT_PUSH(MPSRT_EMBEDDING_BAG_PUSH)

MPSRT_FAMILY_END

#endif
