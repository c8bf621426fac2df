// The tile loop of the matrix-product kernels (gemm/gemm.comp, conv/conv.comp): a workgroup
// computes a BM x BN tile of C = A @ B (rows m0.., columns n0..) over K in chunks of BK staged in
// shared memory as float32 (A's chunk stored k-major, so both tiles are read along their
// contiguous dim); each invocation accumulates a TM x TN micro-tile (rows ty + i * BM / TM,
// columns tx + j * BN / TN: neighbouring invocations read neighbouring shared-memory words).
// Each chunk's products are summed apart and then added to the running sums (two levels: the
// rounding error grows with K / BK + BK rather than with K, about what torch CPU's blocked sums
// give).
//
// The includer supplies, before including: the specialisation constants BM, BN, BK, TM, TN and
// WG (the workgroup size, (BM / TM) * (BN / TN)), the bools TILE_A_KFAST / TILE_B_KFAST (whether
// the loaders are walked along k, A's or B's contiguous dim, rather than along m / n), and after
// including, the definitions of
//   float tile_load_a(uint b, uint m, uint k);  // A[b][m][k], asked only inside M x K
//   float tile_load_b(uint b, uint k, uint n);  // B[b][k][n], asked only inside K x N
//   void tile_store(uint b, uint m, uint n, float acc);  // each output inside M x N
// Elements outside M, N and the chunk's K range load as zeros. The loops of fixed length are
// unrolled ([[unroll]]): an invocation loops about (k_end - k_begin) / BK + 4 times per tile,
// which llvmpipe's 65535-iteration budget bounds (the glue keeps below it). Every invocation of
// a workgroup runs tile_run alike (the barriers stay in uniform control flow). Shared memory:
// BK * (BM + BN + 2) floats.
#extension GL_EXT_control_flow_attributes : require

float tile_load_a(uint b, uint m, uint k);
float tile_load_b(uint b, uint k, uint n);
void tile_store(uint b, uint m, uint n, float acc);

// Row strides of the staged tiles, padded by one word so that the stores of a chunk read along
// k (A row-major) spread over the banks.
const uint AS = BM + 1;
const uint BS = BN + 1;
shared float As[BK * AS];  // As[k * AS + m]
shared float Bs[BK * BS];  // Bs[k * BS + n]

// Stages A's rows m0.. and columns k0.. (BM x BK, k below k_end) in As.
void tile_stage_a(uint b, uint m0, uint k0, uint k_end, uint M) {
  [[unroll]] for (uint r = 0u; r < (BM * BK + WG - 1u) / WG; ++r) {
    const uint i = gl_LocalInvocationID.x + r * WG;
    const uint m = TILE_A_KFAST ? i / BK : i % BM;
    const uint k = TILE_A_KFAST ? i % BK : i / BM;
    float v = 0.0;
    if (i < BM * BK && m0 + m < M && k0 + k < k_end) v = tile_load_a(b, m0 + m, k0 + k);
    if (i < BM * BK) As[k * AS + m] = v;
  }
}

// Stages B's rows k0.. and columns n0.. (BK x BN) in Bs.
void tile_stage_b(uint b, uint k0, uint n0, uint k_end, uint N) {
  [[unroll]] for (uint r = 0u; r < (BK * BN + WG - 1u) / WG; ++r) {
    const uint i = gl_LocalInvocationID.x + r * WG;
    const uint n = TILE_B_KFAST ? i / BK : i % BN;
    const uint k = TILE_B_KFAST ? i % BK : i / BN;
    float v = 0.0;
    if (i < BK * BN && n0 + n < N && k0 + k < k_end) v = tile_load_b(b, k0 + k, n0 + n);
    if (i < BK * BN) Bs[k * BS + n] = v;
  }
}

// The output tile of batch b at rows m0.., columns n0.., summing k over [k_begin, k_end).
void tile_run(uint b, uint m0, uint n0, uint k_begin, uint k_end, uint M, uint N) {
  const uint RM = BM / TM;  // invocations along m (rows of the micro-tiles' grid)
  const uint RN = BN / TN;
  const uint tx = gl_LocalInvocationID.x % RN;
  const uint ty = gl_LocalInvocationID.x / RN;
  float acc[TM * TN];
  float part[TM * TN];  // the chunk's sums, added to acc once per chunk
  precise float comp[TM * TN];
  [[unroll]] for (uint i = 0u; i < TM * TN; ++i) {
    acc[i] = 0.0;
    comp[i] = 0.0;
  }
  float a[TM];
  float bv[TN];
  for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
    tile_stage_a(b, m0, k0, k_end, M);
    tile_stage_b(b, k0, n0, k_end, N);
    barrier();
    [[unroll]] for (uint i = 0u; i < TM * TN; ++i) part[i] = 0.0;
    [[unroll]] for (uint k = 0u; k < BK; ++k) {
      [[unroll]] for (uint i = 0u; i < TM; ++i) a[i] = As[k * AS + ty + i * RM];
      [[unroll]] for (uint j = 0u; j < TN; ++j) bv[j] = Bs[k * BS + tx + j * RN];
      [[unroll]] for (uint i = 0u; i < TM; ++i) {
        [[unroll]] for (uint j = 0u; j < TN; ++j) {
          part[i * TN + j] = fma(a[i], bv[j], part[i * TN + j]);
        }
      }
    }
    [[unroll]] for (uint i = 0u; i < TM * TN; ++i) {
      // Compensated (Kahan) addition: comp carries what acc's rounding dropped.
      const float y = part[i] - comp[i];
      const float t = acc[i] + y;
      comp[i] = (t - acc[i]) - y;
      acc[i] = t;
    }
    barrier();
  }
  [[unroll]] for (uint i = 0u; i < TM; ++i) {
    const uint m = m0 + ty + i * RM;
    if (m >= M) continue;
    [[unroll]] for (uint j = 0u; j < TN; ++j) {
      const uint n = n0 + tx + j * RN;
      if (n < N) tile_store(b, m, n, acc[i * TN + j]);
    }
  }
}
