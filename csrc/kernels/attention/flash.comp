// Fused scaled dot-product attention, forward and backward, without the score matrix:
//   s_ij = scale * q_i . k_j + mask_ij (bool mask: -inf where false; causal: -inf for j > i),
//   p_ij = exp(s_ij - lse_i), lse_i = log sum_j exp(s_ij), out_i = sum_j p_ij z_ij v_j, where
//   z_ij is dropout's factor (0, or 1 / keep where the Philox word of element (b, h, i, j) is
//   below pc.keep).
//   FORWARD: a workgroup per (batch, head, block of ROWS query rows) streams tiles of TILE keys
//            through shared memory with an online softmax (running max m and sum l; the float32
//            accumulator is rescaled by exp(m_old - m_new)); writes out and lse (float32).
//   PRE:     stats_i = (lse_i, D_i = rowsum(dO_i * out_i)), an invocation per query row.
//   DQ:      a workgroup per query block loops over the key tiles: dp_ij = z_ij dO_i . v_j,
//            ds_ij = p_ij (dp_ij - D_i), dq_i = scale sum_j ds_ij k_j (ds is also the gradient
//            of an additive mask, written where asked).
//   DKV:     a workgroup per (batch, key / value head, block of ROWS keys) loops over the query
//            heads that share it (grouped-query attention) and their query tiles:
//            dv_j = sum_i p_ij z_ij dO_i, dk_j = scale sum_i ds_ij q_i. No atomics.
// ROWS = LOCAL / SPLIT rows of SPLIT invocations; each invocation owns every SPLIT-th vec4 of
// its row's accumulators. Tiles are ROWS x D4 vec4s (zero beyond the head dims and lengths).
// Float32 math; float16 / bfloat16 operands load as float and store rounded.
//
// Ops, specialisation constants and push constants: flash.h.
// Arguments: 0 out (FORWARD), stats (PRE), dq (DQ) or dk (DKV); 1 q (lse for PRE); 2 k (out
// for PRE); 3 v (dO for PRE); 4 mask; 5 lse (FORWARD) or stats; 6 dO; 7 dS (DQ) or dv (DKV).
// dO, out (backward), stats, dq, dk, dv and dS are contiguous; an absent argument binds
// another one, unused.
#version 450
layout(local_size_x = 64) in;

#include "attention/flash.h"
#include "common.glsl"

MPSRT_ARG(0)
MPSRT_ARG(1)
MPSRT_ARG(2)
MPSRT_ARG(3)
MPSRT_ARG(4)
MPSRT_ARG(5)
MPSRT_ARG(6)
MPSRT_ARG(7)

const uint ROWS = LOCAL / SPLIT;
const uint TILE = ROWS;
const uint NACC = (D4 + SPLIT - 1u) / SPLIT;
#define NEG_INF uintBitsToFloat(0xff800000u)
#define POS_INF uintBitsToFloat(0x7f800000u)

// A tile's vec4s: ROWS x D4 (the launch keeps the shared memory within 32 KiB).
const uint TILE_VEC4 = ROWS * D4;
shared vec4 sa[TILE_VEC4];  // ROWS x D4: this workgroup's rows (q; k for DKV)
shared vec4 sb[TILE_VEC4];  // ROWS x D4: dO (DQ); v (DKV)
shared vec4 tk[TILE_VEC4];  // TILE x D4: the tile's k (q for DKV)
shared vec4 tv[TILE_VEC4];  // TILE x D4: the tile's v (dO for DKV)
shared float ss[LOCAL / 4u * LOCAL / 4u];  // ROWS x TILE
shared float sp[LOCAL / 4u * LOCAL / 4u];
shared float sl[LOCAL];  // a DKV tile's lse and D per query row
shared float sd[LOCAL];

uint lq() { return pc.lens & 0xffffu; }
uint lk() { return pc.lens >> 16; }
uint dqk() { return pc.dims & 0xffffu; }
uint dv() { return pc.dims >> 16; }
uint hq() { return pc.heads & 0xffffu; }
uint group() { return pc.heads >> 16; }

// vec4 n (elements 4n..4n+3, those below `len`) of the row at element `at` of an argument.
#define MPSRT_LD4(b) \
  vec4 ld4_##b(uint at, uint n, uint len) { \
    vec4 r = vec4(0.0); \
    for (uint c = 0u; c < 4u; ++c) { \
      if (4u * n + c < len) r[c] = ld##b##f(DT, at + 4u * n + c); \
    } \
    return r; \
  }
MPSRT_LD4(1)
MPSRT_LD4(2)
MPSRT_LD4(3)
MPSRT_LD4(6)

// Philox4x32-10 (mpsrt/philox.h): the block `ctr` under key `key`.
uvec4 philox(uvec2 ctr, uvec2 key) {
  uvec4 c = uvec4(ctr, 0u, 0u);
  uvec2 k = key;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) k += uvec2(0x9E3779B9u, 0xBB67AE85u);
    uint hi0, lo0, hi1, lo1;
    umulExtended(0xD2511F53u, c.x, hi0, lo0);
    umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
    c = uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
  }
  return c;
}

// Dropout's factor for element (bh, i, j): word e of the op's Philox stream, e the element's
// index in [B, Hq, Lq, Lk]; 1 without dropout.
float drop(uint bh, uint i, uint j) {
  if (DROPOUT == 0u) return 1.0;
  uint64_t e = (uint64_t(bh) * lq() + i) * lk() + j;
  uint64_t blk = (uint64_t(pc.offset[1]) << 32 | pc.offset[0]) + (e >> 2);
  uvec4 w = philox(uvec2(uint(blk), uint(blk >> 32)), uvec2(pc.seed[0], pc.seed[1]));
  return w[uint(e & 3ul)] < pc.keep ? 4294967296.0 / float(pc.keep) : 0.0;
}

// The score of row i (batch b, query head h) for key j from its dot product; -inf where
// masked or out of range.
float score(float qk, uint b, uint h, uint i, uint j) {
  if (i >= lq() || j >= lk() || (CAUSAL != 0u && j > i)) return NEG_INF;
  float s = qk * pc.scale;
  if (HAS_MASK != 0u) {
    float m = ld4f(DTM, b * pc.ms[0] + h * pc.ms[1] + i * pc.ms[2] + j);
    s = DTM == DT_BOOL ? (m != 0.0 ? s : NEG_INF) : s + m;
  }
  return s;
}

float dot_a_k(uint ra, uint rk) {
  float s = 0.0;
  for (uint x = 0u; x < D4; ++x) s += dot(sa[ra * D4 + x], tk[rk * D4 + x]);
  return s;
}
float dot_b_v(uint rb, uint rv) {
  float s = 0.0;
  for (uint x = 0u; x < D4; ++x) s += dot(sb[rb * D4 + x], tv[rv * D4 + x]);
  return s;
}

// Rows [r0, r0 + ROWS) of q (1) into sa, of dO (6) into sb (DQ), for batch b, head h.
void load_rows(uint r0, uint b, uint h, bool grad) {
  for (uint x = gl_LocalInvocationID.x; x < ROWS * D4; x += LOCAL) {
    uint i = r0 + x / D4, n = x % D4;
    bool in_ = i < lq();
    sa[x] = in_ ? ld4_1(b * pc.qs[0] + h * pc.qs[1] + i * pc.qs[2], n, dqk()) : vec4(0.0);
    if (grad) sb[x] = in_ ? ld4_6(((b * hq() + h) * lq() + i) * dv(), n, dv()) : vec4(0.0);
  }
}

// Keys [j0, j0 + TILE) of k (2) into tk and v (3) into tv, for batch b, key / value head hk.
void load_keys(uint j0, uint b, uint hk) {
  for (uint x = gl_LocalInvocationID.x; x < TILE * D4; x += LOCAL) {
    uint j = j0 + x / D4, n = x % D4;
    bool in_ = j < lk();
    tk[x] = in_ ? ld4_2(b * pc.ks[0] + hk * pc.ks[1] + j * pc.ks[2], n, dqk()) : vec4(0.0);
    tv[x] = in_ ? ld4_3(b * pc.vs[0] + hk * pc.vs[1] + j * pc.vs[2], n, dv()) : vec4(0.0);
  }
}

// The keys a query block starting at row i0 sees: all, or (causal) up to its last row.
uint key_end(uint i0) {
  return CAUSAL != 0u ? min(lk(), i0 + ROWS) : lk();
}

// The online softmax's step for a tile of scores ss[r]: rescales acc and l to the new max m,
// adds the tile's weights (times dropout's factors sp[r]) times v.
void online_step(uint r, uint t, inout float m, inout float l, inout vec4 acc[MAX_ACC]) {
  float mt = m;
  for (uint c = 0u; c < TILE; ++c) mt = max(mt, ss[r * TILE + c]);
  if (mt == NEG_INF) return;
  float alpha = m == NEG_INF ? 0.0 : exp(m - mt);
  l *= alpha;
  for (uint k = 0u; k < NACC; ++k) acc[k] *= alpha;
  for (uint c = 0u; c < TILE; ++c) {
    float s = ss[r * TILE + c];
    float p = s == NEG_INF ? 0.0 : exp(s - mt);
    l += p;
    p *= sp[r * TILE + c];
    for (uint k = 0u; k < NACC; ++k) acc[k] += p * tv[c * D4 + t + SPLIT * k];
  }
  m = mt;
}

void forward(uint lid, uint r, uint t) {
  uint bh = gl_WorkGroupID.y, b = bh / hq(), h = bh % hq(), hk = h / group();
  uint i0 = gl_WorkGroupID.x * ROWS, i = i0 + r;
  load_rows(i0, b, h, false);
  float m = NEG_INF, l = 0.0;
  vec4 acc[MAX_ACC];
  for (uint k = 0u; k < NACC; ++k) acc[k] = vec4(0.0);
  uint kend = key_end(i0);
  for (uint j0 = 0u; j0 < kend; j0 += TILE) {
    barrier();
    load_keys(j0, b, hk);
    barrier();
    for (uint c = t; c < TILE; c += SPLIT) {
      ss[r * TILE + c] = score(dot_a_k(r, c), b, h, i, j0 + c);
      sp[r * TILE + c] = drop(bh, i, j0 + c);
    }
    barrier();
    online_step(r, t, m, l, acc);
  }
  if (i >= lq()) return;
  uint o = b * pc.os[0] + h * pc.os[1] + i * pc.os[2];
  for (uint k = 0u; k < NACC; ++k) {
    uint n = t + SPLIT * k;
    vec4 v = l > 0.0 ? acc[k] / l : vec4(0.0);
    for (uint c = 0u; c < 4u; ++c) {
      if (4u * n + c < dv()) st0f(DT, o + 4u * n + c, v[c]);
    }
  }
  if (t == 0u) st5f(DT_F32, bh * lq() + i, l > 0.0 ? m + log(l) : POS_INF);
}

// PRE: stats (0) = (lse (1), rowsum(dO (3) * out (2))) per row, all contiguous.
void pre(uint lid) {
  uint i = gl_WorkGroupID.x * LOCAL + lid, row = gl_WorkGroupID.y * lq() + i;
  if (i >= lq()) return;
  float s = 0.0;
  for (uint d = 0u; d < dv(); ++d) s += ld2f(DT, row * dv() + d) * ld3f(DT, row * dv() + d);
  st0f(DT_F32, 2u * row, ld1f(DT_F32, row));
  st0f(DT_F32, 2u * row + 1u, s);
}

// Stores a row's accumulator times `f` at element `at` (contiguous, `len` elements), into
// dq / dk (0) or dv (7).
void store_acc(bool to7, uint at, uint len, uint t, float f, vec4 acc[MAX_ACC]) {
  for (uint k = 0u; k < NACC; ++k) {
    uint n = t + SPLIT * k;
    for (uint c = 0u; c < 4u; ++c) {
      if (4u * n + c >= len) continue;
      if (to7) {
        st7f(DT, at + 4u * n + c, acc[k][c] * f);
      } else {
        st0f(DT, at + 4u * n + c, acc[k][c] * f);
      }
    }
  }
}

void grad_q(uint lid, uint r, uint t) {
  uint bh = gl_WorkGroupID.y, b = bh / hq(), h = bh % hq(), hk = h / group();
  uint i0 = gl_WorkGroupID.x * ROWS, i = i0 + r, row = bh * lq() + i;
  load_rows(i0, b, h, true);
  float lse = i < lq() ? ld5f(DT_F32, 2u * row) : POS_INF;
  float dsum = i < lq() ? ld5f(DT_F32, 2u * row + 1u) : 0.0;
  vec4 acc[MAX_ACC];
  for (uint k = 0u; k < NACC; ++k) acc[k] = vec4(0.0);
  uint kend = key_end(i0);
  for (uint j0 = 0u; j0 < kend; j0 += TILE) {
    barrier();
    load_keys(j0, b, hk);
    barrier();
    for (uint c = t; c < TILE; c += SPLIT) {
      uint j = j0 + c;
      float s = score(dot_a_k(r, c), b, h, i, j);
      float p = s == NEG_INF ? 0.0 : exp(s - lse);
      float ds = p * (dot_b_v(r, c) * drop(bh, i, j) - dsum);
      ss[r * TILE + c] = ds;
      if (BIAS_GRAD != 0u && i < lq() && j < lk()) st7f(DT_F32, row * lk() + j, ds);
    }
    barrier();
    for (uint c = 0u; c < TILE; ++c) {
      float ds = ss[r * TILE + c];
      for (uint k = 0u; k < NACC; ++k) acc[k] += ds * tk[c * D4 + t + SPLIT * k];
    }
  }
  if (i < lq()) store_acc(false, row * dqk(), dqk(), t, pc.scale, acc);
}

// DKV's tile of query rows [i0, i0 + TILE) of head h: q into tk, dO into tv, lse and D.
void load_queries(uint i0, uint b, uint h) {
  uint bh = b * hq() + h;
  for (uint x = gl_LocalInvocationID.x; x < TILE * D4; x += LOCAL) {
    uint i = i0 + x / D4, n = x % D4;
    bool in_ = i < lq();
    tk[x] = in_ ? ld4_1(b * pc.qs[0] + h * pc.qs[1] + i * pc.qs[2], n, dqk()) : vec4(0.0);
    tv[x] = in_ ? ld4_6((bh * lq() + i) * dv(), n, dv()) : vec4(0.0);
  }
  uint lid = gl_LocalInvocationID.x;
  if (lid < TILE) {
    uint i = i0 + lid;
    sl[lid] = i < lq() ? ld5f(DT_F32, 2u * (bh * lq() + i)) : POS_INF;
    sd[lid] = i < lq() ? ld5f(DT_F32, 2u * (bh * lq() + i) + 1u) : 0.0;
  }
}

// One query tile's contribution to key c's dk and dv (DKV).
void kv_tile(uint c, uint t, uint b, uint h, uint i0, uint j, inout vec4 gk[MAX_ACC],
             inout vec4 gv[MAX_ACC]) {
  uint bh = b * hq() + h;
  for (uint q = t; q < TILE; q += SPLIT) {
    uint i = i0 + q;
    float s = score(dot_a_k(c, q), b, h, i, j);
    float p = s == NEG_INF ? 0.0 : exp(s - sl[q]);
    float z = drop(bh, i, j);
    ss[c * TILE + q] = p * z;
    sp[c * TILE + q] = p * (dot_b_v(c, q) * z - sd[q]);
  }
  barrier();
  for (uint q = 0u; q < TILE; ++q) {
    float pz = ss[c * TILE + q], ds = sp[c * TILE + q];
    for (uint k = 0u; k < NACC; ++k) {
      gv[k] += pz * tv[q * D4 + t + SPLIT * k];
      gk[k] += ds * tk[q * D4 + t + SPLIT * k];
    }
  }
}

void grad_kv(uint lid, uint c, uint t) {
  uint bk = gl_WorkGroupID.y, hkv = hq() / group(), b = bk / hkv, hk = bk % hkv;
  uint j0 = gl_WorkGroupID.x * ROWS, j = j0 + c;
  // This block's keys into sa (k) and sb (v).
  for (uint x = lid; x < ROWS * D4; x += LOCAL) {
    uint jj = j0 + x / D4, n = x % D4;
    bool in_ = jj < lk();
    sa[x] = in_ ? ld4_2(b * pc.ks[0] + hk * pc.ks[1] + jj * pc.ks[2], n, dqk()) : vec4(0.0);
    sb[x] = in_ ? ld4_3(b * pc.vs[0] + hk * pc.vs[1] + jj * pc.vs[2], n, dv()) : vec4(0.0);
  }
  vec4 gk[MAX_ACC], gv[MAX_ACC];
  for (uint k = 0u; k < NACC; ++k) gk[k] = gv[k] = vec4(0.0);
  uint istart = CAUSAL != 0u ? j0 / TILE * TILE : 0u;
  for (uint g = 0u; g < group(); ++g) {
    uint h = hk * group() + g;
    for (uint i0 = istart; i0 < lq(); i0 += TILE) {
      barrier();
      load_queries(i0, b, h);
      barrier();
      kv_tile(c, t, b, h, i0, j, gk, gv);
    }
  }
  if (j >= lk()) return;
  store_acc(false, (bk * lk() + j) * dqk(), dqk(), t, pc.scale, gk);
  store_acc(true, (bk * lk() + j) * dv(), dv(), t, 1.0, gv);
}

void main() {
  uint lid = gl_LocalInvocationID.x;
  if (OP == OP_PRE) {
    pre(lid);
  } else if (OP == OP_FORWARD) {
    forward(lid, lid / SPLIT, lid % SPLIT);
  } else if (OP == OP_DQ) {
    grad_q(lid, lid / SPLIT, lid % SPLIT);
  } else {
    grad_kv(lid, lid / SPLIT, lid % SPLIT);
  }
}
