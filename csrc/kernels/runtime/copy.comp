// Copy: the bytes [src, src + n) of the source window to [dst, dst + n) of the destination
// window, where src and dst agree mod VEC (the host sends overlapping ranges of one buffer
// elsewhere). Both windows start at 16-byte boundaries.
//
// VEC = 16: the destination's 16-byte-aligned middle is copied with uvec4 loads and stores,
// UNROLL of them per invocation and step of a grid-stride loop; the words around it (at most
// 4 + 4) one by one. VEC = 4: every word one by one. VEC = 1 (any offsets: the metal backend's
// copies that disagree mod 4, which vulkan sends to vkCmdCopyBuffer): every destination word
// assembled from its source bytes. A partial head or tail word is merged with
// atomics that touch only the copy's bytes, so a neighbour's bytes are never rewritten.
#version 450

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint UNROLL = 2;  // vectors (or words) per invocation and step
layout(constant_id = 2) const uint VEC = 16;    // 16, 4 or 1: src and dst agree mod VEC

layout(set = 0, binding = 0) readonly buffer Src {
  uint src_words[];
};
layout(set = 0, binding = 0) readonly buffer SrcVec {
  uvec4 src_vecs[];
};
layout(set = 0, binding = 1) buffer Dst {
  uint dst_words[];
};
layout(set = 0, binding = 1) buffer DstVec {
  uvec4 dst_vecs[];
};

layout(push_constant) uniform Params {
  uint src;  // source window byte offset of the first byte
  uint dst;  // destination window byte offset of the first byte
  uint n;    // bytes
}
pc;

// Bytes [lo, hi) of destination word w from their source bytes, one by one (VEC = 1).
uint gather_word(uint w, uint lo, uint hi) {
  uint v = 0u;
  for (uint j = lo; j < hi; ++j) {
    const uint s = pc.src + (w * 4u + j - pc.dst);
    v |= ((src_words[s >> 2] >> (8u * (s & 3u))) & 0xffu) << (8u * j);
  }
  return v;
}

// Destination word w; its bytes come from the same byte lanes of source word w + delta
// (VEC = 1: from wherever they are).
void copy_word(uint w, uint delta) {
  const uint end = pc.dst + pc.n;
  const uint lo = max(pc.dst, w * 4u) - w * 4u;  // first byte of this word to write
  const uint hi = min(end, w * 4u + 4u) - w * 4u;
  const uint v = VEC == 1u ? gather_word(w, lo, hi) : src_words[w + delta];
  if (lo == 0u && hi == 4u) {
    dst_words[w] = v;
  } else {
    const uint bits = 8u * (hi - lo);
    const uint mask = (bits == 32u ? 0xffffffffu : ((1u << bits) - 1u)) << (8u * lo);
    atomicAnd(dst_words[w], ~mask);
    atomicOr(dst_words[w], v & mask);
  }
}

void main() {
  const uint gid = gl_GlobalInvocationID.x;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint end = pc.dst + pc.n;
  const uint w0 = pc.dst >> 2;
  const uint w1 = (end + 3u) >> 2;
  // Source word = destination word + delta (words agree mod 4: the same byte lanes).
  const uint delta = (pc.src >> 2) - w0;  // modulo 2^32: may "wrap", the sum does not
  uint q0 = (pc.dst + 15u) >> 4;
  uint q1 = end >> 4;
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
      if (i < nwords) copy_word(i < head ? w0 + i : b + (i - head), delta);
    }
  }
  const uint vdelta = (pc.src >> 4) - (pc.dst >> 4);  // src and dst agree mod 16 here
  for (uint k0 = q0 + gid; k0 < q1; k0 += stride * UNROLL) {
    for (uint u = 0u; u < UNROLL; ++u) {
      const uint k = k0 + u * stride;
      if (k < q1) dst_vecs[k] = src_vecs[k + vdelta];
    }
  }
}
