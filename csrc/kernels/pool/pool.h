// The pooling kernel's interface (pool.comp; the glue's ops/pool.cpp): its ops, specialisation
// constants and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_POOL_H
#define MPSRT_KERNELS_POOL_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(pool)

// The ops (pool.comp says what each binds and computes).
MPSRT_CONST(OP_MAX, 0)                    // max pool: values and int64 indices
MPSRT_CONST(OP_AVG, 1)                    // average pool
MPSRT_CONST(OP_ADAPTIVE_MAX, 2)           // adaptive max pool: values and int64 indices
MPSRT_CONST(OP_ADAPTIVE_AVG, 3)           // adaptive average pool
MPSRT_CONST(OP_MAX_BACKWARD, 4)           // max pool's grad_input (gather by index)
MPSRT_CONST(OP_AVG_BACKWARD, 5)           // average pool's grad_input (gather)
MPSRT_CONST(OP_ADAPTIVE_MAX_BACKWARD, 6)  // adaptive max pool's grad_input (gather by index)
MPSRT_CONST(OP_ADAPTIVE_AVG_BACKWARD, 7)  // adaptive average pool's grad_input (gather)

// Specialisation constants.
MPSRT_SPEC(0, OP, 0)         // the op
MPSRT_SPEC(1, DT, DT_F32)    // the data's dtype (input, output, grads)
MPSRT_SPEC(2, COUNT_PAD, 1)  // average pool: padding counts in the divisor (1)
MPSRT_SPEC(3, DIVISOR, 0)    // average pool: the divisor (0: the window's count)

// Push constants (96 bytes). Tensors are seen as [N, C, D, H, W] (1-d and 2-d pools have D, H
// of 1). `src` is what a launch reads (the input forward, grad_output backward), `dst` what it
// writes (the output, grad_input), one invocation per dst element (`total` of them); ss / ds
// their strides in elements (N, C, D, H, W); indices share dst's strides forward and src's
// backward. in_ / out_: the pool's input and output sizes (D, H, W). Per dim j: ks[j] = kernel
// size | stride << 16, pd[j] = padding | dilation << 16.
#define MPSRT_POOL_PUSH(F, A) \
  F(uint, c)                  \
  F(uint, total)              \
  A(uint, in_, 3)             \
  A(uint, out_, 3)            \
  A(uint, ss, 5)              \
  A(uint, ds, 5)              \
  A(uint, ks, 3)              \
  A(uint, pd, 3)
MPSRT_PUSH(MPSRT_POOL_PUSH)

MPSRT_FAMILY_END

#endif
