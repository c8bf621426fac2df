// embedding_bag: bags of weight rows summed, averaged or maxed (torch's _embedding_bag).
//
// Bag b holds the indices at positions [offsets[b], offsets[b + 1]) (the last bag up to n
// where offsets has no closing entry). OP_BAGS: one invocation per (bag, column) reads its
// bag's rows in order (as gathers: no atomics), weighting each by per_sample_weights where
// given; an index equal to padding_idx counts nowhere, one outside [0, num_weights) reads
// nothing. MODE_MEAN divides by the count (an empty bag gives 0); MODE_MAX keeps the first
// largest value and its index (-1 and 0 for an empty bag). Bindings: 0 out (written, [bags,
// width] contiguous), 1 weight, 2 indices, 3 offsets, 4 per_sample_weights (or a stand-in),
// 5 max_indices (int64 [bags, width], written in MODE_MAX).
// OP_AUX: offset2bag[i] (each index's bag, int64: the last bag starting at or before it) and
// bag_size[b] (the bag's indices not equal to padding_idx, int64). Bindings: 0 offset2bag,
// 1 weight (unread), 2 indices, 3 offsets, 4 unread, 5 bag_size.
//
// Ops, specialisation constants and push constants: embedding_bag.h.
#version 450

#include "index/embedding_bag.h"
// Before common.glsl: its linear_id / grid_size read the workgroup size.
layout(local_size_x = LOCAL) in;
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)
MPSRT_ARG(4)
MPSRT_ARG(5)

// Bag b's positions [first, last).
uvec2 bag_range(uint b) {
  const uint first = uint(ld3i(DTI, b));
  const uint last = b + 1u < pc.n_offsets ? uint(ld3i(DTI, b + 1u)) : pc.n;
  return uvec2(min(first, pc.n), min(max(first, last), pc.n));
}

bool counts(int64_t idx) {
  return !(HAS_PAD != 0u && idx == int64_t(pc.padding_idx));
}

void bag_column(uint b, uint d) {
  const uvec2 r = bag_range(b);
  float acc = 0.0;
  int64_t arg = -1l;
  uint count = 0u;
  for (uint i = r.x; i < r.y; ++i) {
    const int64_t idx = ld2i(DTI, i);
    if (!counts(idx) || idx < 0l || idx >= int64_t(pc.num_weights)) continue;
    float v = ld1f(DTW, uint(idx) * pc.ws0 + d * pc.ws1);
    if (HAS_PSW != 0u) v *= ld4f(DTW, i);
    if (MODE == MODE_MAX) {
      if (arg < 0l || v > acc) {
        acc = v;
        arg = idx;
      }
    } else {
      acc += v;
    }
    ++count;
  }
  if (MODE == MODE_MEAN && count > 0u) acc /= float(count);
  st0f(DTW, b * pc.width + d, acc);
  if (MODE == MODE_MAX) st5i(DT_I64, b * pc.width + d, arg);
}

void aux(uint i) {
  if (i < pc.n) {
    // The last bag whose first position is at or before i.
    uint lo = 0u, hi = pc.bags;  // answer in [lo, hi)
    while (hi - lo > 1u) {
      const uint mid = lo + (hi - lo) / 2u;
      if (uint(ld3i(DTI, mid)) <= i) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    st0i(DT_I64, i, int64_t(lo));
    return;
  }
  const uint b = i - pc.n;
  const uvec2 r = bag_range(b);
  uint count = 0u;
  for (uint k = r.x; k < r.y; ++k) {
    if (counts(ld2i(DTI, k))) ++count;
  }
  st5i(DT_I64, b, int64_t(count));
}

void main() {
  const uint total = OP == OP_BAGS ? pc.bags * pc.width : pc.n + pc.bags;
  for (uint i = linear_id(); i < total; i += grid_size()) {
    if (OP == OP_BAGS) {
      bag_column(i / pc.width, i % pc.width);
    } else {
      aux(i);
    }
  }
}
