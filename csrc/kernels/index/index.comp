// Indexing ops along one dim: gather-type reads (index_select, gather, embedding) and
// scatter-add writes (scatter_add, embedding_dense_backward), over an iteration shape of up to
// 5 dims (innermost first) with every operand strided.
//
// Gather (OP 0): for each position c of the iteration shape (the output's),
//   out[c . ys] = x[c . xs with c[dim] replaced by idx] with idx = index[c . is];
// an index outside [0, limit) reads 0 (torch raises there; a kernel cannot, and must not read
// outside x). Bindings: 0 out (written), 1 x, 2 index.
// Scatter-reduce (OP 4): the same positions, out = reduce(out, src) by REDUCE (sum, prod, amax,
// amin) in a compare-and-swap loop on float32 words. Scatter (OP 3): the same positions as scatter-add, stored (where indices repeat, one of the
// writes wins, as torch leaves unspecified). Scatter-add (OP 1): for each position c of the iteration shape (the index's),
//   out[c . xs with c[dim] replaced by idx] += src[c . ys], atomically (a compare-and-swap loop
//   on the float's bits, which needs no float-atomics feature; OP 2: int32 atomicAdd);
// an index outside [0, limit) or equal to `skip` (when SKIP is set: embedding's padding_idx)
// adds nothing. Bindings: 0 out (read and written), 1 src, 2 index.
//
// Ops, specialisation constants (the op, the number of dims, out's dtype, the other data
// operand's dtype, the index's dtype, SKIP) and push constants: index.h.
#version 450

#include "index/index.h"
// Before common.glsl: its linear_id / grid_size read the workgroup size.
layout(local_size_x = LOCAL) in;
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)

// Adds v to the float32 element at word i of binding 0: retries while another invocation
// changed the word between the read and the swap (bounded by the contention on that word).
void atomic_add_f32(uint i, float v) {
  uint seen = arg0_u32.v[i];
  for (;;) {
    const uint want = floatBitsToUint(uintBitsToFloat(seen) + v);
    const uint was = atomicCompSwap(arg0_u32.v[i], seen, want);
    if (was == seen) break;
    seen = was;
  }
}

// The reduction of two float32 values (NaN wins amax / amin, as torch).
float reduce2(float a, float b) {
  if (REDUCE == REDUCE_SUM) return a + b;
  if (REDUCE == REDUCE_PROD) return a * b;
  if (isnan(a) || isnan(b)) return a + b;
  return REDUCE == REDUCE_AMAX ? max(a, b) : min(a, b);
}

// Reduces v into the float32 element at word i of binding 0 (a compare-and-swap loop, as
// atomic_add_f32).
void atomic_reduce_f32(uint i, float v) {
  uint seen = arg0_u32.v[i];
  for (;;) {
    const uint want = floatBitsToUint(reduce2(uintBitsToFloat(seen), v));
    if (want == seen) break;
    const uint was = atomicCompSwap(arg0_u32.v[i], seen, want);
    if (was == seen) break;
    seen = was;
  }
}

void main() {
  for (uint i = linear_id(); i < pc.n; i += grid_size()) {
    // Offsets of the position: x without the indexed dim, y and the index with it.
    uint rest = i;
    int xo = 0, yo = 0, io = 0;
    for (uint d = 0u; d < NDIM; ++d) {
      const int c = int(rest % pc.sizes[d]);
      rest /= pc.sizes[d];
      if (d != pc.dim) xo += c * pc.xs[d];
      yo += c * pc.ys[d];
      io += c * pc.is[d];
    }
    const int64_t idx = ld2i(DTI, uint(io));
    const bool inside = idx >= 0l && idx < int64_t(pc.limit);
    if (inside) xo += int(idx) * pc.xs[pc.dim];
    if (OP == OP_GATHER) {
      // Integer elements move as integers (exact beyond float's 24 bits).
      if (dtype_is_float(DT0)) {
        st0f(DT0, uint(yo), inside ? ld1f(DT1, uint(xo)) : 0.0);
      } else {
        st0i(DT0, uint(yo), inside ? ld1i(DT1, uint(xo)) : 0l);
      }
    } else {
      if (!inside || (SKIP != 0u && idx == int64_t(pc.skip))) continue;
      if (OP == OP_SCATTER_REDUCE_F32) {
        atomic_reduce_f32(at0(DT_F32, uint(xo)), ld1f(DT1, uint(yo)));
      } else if (OP == OP_SCATTER) {
        if (dtype_is_float(DT0)) {
          st0f(DT0, uint(xo), ld1f(DT1, uint(yo)));
        } else {
          st0i(DT0, uint(xo), ld1i(DT1, uint(yo)));
        }
      } else if (OP == OP_SCATTER_ADD_F32) {
        atomic_add_f32(at0(DT_F32, uint(xo)), ld1f(DT1, uint(yo)));
      } else {
        atomicAdd(arg0_u32.v[at0(DT_I32, uint(xo))], uint(int(ld1i(DT1, uint(yo)))));
      }
    }
  }
}
