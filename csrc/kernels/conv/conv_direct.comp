// Direct convolutions, one invocation per output element (grid-stride over grid x / y; grid z:
// the group), fma over the kernel window of its group's input channels: depthwise convolutions
// (groups == input channels) and their input gradients, whose GEMMs have too few rows (M: the
// channel multiplier) and too short a K (the window) for conv.comp's tiles to pay off. The same
// operands (conv/operands.glsl), modes MODE_FORWARD and MODE_GATHER, and push constants
// (conv.h); an invocation loops K times per element, which the glue keeps within llvmpipe's
// budget. Arguments: 0 the output (written), 1 the weight, 2 x, 3 the bias (read where
// HAS_BIAS).
#version 450

#include "conv/conv.h"
// The workgroup size: specialisation constant 8 (WG), before common.glsl.
layout(local_size_x_id = 8) in;
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)

#include "conv/operands.glsl"

void main() {
  const uint g = gl_WorkGroupID.z;
  for (uint i = linear_id(); i < pc.M * pc.N; i += grid_size()) {
    const uint m = i / pc.N, n = i % pc.N;
    float acc = 0.0;
    for (uint k = 0u; k < pc.K; ++k) acc = fma(conv_a(g, m, k), conv_b(g, k, n), acc);
    conv_store(g, m, n, acc);
  }
}
