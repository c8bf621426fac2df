// Fill: writes the bytes [first, end) of the bound window with a repeating 8-byte pattern.
// The window starts at an 8-byte boundary, so window byte j takes pattern byte j % 8:
// pat.x holds bytes 0..3, pat.y bytes 4..7 (already rotated by the host). Whole words are
// plain stores; a partial head or tail word is merged with atomics that touch only this
// fill's bytes (and then or), so a neighbour's bytes are never rewritten.
#version 450

layout(local_size_x = 256) in;

layout(set = 0, binding = 0) buffer Dst {
  uint words[];
};

layout(push_constant) uniform Params {
  uint first;  // window byte offset of the first byte to write
  uint end;    // one past the last
  uvec2 pat;
}
pc;

void main() {
  const uint w0 = pc.first >> 2;
  const uint w1 = (pc.end + 3u) >> 2;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint w = w0 + gl_GlobalInvocationID.x; w < w1; w += stride) {
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
}
