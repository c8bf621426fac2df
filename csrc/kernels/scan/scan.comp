// Running sums and products along one dim (cumsum, cumprod), and multinomial's draws.
//
// A row (one position of the other dims) is cut into segments of SEGMENT elements; a
// workgroup takes one (row, segment) at a time. OP_TOTALS writes each segment's total; OP_SCAN
// (one dispatch after it; a row of one segment needs no totals) starts each segment from the
// totals of the segments before it, scans its elements (each invocation PER_INVOCATION of them
// in order, then the invocations' totals in shared memory) and writes each running value once,
// rounded once to the output's dtype. Float inputs add / multiply in float32, integer ones in
// 64-bit integers (wrapping, as torch). Bindings: 0 out (written), 1 x, 2 totals (int64 words
// holding the running type's bits; written by OP_TOTALS, read by OP_SCAN).
//
// OP_SAMPLE (multinomial with replacement): for each draw (row, s), with u = uniform[row, s]
// in [0, 1) and the row's running sums c (float32, contiguous rows of n), the first category
// k with c[k] > u * c[n - 1] (never a category of probability 0); bindings: 0 out (int64
// [rows, m]), 1 c, 2 uniform (float32 [rows, m]).
//
// Ops, specialisation constants and push constants: scan.h.
#version 450

#include "scan/scan.h"
// Before common.glsl: its linear_id / grid_size read the workgroup size.
layout(local_size_x = LOCAL) in;
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)

// The running values as 64-bit words: float32 bits or a 64-bit integer.
shared uint64_t sh[LOCAL];

uint64_t identity() {
  if (INT_MATH != 0u) return PROD != 0u ? 1ul : 0ul;
  return uint64_t(floatBitsToUint(PROD != 0u ? 1.0 : 0.0));
}

uint64_t combine(uint64_t a, uint64_t b) {
  if (INT_MATH != 0u) return PROD != 0u ? a * b : a + b;
  const float x = uintBitsToFloat(uint(a)), y = uintBitsToFloat(uint(b));
  return uint64_t(floatBitsToUint(PROD != 0u ? x * y : x + y));
}

uint64_t load(uint e) {
  if (INT_MATH != 0u) return uint64_t(ld1i(DTX, e));
  return uint64_t(floatBitsToUint(ld1f(DTX, e)));
}

void store(uint e, uint64_t v) {
  if (INT_MATH != 0u) {
    st0i(DTY, e, int64_t(v));
  } else {
    st0f(DTY, e, uintBitsToFloat(uint(v)));
  }
}

// The workgroup's inclusive scan of v (every invocation calls it); sh holds the result after.
uint64_t group_scan(uint64_t v) {
  const uint lid = gl_LocalInvocationID.x;
  sh[lid] = v;
  barrier();
  for (uint off = 1u; off < LOCAL; off <<= 1) {
    uint64_t w = sh[lid];
    if (lid >= off) w = combine(sh[lid - off], w);
    barrier();
    sh[lid] = w;
    barrier();
  }
  return sh[lid];
}

// The carry into segment `seg` of `row`: the combined totals of the segments before it.
uint64_t carry_in(uint row, uint seg) {
  uint64_t c = identity();
  if (seg == 0u) return c;  // uniform: the workgroup's item
  for (uint t = gl_LocalInvocationID.x; t < seg; t += LOCAL) {
    c = combine(c, arg2_u64.v[at2(DT_I64, row * pc.segs + t)]);
  }
  group_scan(c);
  c = sh[LOCAL - 1u];
  barrier();
  return c;
}

void scan_item(uint item) {
  const uint row = item / pc.segs, seg = item % pc.segs;
  const uint outer = row / pc.inner, in_row = row % pc.inner;
  const uint xb = outer * pc.xo + in_row, yb = outer * pc.yo + in_row;
  const uint k0 = seg * SEGMENT + gl_LocalInvocationID.x * PER_INVOCATION;
  uint64_t run[PER_INVOCATION];
  uint64_t v = identity();
  for (uint j = 0u; j < PER_INVOCATION; ++j) {
    const uint k = k0 + j;
    if (k < pc.n) v = combine(v, load(xb + k * pc.xk));
    run[j] = v;
  }
  if (OP == OP_TOTALS) {
    group_scan(v);
    if (gl_LocalInvocationID.x == LOCAL - 1u) arg2_u64.v[at2(DT_I64, item)] = sh[LOCAL - 1u];
    barrier();
    return;
  }
  const uint64_t carry = carry_in(row, seg);
  group_scan(v);
  const uint lid = gl_LocalInvocationID.x;
  const uint64_t before = combine(carry, lid > 0u ? sh[lid - 1u] : identity());
  barrier();
  for (uint j = 0u; j < PER_INVOCATION; ++j) {
    const uint k = k0 + j;
    if (k < pc.n) store(yb + k * pc.yk, combine(before, run[j]));
  }
}

void draws() {
  for (uint i = linear_id(); i < pc.rows * pc.m; i += grid_size()) {
    const uint row = i / pc.m;
    const uint c0 = row * pc.n;
    const float target = ld2f(DT_F32, i) * ld1f(DT_F32, c0 + pc.n - 1u);
    uint lo = 0u, hi = pc.n - 1u;  // the answer lies in [lo, hi]
    while (lo < hi) {
      const uint mid = lo + (hi - lo) / 2u;
      if (ld1f(DT_F32, c0 + mid) > target) {
        hi = mid;
      } else {
        lo = mid + 1u;
      }
    }
    st0i(DT_I64, i, int64_t(lo));
  }
}

void main() {
  if (OP == OP_SAMPLE) {
    draws();
    return;
  }
  const uint items = pc.rows * pc.segs;
  const uint groups = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
  for (uint item = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; item < items;
       item += groups) {
    scan_item(item);
  }
}
