// The loss kernel's interface (loss.comp; the glue's ops/loss.cpp): its ops, specialisation
// constants and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_LOSS_H
#define MPSRT_KERNELS_LOSS_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(loss)

// The ops (loss.comp says what each binds and computes).
MPSRT_CONST(OP_NLL, 0)           // nll_loss per row
MPSRT_CONST(OP_NLL_REDUCE, 1)    // nll_loss reduced (one workgroup), and the total weight
MPSRT_CONST(OP_NLL_BACKWARD, 2)  // nll_loss's grad_input
MPSRT_CONST(OP_MSE, 3)           // mse_loss per element
MPSRT_CONST(OP_MSE_REDUCE, 4)    // mse_loss reduced (one workgroup)
MPSRT_CONST(OP_MSE_BACKWARD, 5)  // mse_loss's grad_input

// The most dims of an mse_loss operand.
MPSRT_CONST(MAX_DIMS, 5)

// Specialisation constants.
MPSRT_SPEC(0, OP, 0)        // the op
MPSRT_SPEC(1, DT, DT_F32)   // the data's dtype (x, a, b, out, grad_input)
MPSRT_SPEC(2, DTT, DT_I64)  // the target's dtype (nll)
MPSRT_SPEC(3, WEIGHT, 0)    // nll: class weights bound (1) or all 1 (0)
MPSRT_SPEC(4, MEAN, 0)      // the mean reduction (1) rather than none or sum
MPSRT_SPEC(5, NDIM, 1)      // mse: the operands' dims, 1..MAX_DIMS
MPSRT_SPEC(6, DTG, DT_F32)  // the grad_output's dtype (the loss output's)

// Push constants (96 bytes): rows (nll) or elements (mse), classes (nll), ignore_index (nll),
// mse backward's factor, the mse shape (innermost first) and the strides of a, b and
// grad_output in elements. nll's strides share the mse fields: x's XS0 = as_[0], XS1 = as_[1];
// the target's TS = bs[0]; the weight's WS = bs[1]; the output's (or grad_output's) OS = gs[0].
#define MPSRT_LOSS_PUSH(F, A) \
  F(uint, n)                  \
  F(uint, c)                  \
  F(int, ignore)              \
  F(float, scale)             \
  A(uint, sizes, MAX_DIMS)    \
  A(int, as_, MAX_DIMS)       \
  A(int, bs, MAX_DIMS)        \
  A(int, gs, MAX_DIMS)
MPSRT_PUSH(MPSRT_LOSS_PUSH)

MPSRT_FAMILY_END

#endif
