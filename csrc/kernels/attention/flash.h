// The fused attention kernel's interface (flash.comp; the glue's ops/attention.cpp): its ops,
// workgroup, specialisation constants and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_ATTENTION_FLASH_H
#define MPSRT_KERNELS_ATTENTION_FLASH_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(attention::flash)

// The ops.
MPSRT_CONST(OP_FORWARD, 0)  // out, logsumexp
MPSRT_CONST(OP_PRE, 1)      // stats: (logsumexp, rowsum(dO * out)) per query row
MPSRT_CONST(OP_DQ, 2)       // dq (and dS, the bias's gradient, where asked)
MPSRT_CONST(OP_DKV, 3)      // dk, dv

// The workgroup: LOCAL / SPLIT rows (query rows: Br; keys for OP_DKV: Bc) of SPLIT invocations
// each, which stream tiles of as many keys (or query rows for OP_DKV) through shared memory.
// OP_PRE: an invocation per query row.
MPSRT_CONST(LOCAL, 64)
MPSRT_CONST(MAX_D4, 64)   // head dims up to 256
MPSRT_CONST(MAX_ACC, 16)  // vec4s of a row's accumulator per invocation (MAX_D4 / 4)

// Specialisation constants.
MPSRT_SPEC(0, OP, 0)         // the op
MPSRT_SPEC(1, DT, DT_F32)    // q's, k's, v's, out's (and dO's, dq's, dk's, dv's) dtype
MPSRT_SPEC(2, DTM, DT_F32)   // the mask's dtype (bool: keep where true; else added)
MPSRT_SPEC(3, HAS_MASK, 0)   // has a mask
MPSRT_SPEC(4, CAUSAL, 0)     // is_causal (top-left: row i sees keys j <= i)
MPSRT_SPEC(5, DROPOUT, 0)    // dropout on the attention weights (Philox, pc.seed / pc.offset)
MPSRT_SPEC(6, D4, 16)        // vec4s of the widest head dim (q / k's or v's), the tiles' width
MPSRT_SPEC(7, BIAS_GRAD, 0)  // OP_DQ also writes dS (the bias's gradient, contiguous float32)
MPSRT_SPEC(8, SPLIT, 4)      // invocations per row: 4 (D4 <= 28) or 8 (D4 <= 56)

// Push constants: the lengths (Lq | Lk << 16), head dims (D | Dv << 16), heads (Hq | group
// << 16: query heads per key / value head); strides in elements over (batch, head, row) of q,
// k, v, out (the forward's output; in the backward out's and dO's, which share them) and the
// mask (its last dim contiguous); the scale; dropout's keep threshold (a Philox word below it
// keeps), the Philox key (seed) and the first block (offset), low word first.
#define MPSRT_FLASH_PUSH(F, A) \
  F(uint, lens)                \
  F(uint, dims)                \
  F(uint, heads)               \
  A(uint, qs, 3)               \
  A(uint, ks, 3)               \
  A(uint, vs, 3)               \
  A(uint, os, 3)               \
  A(uint, ms, 3)               \
  F(float, scale)              \
  F(uint, keep)                \
  A(uint, seed, 2)             \
  A(uint, offset, 2)
MPSRT_PUSH(MPSRT_FLASH_PUSH)

MPSRT_FAMILY_END

#endif
