// Batched matrix products: C[b] = alpha * A[b] @ B[b] + beta * Cin[b] (Cin optional), every
// operand with its own strides (batch, row, column: a transposed or broadcast operand is read
// where it lies, no copy), all operands of one dtype (float32, float16 or bfloat16), products
// summed in float32 and the result stored rounded to the dtype.
//
// Tiling (the tile loop: gemm/tile.glsl, shared with conv/conv.comp; this kernel supplies its
// loaders and store): a workgroup computes BM x BN output tiles; each invocation computes a TM x
// TN micro-tile of it (rows ty + i * BM / TM, columns tx + j * BN / TN: neighbouring invocations
// read neighbouring shared-memory words), over K in chunks of BK staged in shared memory as
// float32 (A's chunk stored k-major, so both tiles are read along their contiguous dim). Tiles,
// batches and K chunks are loops that every invocation of a workgroup runs alike (the barriers
// stay in uniform control flow); workgroups stride over tiles and batches that outnumber the
// grid. Elements outside M, N, K load as zeros and are not stored; K = 0 stores beta * Cin (or
// zeros).
//
// Specialisation constants (the dtype, whether Cin is read, the tiling) and push constants (M,
// N, K, batch, the operands' strides, alpha and beta): gemm.h. Shared memory: BK * (BM + BN + 2)
// floats.
// Arguments: 0 the output (written), 1 A, 2 B, 3 Cin (any argument where unused: never read).
// Every offset stays below 2^32 elements.
// llvmpipe ends an invocation's loops after 65535 iterations of all its loops together: the
// loops of fixed length are unrolled ([[unroll]]), so an invocation loops about ceil(K / BK) + 4
// times per output tile it computes, which the caller keeps below that.
#version 450

#include "gemm/gemm.h"
// The workgroup size: specialisation constant 7 (WG). Before common.glsl, whose linear_id /
// grid_size read it.
layout(local_size_x_id = 7) in;
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)

// The loaders walk along each operand's contiguous dim (k when A is row-major; k for B when its
// columns are strided and its rows are not), so that neighbouring invocations load neighbours.
#define TILE_A_KFAST (pc.sak == 1u)
#define TILE_B_KFAST (pc.sbn != 1u && pc.sbk == 1u)
#include "gemm/tile.glsl"

float tile_load_a(uint b, uint m, uint k) {
  return ld1f(DT, b * pc.sab + m * pc.sam + k * pc.sak);
}

float tile_load_b(uint b, uint k, uint n) {
  return ld2f(DT, b * pc.sbb + k * pc.sbk + n * pc.sbn);
}

void tile_store(uint b, uint m, uint n, float acc) {
  float v = pc.alpha * acc;
  if (HAS_C != 0u) v += pc.beta * ld3f(DT, b * pc.scb + m * pc.scm + n * pc.scn);
  st0f(DT, b * pc.sob + m * pc.som + n * pc.son, v);
}

void main() {
  const uint tiles_m = (pc.M + BM - 1u) / BM;
  const uint tiles_n = (pc.N + BN - 1u) / BN;
  for (uint b = gl_WorkGroupID.z; b < pc.batch; b += gl_NumWorkGroups.z) {
    for (uint tm = gl_WorkGroupID.y; tm < tiles_m; tm += gl_NumWorkGroups.y) {
      for (uint tn = gl_WorkGroupID.x; tn < tiles_n; tn += gl_NumWorkGroups.x) {
        tile_run(b, tm * BM, tn * BN, 0u, pc.K, pc.M, pc.N);
      }
    }
  }
}
