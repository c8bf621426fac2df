// The gemm kernel's interface (gemm.comp; the glue's ops/gemm.cpp): its specialisation constants
// and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_GEMM_H
#define MPSRT_KERNELS_GEMM_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(gemm)

// Specialisation constants. The tiling: a workgroup computes BM x BN output tiles, each
// invocation a TM x TN micro-tile of them, over K in chunks of BK; WG (the workgroup size,
// local_size_x) must be (BM / TM) * (BN / TN), BM divisible by TM and BN by TN.
MPSRT_SPEC(0, DT, DT_F32)  // every operand's dtype: float32, float16 or bfloat16
MPSRT_SPEC(1, HAS_C, 0)    // Cin is read (beta != 0)
MPSRT_SPEC(2, BM, 64)
MPSRT_SPEC(3, BN, 64)
MPSRT_SPEC(4, BK, 16)
MPSRT_SPEC(5, TM, 4)
MPSRT_SPEC(6, TN, 4)
MPSRT_SPEC(7, WG, 256)

// Push constants: M, N, K, batch, then the element strides (batch, row, column) of A, B, Cin and
// the output, alpha and beta.
#define MPSRT_GEMM_PUSH(F, A) \
  F(uint, M)                  \
  F(uint, N)                  \
  F(uint, K)                  \
  F(uint, batch)              \
  F(uint, sab)                \
  F(uint, sam)                \
  F(uint, sak)                \
  F(uint, sbb)                \
  F(uint, sbk)                \
  F(uint, sbn)                \
  F(uint, scb)                \
  F(uint, scm)                \
  F(uint, scn)                \
  F(uint, sob)                \
  F(uint, som)                \
  F(uint, son)                \
  F(float, alpha)             \
  F(float, beta)
MPSRT_PUSH(MPSRT_GEMM_PUSH)

MPSRT_FAMILY_END

#endif
