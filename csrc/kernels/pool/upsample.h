// The resampling kernel's interface (upsample.comp; the glue's ops/pool.cpp): its modes,
// specialisation constants and push constants. See ../interface.h.
#ifndef MPSRT_KERNELS_UPSAMPLE_H
#define MPSRT_KERNELS_UPSAMPLE_H

#include "interface.h"

MPSRT_FAMILY_BEGIN(upsample)

// The modes (each dim of the source is sampled the same way).
MPSRT_CONST(MODE_NEAREST, 0)        // floor(o * scale) (o == i or 2i: scale 1, 0.5)
MPSRT_CONST(MODE_NEAREST_EXACT, 1)  // floor((o + 0.5) * scale)
MPSRT_CONST(MODE_LINEAR, 2)         // linear, bilinear, trilinear: 2 taps per dim
MPSRT_CONST(MODE_CUBIC, 3)          // bicubic: 4 taps per dim, clamped at the borders

// Specialisation constants.
MPSRT_SPEC(0, MODE, 0)      // the mode
MPSRT_SPEC(1, DT, DT_F32)   // the data's dtype
MPSRT_SPEC(2, ALIGN, 0)     // align_corners
MPSRT_SPEC(3, BACKWARD, 0)  // grad_input from grad_output (1) rather than the output

// Push constants (84 bytes). Tensors are seen as [N, C, D, H, W]; `src` is read (the input, or
// grad_output backward), `dst` written (the output, or grad_input), one invocation per dst
// element (`total`); ss / ds their strides in elements. in_ / out_: the input's and output's
// sizes (D, H, W); scale: each dim's source step (torch's float scale per dim).
#define MPSRT_UPSAMPLE_PUSH(F, A) \
  F(uint, c)                      \
  F(uint, total)                  \
  A(uint, in_, 3)                 \
  A(uint, out_, 3)                \
  A(uint, ss, 5)                  \
  A(uint, ds, 5)                  \
  A(float, scale, 3)
MPSRT_PUSH(MPSRT_UPSAMPLE_PUSH)

MPSRT_FAMILY_END

#endif
