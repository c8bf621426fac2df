// The operands of conv.comp and conv_direct.comp as a GEMM per group (conv.h): A's element
// (g, m, k), B's (g, k, n) addressed in place (B the im2col view of x: padding, and gathering
// the gaps between strides, load zero), and the output's element (g, m, n). The includer
// declares the push block (conv.h), the arguments 0-3 and the specialisation constants DT,
// MODE and HAS_BIAS; the groups are grid z over the splits of K (one outside MODE_WEIGHT), z
// being split x groups + g.
#extension GL_EXT_control_flow_attributes : require

uint kvol() {
  return (pc.geo[0] & 255u) * (pc.geo[1] & 255u) * (pc.geo[2] & 255u);
}

// The groups: grid z over the splits of K (one outside MODE_WEIGHT).
uint groups() {
  return gl_NumWorkGroups.z / ((pc.K + pc.kchunk - 1u) / pc.kchunk);
}

// A linear index over (d, h, w) of sizes (d0, d1, d2) as its coordinates.
uvec3 coords(uint i, uint d0, uint d1, uint d2) {
  return uvec3(i / (d1 * d2), (i / d2) % d1, i % d2);
}

// Kernel position kk (over the kernel's d, h, w) as coordinates.
uvec3 kcoords(uint kk) {
  return coords(kk, pc.geo[0] & 255u, pc.geo[1] & 255u, pc.geo[2] & 255u);
}

// x's element offset at batch nb, channel ch, for position o and kernel position k, or -1 where it is padding (or, gathering, not a multiple of the stride).
int x_at(uint nb, uint ch, uvec3 o, uvec3 k) {
  uint e = nb * pc.sx[0] + ch * pc.sx[1];
  [[unroll]] for (uint d = 0u; d < 3u; ++d) {
    const uint s = (pc.geo[d] >> 8) & 255u, dil = (pc.geo[d] >> 16) & 255u, p = pc.geo[d] >> 24;
    int q;
    if (MODE == MODE_GATHER) {
      const int t = int(o[d] + p) - int(k[d] * dil);
      if (t < 0 || uint(t) % s != 0u) return -1;
      q = t / int(s);
    } else {
      q = int(o[d] * s + k[d] * dil) - int(p);
    }
    if (q < 0 || uint(q) >= pc.xsize[d]) return -1;
    e += uint(q) * pc.sx[2u + d];
  }
  return int(e);
}

float conv_a(uint z, uint m, uint k) {
  const uint g = z % groups();
  if (MODE == MODE_WEIGHT) {
    const uint osz = pc.osize[0] * pc.osize[1] * pc.osize[2];
    const uvec3 o = coords(k % osz, pc.osize[0], pc.osize[1], pc.osize[2]);
    return ld1f(DT, (k / osz) * pc.sa[0] + (g * pc.M + m) * pc.sa[1] + o.x * pc.sa[2] +
                        o.y * pc.sa[3] + o.z * pc.sa[4]);
  }
  const uint kv = kvol(), c = k / kv;
  const uvec3 kk = kcoords(k % kv);
  const uint mc = MODE == MODE_FORWARD ? (g * pc.M + m) * pc.sa[0] + c * pc.sa[1]
                                       : m * pc.sa[0] + (g * (pc.K / kv) + c) * pc.sa[1];
  return ld1f(DT, mc + kk.x * pc.sa[2] + kk.y * pc.sa[3] + kk.z * pc.sa[4]);
}

float conv_b(uint z, uint k, uint n) {
  const uint g = z % groups(), kv = kvol();
  const uint osz = pc.osize[0] * pc.osize[1] * pc.osize[2];
  // MODE_WEIGHT: k runs over (batch, positions), n over (channel, kernel position).
  const uint pos = MODE == MODE_WEIGHT ? k : n, ck = MODE == MODE_WEIGHT ? n : k;
  const uint cg = (MODE == MODE_WEIGHT ? pc.N : pc.K) / kv;
  const int e = x_at(pos / osz, g * cg + ck / kv,
                     coords(pos % osz, pc.osize[0], pc.osize[1], pc.osize[2]), kcoords(ck % kv));
  return e < 0 ? 0.0 : ld2f(DT, uint(e));
}

void conv_store(uint z, uint m, uint n, float acc) {
  if (MODE == MODE_WEIGHT) {
    st0f(DT_F32, (z * pc.M + m) * pc.N + n, acc);
    return;
  }
  const uint co = z * pc.M + m, osz = pc.osize[0] * pc.osize[1] * pc.osize[2];
  if (HAS_BIAS != 0u) acc += ld3f(DT, co);
  st0f(DT, ((n / osz) * groups() * pc.M + co) * osz + n % osz, acc);
}
