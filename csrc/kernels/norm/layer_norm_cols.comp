// Layer norm's weight and bias gradients: column reductions over the rows (layer_norm.comp's
// geometry: row o's element r of x and dy read strided, mean and rstd one per row):
//   dw[r] = sum over rows of dy * (x - mean) * rstd,   db[r] = sum over rows of dy
// A workgroup covers 32 columns with 8 invocations each, which loop over every 8th row (up to
// 8 * 65534 rows), then add their partial sums in shared memory. Float32 math.
//
// Specialisation constants and push constants: layer_norm_cols.h.
// Arguments: 0 dw, 1 db (an unwanted one binds the other, unused), 2 x, 3 dy, 4 mean, 5 rstd.
#version 450
layout(local_size_x = 256) in;

#include "norm/layer_norm_cols.h"
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)
MPSRT_ARG(4)
MPSRT_ARG(5)

shared float s_w[SLICES][COLS];
shared float s_b[SLICES][COLS];

uint row_offset(uint a, uint o) {
  uint off = 0u;
  for (uint d = 0u; d < ONDIM; ++d) {
    off += (o % pc.osize[d]) * pc.ostride[a * 3u + d];
    o /= pc.osize[d];
  }
  return off;
}
uint elem_offset(uint a, uint r) {
  uint off = 0u;
  for (uint d = 0u; d < INDIM; ++d) {
    off += (r % pc.isize[d]) * pc.istride[a * 3u + d];
    r /= pc.isize[d];
  }
  return off;
}

void main() {
  uint col = gl_LocalInvocationID.x % COLS, slice = gl_LocalInvocationID.x / COLS;
  uint r = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * COLS + col;
  float w = 0.0, b = 0.0;
  if (r < pc.len) {
    uint ex = elem_offset(0u, r), eg = elem_offset(1u, r);
    for (uint o = slice; o < pc.rows; o += SLICES) {
      float g = ld3f(DTG, row_offset(1u, o) + eg);
      b += g;
      if (WANT_W != 0u) {
        w += g * (ld2f(DTX, row_offset(0u, o) + ex) - ld4f(DTS, o)) * ld5f(DTS, o);
      }
    }
  }
  s_w[slice][col] = w;
  s_b[slice][col] = b;
  barrier();
  if (slice == 0u && r < pc.len) {
    for (uint k = 1u; k < SLICES; ++k) {
      w += s_w[k][col];
      b += s_b[k][col];
    }
    if (WANT_W != 0u) st0f(DTW, r, w);
    if (WANT_B != 0u) st1f(DTW, r, b);
  }
}
