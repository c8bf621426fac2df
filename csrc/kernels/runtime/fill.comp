// Fill: writes the bytes [first, end) of the bound window with a repeating 8-byte pattern.
// The window starts at a 16-byte boundary, so window byte j takes pattern byte j % 8:
// pat.x holds bytes 0..3, pat.y bytes 4..7 (already rotated by the host).
//
// The 16-byte-aligned middle is written with uvec4 stores (VEC = 16), UNROLL of them per
// invocation and step of a grid-stride loop (each step of a subgroup writes contiguous bytes).
// The words before and after it (at most 4 + 4), or every word when VEC = 4, are 32-bit
// stores; a partial head or tail word is merged with atomics that touch only this fill's bytes
// (and then or), so a neighbour's bytes are never rewritten.
#version 450

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint UNROLL = 2;  // vectors (or words) per invocation and step
layout(constant_id = 2) const uint VEC = 16;    // widest store in bytes: 16 or 4

layout(set = 0, binding = 0) buffer Dst {
  uint words[];
};
layout(set = 0, binding = 0) buffer DstVec {
  uvec4 vecs[];
};

layout(push_constant) uniform Params {
  uint first;  // window byte offset of the first byte to write
  uint end;    // one past the last
  uvec2 pat;
}
pc;

void store_word(uint w) {
  const uint v = (w & 1u) != 0u ? pc.pat.y : pc.pat.x;
  const uint lo = max(pc.first, w * 4u) - w * 4u;  // first byte of this word to write
  const uint hi = min(pc.end, w * 4u + 4u) - w * 4u;
  if (lo == 0u && hi == 4u) {
    words[w] = v;
  } else {
    const uint bits = 8u * (hi - lo);
    const uint mask = (bits == 32u ? 0xffffffffu : ((1u << bits) - 1u)) << (8u * lo);
    atomicAnd(words[w], ~mask);
    atomicOr(words[w], v & mask);
  }
}

void main() {
  const uint gid = gl_GlobalInvocationID.x;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint w0 = pc.first >> 2;
  const uint w1 = (pc.end + 3u) >> 2;
  // Vectors [q0, q1); words [w0, a) and [b, w1) around them.
  uint q0 = (pc.first + 15u) >> 4;
  uint q1 = pc.end >> 4;
  if (VEC < 16u || q0 >= q1) {
    q0 = 0u;
    q1 = 0u;
  }
  const uint a = q1 > q0 ? 4u * q0 : w1;
  const uint b = q1 > q0 ? 4u * q1 : w1;
  const uint head = a - w0;
  const uint nwords = head + (w1 - b);
  for (uint i0 = gid; i0 < nwords; i0 += stride * UNROLL) {
    for (uint u = 0u; u < UNROLL; ++u) {
      const uint i = i0 + u * stride;
      if (i < nwords) store_word(i < head ? w0 + i : b + (i - head));
    }
  }
  const uvec4 v = uvec4(pc.pat, pc.pat);
  for (uint k0 = q0 + gid; k0 < q1; k0 += stride * UNROLL) {
    for (uint u = 0u; u < UNROLL; ++u) {
      const uint k = k0 + u * stride;
      if (k < q1) vecs[k] = v;
    }
  }
}
