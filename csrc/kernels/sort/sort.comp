// Sorts each row of x along one dim (sort, argsort, topk): a bitonic sort of the row padded to
// a power of two p, on (key, index) pairs compared key first, then index, so that the order is
// total and equal values keep their input order (torch's stable order). Keys are 64-bit words
// ordered as the values: floats with -0 as +0 and NaN after +inf (torch's order), integers
// with the sign bit flipped; descending flips every bit (NaN first); padding sorts last.
//
// OP_BLOCKS reads x and sorts each block of `block` positions in shared memory (blocks
// alternate in direction by the bitonic rule); OP_STEP is one global compare-exchange step
// (k, j) for j >= block; OP_MERGE does the remaining steps j < block of merge stage k in
// shared memory. The glue runs OP_BLOCKS, then for each k from 2 * block to p the steps j from
// k / 2 down to block and one OP_MERGE. Where FINAL, the op writes the first m positions of
// each row as values (read back from x by index) and int64 indices; else the (key, index)
// pairs go to the scratch buffers. Bindings: 0 values (written), 1 indices (int64, written),
// 2 x, 3 keys (uint64 scratch, rows * p), 4 positions (uint32 scratch, rows * p).
//
// Ops, specialisation constants and push constants: sort.h.
#version 450

#include "sort/sort.h"
// Before common.glsl: its linear_id / grid_size read the workgroup size.
layout(local_size_x = LOCAL) in;
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)
MPSRT_ARG(4)

shared uint64_t sk[BLOCK];
shared uint si[BLOCK];

// Offset of position i of row r in x (len n) or in the outputs (len m).
uint offset(uint r, uint i, uint len) {
  return (r / pc.inner) * len * pc.inner + i * pc.inner + r % pc.inner;
}

// The key of position i of row r (padding: the largest key).
uint64_t key_of(uint r, uint i) {
  if (i >= pc.n) return ~0ul;
  uint64_t k;
  if (dtype_is_float(DTX)) {
    float v = ld2f(DTX, offset(r, i, pc.n));
    if (v == 0.0) v = 0.0;
    const uint u = floatBitsToUint(v);
    uint o = (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
    if (isnan(v)) o = 0xffffffffu;
    k = uint64_t(DESCENDING != 0u ? ~o : o);
  } else {
    k = uint64_t(ld2i(DTX, offset(r, i, pc.n))) ^ 0x8000000000000000ul;
    if (DESCENDING != 0u) k = ~k;
  }
  return k;
}

bool before(uint64_t ka, uint ia, uint64_t kb, uint ib) {
  return ka < kb || (ka == kb && ia < ib);
}

// Writes position i (in row r's sorted order) holding input index `src`.
void write_final(uint r, uint i, uint src) {
  if (i >= pc.m) return;
  const uint o = offset(r, i, pc.m), xo = offset(r, src, pc.n);
  if (dtype_is_float(DTX)) {
    st0f(DTX, o, ld2f(DTX, xo));
  } else {
    st0i(DTX, o, ld2i(DTX, xo));
  }
  st1i(DT_I64, o, int64_t(src));
}

// The steps j = j0, j0 / 2, ..., 1 of stage k on the block in shared memory that starts at
// row position `first`.
void block_steps(uint first, uint k, uint j0) {
  for (uint j = j0; j > 0u; j >>= 1) {
    for (uint t = gl_LocalInvocationID.x; t < pc.block / 2u; t += LOCAL) {
      const uint a = (t / j) * 2u * j + t % j, b = a + j;
      const bool up = ((first + a) & k) == 0u;
      const bool swap = up ? before(sk[b], si[b], sk[a], si[a]) : before(sk[a], si[a], sk[b], si[b]);
      if (swap) {
        const uint64_t kt = sk[a];
        sk[a] = sk[b];
        sk[b] = kt;
        const uint it = si[a];
        si[a] = si[b];
        si[b] = it;
      }
    }
    barrier();
  }
}

void block_item(uint item) {
  const uint per_row = pc.p / pc.block;
  const uint r = item / per_row, first = (item % per_row) * pc.block;
  for (uint t = gl_LocalInvocationID.x; t < pc.block; t += LOCAL) {
    const uint i = first + t;
    if (OP == OP_BLOCKS) {
      sk[t] = key_of(r, i);
      si[t] = i;
    } else {
      sk[t] = arg3_u64.v[at3(DT_U64, r * pc.p + i)];
      si[t] = arg4_u32.v[at4(DT_U32, r * pc.p + i)];
    }
  }
  barrier();
  if (OP == OP_BLOCKS) {
    for (uint k = 2u; k <= pc.block; k <<= 1) block_steps(first, k, k >> 1);
  } else {
    block_steps(first, pc.k, pc.block >> 1);
  }
  for (uint t = gl_LocalInvocationID.x; t < pc.block; t += LOCAL) {
    const uint i = first + t;
    if (FINAL != 0u) {
      write_final(r, i, si[t]);
    } else {
      arg3_u64.v[at3(DT_U64, r * pc.p + i)] = sk[t];
      arg4_u32.v[at4(DT_U32, r * pc.p + i)] = si[t];
    }
  }
  barrier();
}

void global_step() {
  const uint half_p = pc.p / 2u, j = pc.j;
  for (uint t = linear_id(); t < pc.rows * half_p; t += grid_size()) {
    const uint r = t / half_p, tt = t % half_p;
    const uint a = (tt / j) * 2u * j + tt % j, b = a + j;
    const uint ea = at3(DT_U64, r * pc.p + a), eb = at3(DT_U64, r * pc.p + b);
    const uint fa = at4(DT_U32, r * pc.p + a), fb = at4(DT_U32, r * pc.p + b);
    const uint64_t ka = arg3_u64.v[ea], kb = arg3_u64.v[eb];
    const uint ia = arg4_u32.v[fa], ib = arg4_u32.v[fb];
    const bool up = (a & pc.k) == 0u;
    if (up ? before(kb, ib, ka, ia) : before(ka, ia, kb, ib)) {
      arg3_u64.v[ea] = kb;
      arg3_u64.v[eb] = ka;
      arg4_u32.v[fa] = ib;
      arg4_u32.v[fb] = ia;
    }
  }
}

void main() {
  if (OP == OP_STEP) {
    global_step();
    return;
  }
  const uint items = pc.rows * (pc.p / pc.block);
  const uint groups = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
  for (uint item = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; item < items;
       item += groups) {
    block_item(item);
  }
}
