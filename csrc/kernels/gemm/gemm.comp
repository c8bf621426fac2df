// Batched matrix products: C[b] = alpha * A[b] @ B[b] + beta * Cin[b] (Cin optional), every
// operand with its own strides (batch, row, column: a transposed or broadcast operand is read
// where it lies, no copy), all operands of one dtype (float32, float16 or bfloat16), products
// summed in float32 and the result stored rounded to the dtype.
//
// Tiling: a workgroup computes BM x BN output tiles; each invocation computes a TM x TN
// micro-tile of it (rows ty + i * BM / TM, columns tx + j * BN / TN: neighbouring invocations
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
#extension GL_EXT_control_flow_attributes : require

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)

// Row strides of the staged tiles, padded by one word so that the stores of a chunk read along
// k (A row-major) spread over the banks.
const uint AS = BM + 1;
const uint BS = BN + 1;
shared float As[BK * AS];  // As[k * AS + m]
shared float Bs[BK * BS];  // Bs[k * BS + n]

// Stages A's rows m0.. and columns k0.. (BM x BK) in As; the invocations walk the chunk along
// A's contiguous dim (k when A is row-major, m otherwise) so that neighbours load neighbours.
void stage_a(uint b, uint m0, uint k0) {
  const bool kfast = pc.sak == 1u;
  [[unroll]] for (uint r = 0u; r < (BM * BK + WG - 1u) / WG; ++r) {
    const uint i = gl_LocalInvocationID.x + r * WG;
    const uint m = kfast ? i / BK : i % BM;
    const uint k = kfast ? i % BK : i / BM;
    float v = 0.0;
    if (i < BM * BK && m0 + m < pc.M && k0 + k < pc.K) {
      v = ld1f(DT, b * pc.sab + (m0 + m) * pc.sam + (k0 + k) * pc.sak);
    }
    if (i < BM * BK) As[k * AS + m] = v;
  }
}

// Stages B's rows k0.. and columns n0.. (BK x BN) in Bs, walking along B's contiguous dim.
void stage_b(uint b, uint k0, uint n0) {
  const bool kfast = pc.sbn != 1u && pc.sbk == 1u;
  [[unroll]] for (uint r = 0u; r < (BK * BN + WG - 1u) / WG; ++r) {
    const uint i = gl_LocalInvocationID.x + r * WG;
    const uint n = kfast ? i / BK : i % BN;
    const uint k = kfast ? i % BK : i / BN;
    float v = 0.0;
    if (i < BK * BN && n0 + n < pc.N && k0 + k < pc.K) {
      v = ld2f(DT, b * pc.sbb + (k0 + k) * pc.sbk + (n0 + n) * pc.sbn);
    }
    if (i < BK * BN) Bs[k * BS + n] = v;
  }
}

// The output tile of batch b at rows m0.., columns n0...
void tile(uint b, uint m0, uint n0) {
  const uint RM = BM / TM;  // invocations along m (rows of the micro-tiles' grid)
  const uint RN = BN / TN;
  const uint tx = gl_LocalInvocationID.x % RN;
  const uint ty = gl_LocalInvocationID.x / RN;
  float acc[TM * TN];
  [[unroll]] for (uint i = 0u; i < TM * TN; ++i) acc[i] = 0.0;
  float a[TM];
  float bv[TN];
  for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
    stage_a(b, m0, k0);
    stage_b(b, k0, n0);
    barrier();
    [[unroll]] for (uint k = 0u; k < BK; ++k) {
      [[unroll]] for (uint i = 0u; i < TM; ++i) a[i] = As[k * AS + ty + i * RM];
      [[unroll]] for (uint j = 0u; j < TN; ++j) bv[j] = Bs[k * BS + tx + j * RN];
      [[unroll]] for (uint i = 0u; i < TM; ++i) {
        [[unroll]] for (uint j = 0u; j < TN; ++j) {
          acc[i * TN + j] = fma(a[i], bv[j], acc[i * TN + j]);
        }
      }
    }
    barrier();
  }
  [[unroll]] for (uint i = 0u; i < TM; ++i) {
    const uint m = m0 + ty + i * RM;
    if (m >= pc.M) continue;
    [[unroll]] for (uint j = 0u; j < TN; ++j) {
      const uint n = n0 + tx + j * RN;
      if (n >= pc.N) continue;
      float v = pc.alpha * acc[i * TN + j];
      if (HAS_C != 0u) v += pc.beta * ld3f(DT, b * pc.scb + m * pc.scm + n * pc.scn);
      st0f(DT, b * pc.sob + m * pc.som + n * pc.son, v);
    }
  }
}

void main() {
  const uint tiles_m = (pc.M + BM - 1u) / BM;
  const uint tiles_n = (pc.N + BN - 1u) / BN;
  for (uint b = gl_WorkGroupID.z; b < pc.batch; b += gl_NumWorkGroups.z) {
    for (uint tm = gl_WorkGroupID.y; tm < tiles_m; tm += gl_NumWorkGroups.y) {
      for (uint tn = gl_WorkGroupID.x; tn < tiles_n; tn += gl_NumWorkGroups.x) {
        tile(b, tm * BM, tn * BN);
      }
    }
  }
}
