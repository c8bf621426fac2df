// The batch_norm kernel's interface (batch_norm.comp; the glue's ops/batch_norm.cpp): its ops,
// workgroup, specialisation constants and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_NORM_BATCH_NORM_H
#define MPSRT_KERNELS_NORM_BATCH_NORM_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(norm::batch_norm)

// The ops (a "channel" is a set of `count` elements reduced together: a batch norm channel, or a
// group norm (sample, group)).
MPSRT_CONST(OP_STATS, 0)        // Welford partials (count, mean, M2) per (channel, chunk)
MPSRT_CONST(OP_MERGE, 1)        // partials -> mean, invstd; running stats updated
MPSRT_CONST(OP_APPLY, 2)        // out = (x - mean) * invstd * w + b
MPSRT_CONST(OP_GRAD_SUMS, 3)    // partial sums (dy, dy * (x - mean)) per (channel, chunk)
MPSRT_CONST(OP_GRAD_MERGE, 4)   // partials -> sums [channel][2]; weight's and bias's gradients
MPSRT_CONST(OP_GRAD_APPLY, 5)   // the input's gradient
MPSRT_CONST(OP_STATS_MERGE, 6)  // one chunk per channel: STATS and MERGE in one op, no partials

// The workgroup of the per-chunk ops, and a chunk's elements per invocation.
MPSRT_CONST(LOCAL, 256)
MPSRT_CONST(PER_INVOCATION, 256)

// Specialisation constants.
MPSRT_SPEC(0, OP, 0)        // the op
MPSRT_SPEC(1, DTX, DT_F32)  // x's dtype (also out / dx)
MPSRT_SPEC(2, DTG, DT_F32)  // dy's
MPSRT_SPEC(3, DTS, DT_F32)  // the statistics' (mean and invstd, or running mean and var)
MPSRT_SPEC(4, DTR, DT_F32)  // the running statistics' (merge)
MPSRT_SPEC(5, DTW, DT_F32)  // weight's and bias's (or their gradients')
MPSRT_SPEC(6, HAS_W, 0)     // weight given (apply ops) / its gradient wanted (grad merge)
MPSRT_SPEC(7, HAS_B, 0)     // bias given / its gradient wanted
MPSRT_SPEC(8, HAS_RUN, 0)   // merge: update the running statistics
MPSRT_SPEC(9, VAR, 0)       // the statistics hold a variance (invstd = 1 / sqrt(var + eps))
MPSRT_SPEC(10, TRAIN, 1)    // grad apply: the statistics came from this batch (sums used)
MPSRT_SPEC(11, RDIM, 1)     // reduction dims after coalescing, 1..3
MPSRT_SPEC(12, GN, 0)       // group norm: GN_ROWS or GN_COLS, else 0 (batch norm)

// Group norm on a contiguous [N, C, HW] input with G groups of D channels:
MPSRT_CONST(GN_ROWS, 1)  // a "channel" is (n, g) (N * G of D * HW elements); the apply ops
                         // and the gradient's sums take weight[c] per element's channel c
MPSRT_CONST(GN_COLS, 2)  // a channel is c, reduced over (hw, n) with (n, g)'s statistics
                         // (the weight's and bias's gradients: sums of dy * xhat, dy)

// Push constants: channels, elements per channel (count), chunks per channel, elements per
// chunk, eps, momentum; the reduction dims' sizes (innermost first); x's, dy's and out's strides
// over them; and along the channel (elements); group norm's G, D and HW.
#define MPSRT_BATCH_NORM_PUSH(F, A) \
  F(uint, channels)                 \
  F(uint, count)                    \
  F(uint, chunks)                   \
  F(uint, chunk)                    \
  F(float, eps)                     \
  F(float, momentum)                \
  A(uint, rsize, 3)                 \
  A(uint, rstride, 9)               \
  A(uint, cstride, 3)               \
  F(uint, groups)                   \
  F(uint, group_channels)           \
  F(uint, hw)
MPSRT_PUSH(MPSRT_BATCH_NORM_PUSH)

MPSRT_FAMILY_END

#endif
