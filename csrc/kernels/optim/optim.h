// The optim kernel's interface (optim.comp; the glue's ops/optim.cpp): its ops, flags,
// specialisation constants and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_OPTIM_H
#define MPSRT_KERNELS_OPTIM_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(optim)

// The ops (optim.comp says what each binds and computes).
MPSRT_CONST(OP_LERP, 0)
MPSRT_CONST(OP_ADDCMUL, 1)
MPSRT_CONST(OP_ADDCDIV, 2)
MPSRT_CONST(OP_SQRT, 3)
MPSRT_CONST(OP_MAXIMUM, 4)
MPSRT_CONST(OP_ADAM, 5)
MPSRT_CONST(OP_SGD, 6)

// The bits of FLAGS.
MPSRT_CONST(F_LIST, 1)       // lerp: the weight is a tensor
MPSRT_CONST(F_ADAMW, 2)      // adam: decoupled weight decay
MPSRT_CONST(F_AMSGRAD, 4)    // adam
MPSRT_CONST(F_MAXIMIZE, 8)   // adam, sgd
MPSRT_CONST(F_NESTEROV, 16)  // sgd
MPSRT_CONST(F_MOMENTUM, 32)  // sgd: a momentum buffer
MPSRT_CONST(F_FIRST, 64)     // sgd: the first step (the buffer starts as the gradient)

// The bindings a launch has (unused ones bind binding 0's tensor).
MPSRT_CONST(BINDINGS, 6)

// Specialisation constants.
MPSRT_SPEC(0, OP, 0)        // the op
MPSRT_SPEC(1, DT, DT_F32)   // the tensors' dtype
MPSRT_SPEC(2, DTS, DT_F32)  // adam: the step's dtype
MPSRT_SPEC(3, FLAGS, 0)     // F_* bits

// Push constants: n elements; the foreach ops' scalar (adam's and sgd's lr); beta1 (sgd:
// momentum), beta2 (sgd: dampening), weight_decay, eps; ln(beta1), ln(beta2) (adam's bias
// corrections).
#define MPSRT_OPTIM_PUSH(F, A) \
  F(uint, n)                   \
  F(float, value)              \
  F(float, beta1)              \
  F(float, beta2)              \
  F(float, weight_decay)       \
  F(float, eps)                \
  F(float, ln_beta1)           \
  F(float, ln_beta2)
MPSRT_PUSH(MPSRT_OPTIM_PUSH)

MPSRT_FAMILY_END

#endif
