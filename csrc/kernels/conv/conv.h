// The conv kernel's interface (conv.comp; the glue's ops/conv.cpp): its modes, specialisation
// constants and push constants. See ../interface.h.
//
// Every convolution (1-, 2-, 3-d: 1-d and 2-d as 3-d with size-1 dims; grouped, strided, padded,
// dilated, transposed) is one implicit GEMM per group, the matrix product of gemm/tile.glsl with
// loaders that address the operands in place:
//   MODE_FORWARD  out[n, g*M + m, o] = sum over (c, k) of
//                 W[g*M + m, c, k] * x[n, g*C + c, o*s - p + k*d]
//                 (M = output channels per group, C = input channels per group, GEMM N = batch x
//                 output positions, K = C x kernel positions); padding loads zero.
//   MODE_GATHER   out[n, g*M + m, i] = sum over (c, k) of
//                 W'[c, m, k] * x[n, g*C + c, (i + p - k*d) / s]
//                 where i + p - k*d is a non-negative multiple of s inside x: a convolution's
//                 input gradient (x: the output gradient), and a transposed convolution's forward.
//   MODE_WEIGHT   part[split, g, m, (c, k)] = sum over (n, o) in the split's share of
//                 a[n, g*M + m, o] * x[n, g*C + c, o*s - p + k*d]: a weight gradient (a: the output
//                 gradient) as a GEMM with K = batch x positions, split along K into float32
//                 partial sums (grid z = splits x groups) that the glue then adds (no float
//                 atomics; the split also keeps each invocation's loop count within llvmpipe's
//                 budget).
// Outputs of MODE_FORWARD / MODE_GATHER are contiguous [n, groups*M, positions]; grid z is the
// group (or split x group), grid x / y stride over the N / M tiles.
//
// Why the geometry (kernel size, stride, padding, dilation) is in push constants, not
// specialisation constants: each distinct value would be another pipeline, and a model's
// convolutions (and their gradients, and tests' grids of cases) have many; llvmpipe compiles a
// pipeline in tens to hundreds of milliseconds, more than the integer divisions the loaders do
// cost. They are packed one byte each per dim (the glue declines values past 255). The tiles are
// specialisation constants as in gemm.h: they size the shared memory and unroll the loops.
#ifndef MPSRT_KERNELS_CONV_CONV_H
#define MPSRT_KERNELS_CONV_CONV_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(conv)

MPSRT_CONST(MODE_FORWARD, 0)
MPSRT_CONST(MODE_GATHER, 1)
MPSRT_CONST(MODE_WEIGHT, 2)

// Specialisation constants: the mode, the operands' dtype (float32, float16 or bfloat16; the
// MODE_WEIGHT partial sums are float32), whether a bias (contiguous, one per output channel) is
// added, and the tiling (gemm.h's: BM x BN tiles, TM x TN per invocation, K chunks of BK, WG =
// (BM / TM) * (BN / TN) invocations).
MPSRT_SPEC(0, DT, DT_F32)
MPSRT_SPEC(1, MODE, 0)
MPSRT_SPEC(2, HAS_BIAS, 0)
MPSRT_SPEC(3, BM, 64)
MPSRT_SPEC(4, BN, 64)
MPSRT_SPEC(5, BK, 16)
MPSRT_SPEC(6, TM, 4)
MPSRT_SPEC(7, TN, 4)
MPSRT_SPEC(8, WG, 256)

// Push constants: the GEMM's M, N, K and K per split (K where not split); osize: the positions
// o (d, h, w) that N (MODE_WEIGHT: K) runs over with the batch; xsize: x's spatial sizes; sx: x's
// element strides (batch, channel, d, h, w); sa: the A operand's (the weight's: along m, along c,
// d, h, w; MODE_WEIGHT: a's batch, channel, d, h, w); geo: per dim (d, h, w) kernel size | stride
// << 8 | dilation << 16 | padding << 24.
#define MPSRT_CONV_PUSH(F, A) \
  F(uint, M)                  \
  F(uint, N)                  \
  F(uint, K)                  \
  F(uint, kchunk)             \
  A(uint, osize, 3)           \
  A(uint, xsize, 3)           \
  A(uint, sx, 5)              \
  A(uint, sa, 5)              \
  A(uint, geo, 3)
MPSRT_PUSH(MPSRT_CONV_PUSH)

MPSRT_FAMILY_END

#endif
