// The elementwise kernel's interface (elementwise.comp; the glue's ops/elementwise.cpp): what
// an op is, what its specialisation constants and push constants are. See ../interface.h.
#ifndef MPSRT_KERNELS_ELEMENTWISE_H
#define MPSRT_KERNELS_ELEMENTWISE_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(elementwise)

// The ops. Inputs are a (1), b (2), c (3); operand 0 is the output.
MPSRT_CONST(OP_COPY, 0)
MPSRT_CONST(OP_ADD, 1)  // a + c * b (c: alpha)
MPSRT_CONST(OP_SUB, 2)  // a - c * b
MPSRT_CONST(OP_MUL, 3)
MPSRT_CONST(OP_DIV, 4)
MPSRT_CONST(OP_NEG, 5)
MPSRT_CONST(OP_RELU, 6)
MPSRT_CONST(OP_ABS, 7)
MPSRT_CONST(OP_EXP, 8)
MPSRT_CONST(OP_LOG, 9)
MPSRT_CONST(OP_SQRT, 10)
MPSRT_CONST(OP_RSQRT, 11)
MPSRT_CONST(OP_RECIPROCAL, 12)
MPSRT_CONST(OP_POW, 13)  // a ** b
MPSRT_CONST(OP_TANH, 14)
MPSRT_CONST(OP_SIGMOID, 15)
MPSRT_CONST(OP_GELU, 16)
MPSRT_CONST(OP_SILU, 17)
MPSRT_CONST(OP_WHERE, 18)  // a ? b : c
MPSRT_CONST(OP_EQ, 19)
MPSRT_CONST(OP_NE, 20)
MPSRT_CONST(OP_LT, 21)
MPSRT_CONST(OP_LE, 22)
MPSRT_CONST(OP_GT, 23)
MPSRT_CONST(OP_GE, 24)
MPSRT_CONST(OP_CLAMP, 25)  // a within the bounds that follow it (VARIANT says which)
MPSRT_CONST(OP_MAXIMUM, 26)
MPSRT_CONST(OP_MINIMUM, 27)
MPSRT_CONST(OP_SIN, 28)
MPSRT_CONST(OP_COS, 29)
MPSRT_CONST(OP_LOGICAL_NOT, 30)
MPSRT_CONST(OP_THRESHOLD_BWD, 31)  // b <= c ? 0 : a (a: grad, b: self, c: threshold)
MPSRT_CONST(OP_GELU_BWD, 32)       // a: grad, b: self
MPSRT_CONST(OP_SILU_BWD, 33)
MPSRT_CONST(OP_SIGMOID_BWD, 34)  // a: grad, b: the forward's output
MPSRT_CONST(OP_TANH_BWD, 35)
MPSRT_CONST(OP_DIV_TRUNC, 36)
MPSRT_CONST(OP_DIV_FLOOR, 37)
MPSRT_CONST(OP_MASKED_FILL, 38)  // b ? c : a (a: self, b: mask, c: value)
MPSRT_CONST(OP_HARDSWISH, 39)    // a * clamp(a + 3, 0, 6) / 6
// Activations and their gradients (backward ops: a the gradient, b the forward's input, or its
// output where said); float parameters in p.
MPSRT_CONST(OP_HARDSWISH_BWD, 40)
MPSRT_CONST(OP_HARDSIGMOID, 41)  // clamp(a + 3, 0, 6) / 6
MPSRT_CONST(OP_HARDSIGMOID_BWD, 42)
MPSRT_CONST(OP_LEAKY_RELU, 43)      // p[0]: the negative slope
MPSRT_CONST(OP_LEAKY_RELU_BWD, 44)  // p[0]: the negative slope
MPSRT_CONST(OP_ELU, 45)             // p: alpha * scale, scale, input_scale
MPSRT_CONST(OP_ELU_BWD, 46)         // p as OP_ELU; VARIANT 1: b is the forward's output
MPSRT_CONST(OP_SOFTPLUS, 47)        // p: beta, threshold
MPSRT_CONST(OP_SOFTPLUS_BWD, 48)    // p: beta, threshold
MPSRT_CONST(OP_MISH, 49)
MPSRT_CONST(OP_MISH_BWD, 50)
MPSRT_CONST(OP_HARDTANH_BWD, 51)  // p: min, max
MPSRT_CONST(OP_PRELU, 52)         // a > 0 ? a : b * a (b: the weight)
MPSRT_CONST(OP_PRELU_BWD_IN, 53)  // b > 0 ? a : c * a (c: the weight)
MPSRT_CONST(OP_PRELU_BWD_W, 54)   // b > 0 ? 0 : b * a
// Bitwise ops of integers and bools (integer math only; a bool's not is its logical not).
MPSRT_CONST(OP_BITWISE_AND, 55)
MPSRT_CONST(OP_BITWISE_OR, 56)
MPSRT_CONST(OP_BITWISE_XOR, 57)
MPSRT_CONST(OP_BITWISE_NOT, 58)

// Specialisation constants.
MPSRT_SPEC(0, OP, 0)        // the op
MPSRT_SPEC(1, NDIM, 1)      // dims after coalescing, 1..4
MPSRT_SPEC(2, DT0, DT_F32)  // the operands' dtypes (mpsrt/dtype_ids.h)
MPSRT_SPEC(3, DT1, DT_F32)
MPSRT_SPEC(4, DT2, DT_F32)
MPSRT_SPEC(5, DT3, DT_F32)
MPSRT_SPEC(6, NIN, 1)       // inputs
MPSRT_SPEC(7, INT_MATH, 0)  // 64-bit integer math (1) or float32 (0)
MPSRT_SPEC(8, SCALARS, 0)   // bit i: input i is a scalar (its value in `strides`)
MPSRT_SPEC(9, VARIANT, 0)   // gelu: 1 tanh; clamp: bit 0 a min bound, bit 1 a max bound; elu
                            // backward: 1 from the output

// Push constants: n elements, sizes (innermost first), strides[operand][dim] in elements (a
// scalar input's two first strides hold its value: float32 bits in float math, the 64-bit
// integer in integer math), three float parameters.
#define MPSRT_ELEMENTWISE_PUSH(F, A) \
  F(uint, n)                         \
  A(uint, sizes, 4)                  \
  A(int, strides, 16)                \
  A(float, p, 3)
MPSRT_PUSH(MPSRT_ELEMENTWISE_PUSH)

MPSRT_FAMILY_END

#endif
