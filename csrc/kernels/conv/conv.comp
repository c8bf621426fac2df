// Convolutions as implicit GEMMs (the modes, operands and push constants: conv.h): the tile loop
// of gemm/tile.glsl with loaders that compute each element's address (the im2col addressing of
// x, padding and gaps loading zero; no im2col buffer), any operand strides, float32 / float16 /
// bfloat16 operands summed in float32. Grid z: the group (MODE_WEIGHT: split x groups, the split
// being z / groups); grid x / y stride over the N / M tiles.
// Arguments: 0 the output (written), 1 A (the weight; MODE_WEIGHT: the output gradient), 2 x,
// 3 the bias (read where HAS_BIAS). Every offset stays below 2^32 elements.
#version 450

#include "conv/conv.h"
// The workgroup size: specialisation constant 8 (WG), before common.glsl.
layout(local_size_x_id = 8) in;
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)

// The loaders walk along k where it is the operands' usual contiguous dim (the weight's (c, k)
// rows; in MODE_WEIGHT x's positions), else along n (x's positions).
#define TILE_A_KFAST true
#define TILE_B_KFAST (MODE == MODE_WEIGHT)
#include "gemm/tile.glsl"

#include "conv/operands.glsl"

float tile_load_a(uint z, uint m, uint k) {
  return conv_a(z, m, k);
}

float tile_load_b(uint z, uint k, uint n) {
  return conv_b(z, k, n);
}

void tile_store(uint z, uint m, uint n, float acc) {
  conv_store(z, m, n, acc);
}

void main() {
  const uint tiles_m = (pc.M + BM - 1u) / BM;
  const uint tiles_n = (pc.N + BN - 1u) / BN;
  const uint z = gl_WorkGroupID.z, split = z / groups();
  const uint k_begin = split * pc.kchunk, k_end = min(pc.K, k_begin + pc.kchunk);
  for (uint tm = gl_WorkGroupID.y; tm < tiles_m; tm += gl_NumWorkGroups.y) {
    for (uint tn = gl_WorkGroupID.x; tn < tiles_n; tn += gl_NumWorkGroups.x) {
      tile_run(z, tm * BM, tn * BN, k_begin, k_end, pc.M, pc.N);
    }
  }
}
