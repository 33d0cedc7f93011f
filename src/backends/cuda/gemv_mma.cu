// Tensor-core decode GEMV: see gemv_mma.cuh for the plan. Numerics: each weight value is
// dequantized to f16 (q exact, times its f16 scale, minus its f16 min: one rounding of
// 2^-11 relative), products and sums are fp32 inside mma, the output is rounded to f16.
#include "backends/cuda/device.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "backends/cuda/gemv_mma.cuh"
#include "backends/cuda/pdl.cuh"

namespace vi::cuda {
namespace {

constexpr int kWarps = 8;          // warps per block; they split K
constexpr int kUnitsPerStep = 4;   // lanes per row in one mma row group: 4 units of 32 values


// A unit is 32 values of one row that one lane turns into the A fragments of 8 mma steps:
// h[2j] = values (4j, 4j+1), h[2j+1] = values (4j+2, 4j+3) as f16 pairs, and the activations
// that meet them are the 4 consecutive values at xpos(u, j) (one 8-byte load). The order of
// the 32 values inside the unit is whatever the weight layout makes cheap to unpack.
template <DType W>
struct Unit;

// Scales and mins of sub-blocks 2p and 2p + 1 of a Q4_K/Q5_K block from its 16-byte header,
// as f16 pairs: (s_a, s_a), (-m_a, -m_a) for the low-nibble sub-block and (s_b / 16, s_b / 16),
// (-m_b, -m_b) for the high-nibble one (its values come out as 1024 + 16 q).
struct K4Scales {
  __half2 sa, ma, sb, mb;
};
__device__ __forceinline__ K4Scales k4_scales(const uint4& hdr, int p) {
  const uint32_t w0 = hdr.y, w1 = hdr.z, w2 = hdr.w;  // scales[0..3], [4..7], [8..11]
  // The 6-bit scales and mins of sub-blocks 4..7 are split between bytes 0..7 and 8..11.
  const uint32_t scs = p >= 2 ? (w2 & 0x0F0F0F0Fu) | ((w0 >> 2) & 0x30303030u) : w0 & 0x3F3F3F3Fu;
  const uint32_t mns = p >= 2 ? ((w2 >> 4) & 0x0F0F0F0Fu) | ((w1 >> 2) & 0x30303030u) : w1 & 0x3F3F3F3Fu;
  const uint32_t sel = (p & 1) ? 0x4342u : 0x4140u;  // bytes (2p, 2p+1) % 4, each under 0x64
  const __half2 k1024 = __float2half2_rn(1024.0f);
  const __half2 dd = as_h2(hdr.x);  // (d, dmin)
  // 0x64XX as f16 is 1024 + XX exactly: small integers to f16 without a conversion.
  const __half2 sc = __hmul2(__hsub2(as_h2(__byte_perm(scs, 0x64646464u, sel)), k1024), __low2half2(dd));
  const __half2 mn = __hmul2(__hsub2(as_h2(__byte_perm(mns, 0x64646464u, sel)), k1024), __high2half2(dd));
  K4Scales k;
  k.sa = __low2half2(sc);
  k.ma = __hneg2(__low2half2(mn));
  k.sb = __hmul2(__high2half2(sc), __float2half2_rn(0.0625f));  // exact in f16
  k.mb = __hneg2(__high2half2(mn));
  return k;
}

// Q4_K in its file layout: unit u is 16 bytes of qs of super-block u / 8 (byte l holds value
// l of sub-block 2p in its low nibble and of sub-block 2p + 1 in its high nibble), plus the
// block's 16-byte header (d, dmin, 12 bytes of 6-bit scales and mins).
template <>
struct Unit<DType::Q4_K> {
  struct Raw {
    uint4 q, hdr;
  };
  __device__ static void load(const uint8_t* row, int u, Raw& r) {
    const uint8_t* b = row + (u >> 3) * sizeof(BlockQ4_K);
    r.hdr = __ldcs(reinterpret_cast<const uint4*>(b));
    r.q = __ldcs(reinterpret_cast<const uint4*>(b + 16 + 16 * (u & 7)));
  }
  __device__ static int xpos(int u, int j) {
    const int a0 = (u >> 3) * kQKK + ((u & 7) >> 1) * 64 + (u & 1) * 16;  // low-nibble run
    return a0 + (j < 4 ? 4 * j : 32 + 4 * (j - 4));
  }
  __device__ static void decode(const Raw& r, int u, uint32_t h[16]) {
    const K4Scales k4 = k4_scales(r.hdr, static_cast<int>(u & 7) >> 1);  // sub-blocks 2p, 2p + 1
    const __half2 k1024 = __float2half2_rn(1024.0f);
    const uint32_t q[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
#pragma unroll
    for (int m = 0; m < 4; ++m) {
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const uint32_t t = __byte_perm(q[m], 0, k ? 0x4342u : 0x4140u);  // bytes 2k, 2k+1 in halves
        const __half2 a = as_h2((t & 0x000F000Fu) | 0x64006400u);
        const __half2 b = as_h2((t & 0x00F000F0u) | 0x64006400u);
        h[2 * m + k] = as_u32(__hfma2(__hsub2(a, k1024), k4.sa, k4.ma));
        h[8 + 2 * m + k] = as_u32(__hfma2(__hsub2(b, k1024), k4.sb, k4.mb));
      }
    }
  }
};

// Q5_K in its file layout: as Q4_K, plus the fifth bits: qh byte l holds bit j for value l of
// sub-block j, so the unit's 16 qh bytes are one more aligned 16-byte load.
template <>
struct Unit<DType::Q5_K> {
  struct Raw {
    uint4 q, qh, hdr;
  };
  __device__ static void load(const uint8_t* row, int u, Raw& r) {
    const uint8_t* b = row + (u >> 3) * sizeof(BlockQ5_K);
    r.hdr = __ldcs(reinterpret_cast<const uint4*>(b));
    r.qh = __ldcs(reinterpret_cast<const uint4*>(b + 16 + 16 * (u & 1)));
    r.q = __ldcs(reinterpret_cast<const uint4*>(b + 48 + 16 * (u & 7)));
  }
  __device__ static int xpos(int u, int j) { return Unit<DType::Q4_K>::xpos(u, j); }
  __device__ static void decode(const Raw& r, int u, uint32_t h[16]) {
    const int p = static_cast<int>(u & 7) >> 1;
    const K4Scales k4 = k4_scales(r.hdr, p);
    const __half2 k1024 = __float2half2_rn(1024.0f);
    const uint32_t q[4] = {r.q.x, r.q.y, r.q.z, r.q.w}, qh[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
#pragma unroll
    for (int m = 0; m < 4; ++m) {
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const uint32_t t = __byte_perm(q[m], 0, k ? 0x4342u : 0x4140u);
        const uint32_t th = __byte_perm(qh[m], 0, k ? 0x4342u : 0x4140u);
        // Fifth bit to value 16 (low-nibble sub-block) or 256 = 16 * 16 (high-nibble one).
        const __half2 a = as_h2((t & 0x000F000Fu) | 0x64006400u | (((th >> (2 * p)) & 0x00010001u) << 4));
        const __half2 b = as_h2((t & 0x00F000F0u) | 0x64006400u | (((th >> (2 * p + 1)) & 0x00010001u) << 8));
        h[2 * m + k] = as_u32(__hfma2(__hsub2(a, k1024), k4.sa, k4.ma));
        h[8 + 2 * m + k] = as_u32(__hfma2(__hsub2(b, k1024), k4.sb, k4.mb));
      }
    }
  }
};

// Q8_0R (core/dtype.h): unit u is Q8_0 block u, its 32 int8 values 16-byte aligned.
template <>
struct Unit<DType::Q8_0R> {
  struct Raw {
    uint4 q0, q1;
    unsigned short d;
  };
  __device__ static void load(const uint8_t* row, int u, Raw& r) {
    const BlockQ8_0R* b = reinterpret_cast<const BlockQ8_0R*>(row) + (u >> 3);
    const uint4* q = reinterpret_cast<const uint4*>(b->qs + 32 * (u & 7));
    r.q0 = __ldcs(q);
    r.q1 = __ldcs(q + 1);
    r.d = __ldcs(reinterpret_cast<const unsigned short*>(b->d + (u & 7)));
  }
  __device__ static int xpos(int u, int j) { return 32 * u + 4 * j; }
  __device__ static void decode(const Raw& r, int, uint32_t h[16]) {
    const __half2 d = __half2half2(__ushort_as_half(r.d));
    const __half2 k1152 = __float2half2_rn(1152.0f);
    const uint32_t q[8] = {r.q0.x, r.q0.y, r.q0.z, r.q0.w, r.q1.x, r.q1.y, r.q1.z, r.q1.w};
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const uint32_t v = q[m] ^ 0x80808080u;  // int8 q -> unsigned q + 128
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const __half2 a = as_h2(__byte_perm(v, 0x64646464u, k ? 0x4342u : 0x4140u));  // 1152 + q
        h[2 * m + k] = as_u32(__hmul2(__hsub2(a, k1152), d));
      }
    }
  }
};

// Q8_0T (core/dtype.h): Q8_0R's values and scales regrouped by 16-row tiles; the kernel loads
// them (tiled addressing below), the decode is Q8_0R's, so the outputs are the same bit for bit.
template <>
struct Unit<DType::Q8_0T> : Unit<DType::Q8_0R> {};

// F16: unit u is values 32u .. 32u + 31, already in fragment order.
template <>
struct Unit<DType::F16> {
  struct Raw {
    uint4 q[4];
  };
  __device__ static void load(const uint8_t* row, int u, Raw& r) {
    const uint4* p = reinterpret_cast<const uint4*>(row) + 4 * u;
#pragma unroll
    for (int i = 0; i < 4; ++i) r.q[i] = __ldcs(p + i);
  }
  __device__ static int xpos(int u, int j) { return 32 * u + 4 * j; }
  __device__ static void decode(const Raw& r, int, uint32_t h[16]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      h[4 * i] = r.q[i].x;
      h[4 * i + 1] = r.q[i].y;
      h[4 * i + 2] = r.q[i].z;
      h[4 * i + 3] = r.q[i].w;
    }
  }
};

// Grid: ceil(N / (16 * TILES)) blocks of 32 * kWarps threads. Lane (g = lane / 4, c = lane % 4)
// reads rows n0 + 16 t + g and n0 + 16 t + g + 8 of each tile t, unit 4 s + c of each step s,
// and the activations of token g; its accumulators hold rows (g, g + 8) x tokens (2c, 2c + 1).
// MINB: blocks per SM the registers are budgeted for (2: 128 registers a thread). XSTAGE: the
// activations are loaded with the weights one step ahead (else when the step multiplies:
// fewer registers, the L2 latency exposed). SWIGLU: w is a stacked gate|up [2F, K] and y the
// SwiGLU output h [T, F]: tile t of block b takes gate rows 8 (b TILES + t) + g as its rows g and
// the matching up rows F + ... as its rows g + 8 (write_swiglu_sums, mma_f16.cuh).
template <DType W, int TILES, int MINB, bool XSTAGE, bool SWIGLU = false>
__global__ void __launch_bounds__(32 * kWarps, MINB)
    gemv_mma_kernel(const uint8_t* __restrict__ w, size_t row_bytes, const __half* __restrict__ x,
                    __half* __restrict__ y, int n_tok, int64_t N, int64_t K) {
  using U = Unit<W>;
  // One step's operands: the weight units of this lane's 2 * TILES rows and the activations.
  struct Stage {
    typename U::Raw raw[TILES][2];
    uint2 xv[XSTAGE ? 8 : 1];
  };
  __shared__ float red[kWarps][TILES][4][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int64_t n0 = int64_t(blockIdx.x) * 16 * TILES;
  const int units = static_cast<int>(K / 32), steps = (units + kUnitsPerStep - 1) / kUnitsPerStep;
  // Rows past N read row N - 1 (their results are never stored); a unit past K reads the last
  // unit, and meets zero activations. So every load is unconditional and always in bounds.
  const uint8_t* rows[TILES][2];
  const int64_t F = N / 2, f0 = int64_t(blockIdx.x) * 8 * TILES;  // SWIGLU: the tile's first gate row
  // Q8_0T: rows[t][hh] points at this lane's quant bytes of rows g + 8 hh in the tile's first
  // unit, soff[t] bytes on from rows[t][0] is its scale (an offset, not a second pointer: fewer
  // registers; rows g + 8 of a non-SWIGLU tile: 510 bytes less); a step is one unit
  // (kQ8tUnitBytes) on, as a 32-bit offset (a spill otherwise). Tiles past N read the last tile
  // (never stored). SWIGLU: tile t is half tt % 2 of gate tile tt / 2 (rows g) and of up tile
  // F / 16 + tt / 2 (rows g + 8).
  [[maybe_unused]] int soff[TILES];
  if constexpr (W == DType::Q8_0T) {
    const int64_t tile_bytes = K / 128 * kQ8tUnitBytes;
#pragma unroll
    for (int t = 0; t < TILES; ++t) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        int64_t tile;
        int rh;  // which 8 rows of the unit
        if constexpr (SWIGLU) {
          const int64_t tt = min(int64_t(blockIdx.x) * TILES + t, F / 8 - 1);
          tile = tt / 2 + (hh ? F / 16 : 0);
          rh = static_cast<int>(tt & 1);
        } else {
          tile = min(int64_t(blockIdx.x) * TILES + t, N / 16 - 1);
          rh = hh;
        }
        rows[t][hh] = w + tile * tile_bytes + 512 * rh + 16 * lane;
        if (hh == 0) soff[t] = (2048 + 4 * lane + 2 * rh) - (512 * rh + 16 * lane);
      }
    }
  } else {  // the row layouts: rows[t][hh] is the row itself
#pragma unroll
    for (int t = 0; t < TILES; ++t) {
      if constexpr (SWIGLU) {
        const int64_t f = min(f0 + 8 * t + g, F - 1);
        rows[t][0] = w + static_cast<size_t>(f) * row_bytes;
        rows[t][1] = w + static_cast<size_t>(F + f) * row_bytes;
      } else {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
          rows[t][hh] = w + static_cast<size_t>(min(n0 + 16 * t + g + 8 * hh, N - 1)) * row_bytes;
      }
    }
  }
  const bool tok_ok = g < n_tok;
  const __half* xg = x + static_cast<int64_t>(tok_ok ? g : 0) * K;

  auto load_x = [&](int s, uint2 (&xv)[8]) {
    const int u = kUnitsPerStep * s + c, uc = min(u, units - 1);
    const bool live = tok_ok && u < units;
#pragma unroll
    for (int j = 0; j < 8; ++j) xv[j] = live ? __ldg(reinterpret_cast<const uint2*>(xg + U::xpos(uc, j))) : make_uint2(0, 0);
  };
  auto load_w = [&](int s, Stage& st) {
    const int u = kUnitsPerStep * s + c, uc = min(u, units - 1);
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        if constexpr (W == DType::Q8_0T) {  // K % 128 == 0: every step is a whole unit
          const unsigned off = static_cast<unsigned>(s) * kQ8tUnitBytes;  // a row of tiles is < 2^32 bytes
          st.raw[t][hh].q0 = __ldcs(reinterpret_cast<const uint4*>(rows[t][hh] + off));
          st.raw[t][hh].q1 = __ldcs(reinterpret_cast<const uint4*>(rows[t][hh] + off + 1024));
          const int so = SWIGLU ? soff[t] : soff[t] - 510 * hh;
          st.raw[t][hh].d = __ldcs(reinterpret_cast<const unsigned short*>(rows[t][hh] + off + so));
        } else {
          U::load(rows[t][hh], uc, st.raw[t][hh]);
        }
      }
  };
  auto load = [&](int s, Stage& st) {
    load_w(s, st);
    if constexpr (XSTAGE) load_x(s, st.xv);
  };
  // Two accumulator sets per tile (even and odd k-steps) halve the chain of dependent mma.
  float acc[TILES][2][4];
#pragma unroll
  for (int t = 0; t < TILES; ++t)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[t][i / 4][i % 4] = 0.0f;
  auto compute = [&](int s, const Stage& st) {
    const int uc = min(kUnitsPerStep * s + c, units - 1);
    uint2 xv[8];
    if constexpr (XSTAGE) {
#pragma unroll
      for (int j = 0; j < 8; ++j) xv[j] = st.xv[j];
    } else {
      load_x(s, xv);
    }
#pragma unroll
    for (int t = 0; t < TILES; ++t) {
      uint32_t lo[16], hi[16];
      U::decode(st.raw[t][0], uc, lo);
      U::decode(st.raw[t][1], uc, hi);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        mma_16816(acc[t][j & 1], lo[2 * j], hi[2 * j], lo[2 * j + 1], hi[2 * j + 1], xv[j].x, xv[j].y);
    }
  };
  // Two stages in flight per warp, ping-ponged without register copies: while one step
  // multiplies, the loads of the step after it are already out.
  Stage st0, st1;
  if (warp < steps) load_w(warp, st0);
  // The weights are no kernel's output, so their first loads go out before the wait: under PDL
  // they overlap the previous kernel's tail (pdl.cuh). x and y only after it.
  pdl_wait();
  pdl_trigger();
  if constexpr (XSTAGE)
    if (warp < steps) load_x(warp, st0.xv);
  for (int s = warp; s < steps; s += 2 * kWarps) {
    if (s + kWarps < steps) load(s + kWarps, st1);
    compute(s, st0);
    if (s + 2 * kWarps < steps) load(s + 2 * kWarps, st0);
    if (s + kWarps < steps) compute(s + kWarps, st1);
  }

  // Sum the warps' partial results (they covered different K steps of the same rows).
#pragma unroll
  for (int t = 0; t < TILES; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[warp][t][i][lane] = acc[t][0][i] + acc[t][1][i];
  __syncthreads();
  if constexpr (SWIGLU) {
    write_swiglu_sums<kWarps, TILES>(red, y, f0, F, n_tok);
  } else {
    for (int i = threadIdx.x; i < TILES * 4 * 32; i += blockDim.x) {
      const int t = i / 128, r = (i / 32) % 4, l = i % 32;
      float sum = 0.0f;
#pragma unroll
      for (int wv = 0; wv < kWarps; ++wv) sum += red[wv][t][r][l];
      const int64_t n = n0 + 16 * t + (l >> 2) + 8 * (r >> 1);
      const int tok = 2 * (l & 3) + (r & 1);
      if (n < N && tok < n_tok) y[static_cast<int64_t>(tok) * N + n] = __float2half_rn(sum);
    }
  }
}

// ---- Deep Q8_0R kernel: few-row matrices ----
// With 5120 rows the step kernel runs 320 blocks, one wave at 2.4 blocks per SM, and every
// block holds at most two steps per warp in flight, so how fast a block drains its 16 rows is
// set by the memory latency, not by the bandwidth (the Q4_KR analogue: docs/notes/gemv.md,
// run 12). Here a block of 4 warps owns one 16-row tile and each warp keeps DEPTH steps
// (128 values x 16 rows, 2176 bytes) loaded ahead in registers: DEPTH 4 holds what the step
// kernel's 8 warps hold per block, 6 one and a half times that.
// Work: warp w takes the BlockQ8_0R groups w, w + 4, ... (256 values of a row each), half 0
// then half 1, so item k of the warp is group w + 4 (k / 2), half k % 2 and sits at a fixed
// byte distance from item 0: with DEPTH even, buffer j always holds the same half, and every
// load address is a pointer plus an immediate. Lane (g, c) takes units 2c and 2c + 1 of a
// group (64 contiguous bytes of each of rows g, g + 8; its two scales are one 32-bit word),
// half h being unit 2c + h. Rows past N read row N - 1 and tokens past T token T - 1 (outputs
// never stored), so no load is predicated on the row or the token.
// XAHEAD: the activations of the next item load while this one multiplies (16 registers more;
// else they load when the item multiplies and their L2 latency is exposed once per item).
constexpr int kDeepWarps = 4;
constexpr int kGroupBytes = static_cast<int>(sizeof(BlockQ8_0R));  // 256 values of a row
constexpr int kGroupStride = kDeepWarps * kGroupBytes;              // a warp's group to its next

template <int DEPTH, bool XAHEAD>
__global__ void __launch_bounds__(32 * kDeepWarps, 3)
    gemv_q8r_deep_kernel(const uint8_t* __restrict__ w, size_t row_bytes, const __half* __restrict__ x,
                         __half* __restrict__ y, int n_tok, int64_t N, int n_grp, int64_t K) {
  static_assert(DEPTH % 2 == 0, "a buffer keeps one half of a group");
  using U = Unit<DType::Q8_0R>;
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int64_t n0 = int64_t(blockIdx.x) * 16;
  const uint8_t* q0 = w + static_cast<size_t>(min(n0 + g, N - 1)) * row_bytes + kGroupBytes * warp + 64 * c;
  const uint8_t* q1 = w + static_cast<size_t>(min(n0 + g + 8, N - 1)) * row_bytes + kGroupBytes * warp + 64 * c;
  const int dc = 8 * kQK + 4 * c - 64 * c;  // from the lane's qs[64c] to its scales d[2c], d[2c + 1]
  const uint8_t* d0 = q0 + dc;
  const uint8_t* d1 = q1 + dc;
  const __half* xs = x + static_cast<int64_t>(min(g, n_tok - 1)) * K + 8 * kQK * warp + 64 * c;
  const int n_mine = warp < n_grp ? 2 * ((n_grp - warp + kDeepWarps - 1) / kDeepWarps) : 0;  // items of this warp

  // Item i of the warp, with the pointers at its item i0 (i - i0 even or DEPTH-aligned): rows g
  // and g + 8 of unit 2c + i % 2, at byte distance ((i - i0) / 2) * kGroupStride + 32 (i % 2).
  auto load = [&](int i, U::Raw (&b)[2]) {
    const int off = (i >> 1) * kGroupStride + 32 * (i & 1);
    const int doff = (i >> 1) * kGroupStride + 2 * (i & 1);
    b[0].q0 = __ldcs(reinterpret_cast<const uint4*>(q0 + off));
    b[0].q1 = __ldcs(reinterpret_cast<const uint4*>(q0 + off + 16));
    b[1].q0 = __ldcs(reinterpret_cast<const uint4*>(q1 + off));
    b[1].q1 = __ldcs(reinterpret_cast<const uint4*>(q1 + off + 16));
    b[0].d = __ldcs(reinterpret_cast<const unsigned short*>(d0 + doff));
    b[1].d = __ldcs(reinterpret_cast<const unsigned short*>(d1 + doff));
  };
  // Token g's 32 activations of the item's unit: 4 values per mma, two mma per 16-byte load.
  auto load_x = [&](int i, uint4 (&xv)[4]) {
    const __half* p = xs + (i >> 1) * (kDeepWarps * 8 * kQK) + 32 * (i & 1);
#pragma unroll
    for (int k = 0; k < 4; ++k) xv[k] = __ldg(reinterpret_cast<const uint4*>(p + 8 * k));
  };
  float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  auto compute = [&](const U::Raw (&b)[2], const uint4 (&xv)[4]) {
    uint32_t lo[16], hi[16];
    U::decode(b[0], 0, lo);
    U::decode(b[1], 0, hi);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint4& v = xv[j >> 1];
      mma_16816(acc[j & 1], lo[2 * j], hi[2 * j], lo[2 * j + 1], hi[2 * j + 1], (j & 1) ? v.z : v.x,
                (j & 1) ? v.w : v.y);
    }
  };

  U::Raw buf[DEPTH][2];
  uint4 xb[XAHEAD ? 2 : 1][4];
#pragma unroll
  for (int j = 0; j < DEPTH; ++j)
    if (j < n_mine) load(j, buf[j]);
  if (XAHEAD && n_mine > 0) load_x(0, xb[0]);
  for (int i0 = 0; i0 < n_mine; i0 += DEPTH) {
#pragma unroll
    for (int j = 0; j < DEPTH; ++j) {
      if (i0 + j < n_mine) {
        if constexpr (XAHEAD) {
          if (i0 + j + 1 < n_mine) load_x(j + 1, xb[(j + 1) & 1]);
          compute(buf[j], xb[j & 1]);
        } else {
          load_x(j, xb[0]);
          compute(buf[j], xb[0]);
        }
        if (i0 + j + DEPTH < n_mine) load(j + DEPTH, buf[j]);
      }
    }
    q0 += (DEPTH / 2) * kGroupStride;
    q1 += (DEPTH / 2) * kGroupStride;
    d0 += (DEPTH / 2) * kGroupStride;
    d1 += (DEPTH / 2) * kGroupStride;
    xs += (DEPTH / 2) * kDeepWarps * 8 * kQK;
  }

  // The 4 warps covered different groups of the same rows: sum them.
  __shared__ float red[kDeepWarps][4][32];
  float sums[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) sums[i] = acc[0][i] + acc[1][i];
  store_tile_sums<kDeepWarps>(sums, red, y, n0, N, n_tok, N);
}

template <int DEPTH, bool XAHEAD>
void launch_deep(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t N = w.dim(0), K = w.dim(1);
  VI_CUDA_CHECK(pdl_launch(gemv_q8r_deep_kernel<DEPTH, XAHEAD>, static_cast<unsigned>((N + 15) / 16),
                           32 * kDeepWarps, 0, stream_of(ctx), w.ptr<uint8_t>(), w.row_bytes(), x.ptr<__half>(),
                           y.ptr<__half>(), static_cast<int>(x.rows()), N, static_cast<int>(K / (8 * kQK)), K));
}

// SWIGLU: y is h [T, N / 2] (see gemv_mma_kernel): 8 gate rows and their up rows per tile.
template <DType W, int TILES, int MINB, bool XSTAGE, bool SWIGLU = false>
void launch_k(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t N = w.dim(0), K = w.dim(1), rows_per_block = (SWIGLU ? 8 : 16) * TILES;
  const unsigned blocks = static_cast<unsigned>(((SWIGLU ? N / 2 : N) + rows_per_block - 1) / rows_per_block);
  VI_CUDA_CHECK(pdl_launch(gemv_mma_kernel<W, TILES, MINB, XSTAGE, SWIGLU>, blocks, 32 * kWarps, 0, stream_of(ctx),
                           w.ptr<uint8_t>(), w.row_bytes(), x.ptr<__half>(), y.ptr<__half>(),
                           static_cast<int>(x.rows()), N, K));
}

template <DType W>
void launch(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, GemvMmaShape shape) {
  if (shape.tiles == 0) shape = gemv_mma_default_shape(w, x.rows());
  if (shape.depth > 0) {
    // 16-byte activation loads: gemv_mma_supports asks only 8-byte alignment of x.
    if (!is_aligned(x.data(), 16)) VI_FAIL("gemv_mma: the deep kernel needs 16-byte aligned activations");
    if constexpr (W == DType::Q8_0R) {
      switch (shape.depth * 10 + (shape.stage_x ? 1 : 0)) {
        case 40: launch_deep<4, false>(ctx, x, w, y); return;
        case 41: launch_deep<4, true>(ctx, x, w, y); return;
        case 60: launch_deep<6, false>(ctx, x, w, y); return;
        case 61: launch_deep<6, true>(ctx, x, w, y); return;
        default: break;
      }
    }
    VI_FAIL("gemv_mma: no deep kernel for {} with {} steps ahead{}", dtype_name(W), shape.depth,
            shape.stage_x ? " and activations a step ahead" : "");
  }
  const int key = shape.tiles * 100 + shape.min_blocks * 10 + (shape.stage_x ? 1 : 0);
  switch (key) {
    case 221: launch_k<W, 2, 2, true>(ctx, x, w, y); break;
    case 220: launch_k<W, 2, 2, false>(ctx, x, w, y); break;
    case 211: launch_k<W, 2, 1, true>(ctx, x, w, y); break;
    case 121: launch_k<W, 1, 2, true>(ctx, x, w, y); break;
    case 130: launch_k<W, 1, 3, false>(ctx, x, w, y); break;
    default:
      VI_FAIL("gemv_mma: no kernel for {} row tiles at {} blocks per SM{}", shape.tiles, shape.min_blocks,
              shape.stage_x ? "" : " without staged activations");
  }
}

}  // namespace

bool gemv_mma_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w) {
  const DType wt = w.dtype();
  if (!sm80_code(ctx)) return false;  // volta profile, or no sm_80 code in this build
  if (x.dtype() != DType::F16 || x.rows() < 1 || x.rows() > 8) return false;
  if (wt != DType::Q4_K && wt != DType::Q5_K && wt != DType::Q8_0R && wt != DType::Q8_0T && wt != DType::F16)
    return false;
  const int64_t K = w.dim(1);
  if (wt == DType::Q8_0T && (K % 128 != 0 || w.dim(0) % 16 != 0)) return false;
  // Whole 32-value units; 16-byte aligned rows (always true for Q4_K and Q8_0R rows).
  return K % 32 == 0 && K < (int64_t(1) << 31) && w.row_bytes() % 16 == 0 && is_aligned(w.data(), 16) &&
         is_aligned(x.data(), 8);
}

GemvMmaShape gemv_mma_default_shape(const Tensor& w, int64_t n_tok) {
  // The fastest shape measured on the H200 at the 27B shapes for T = 1, 2, 4, 8 (docs/notes/
  // gemv.md, run 4; all shapes give the same bits). Two row tiles per warp halve the activation
  // reads per weight byte and give each warp two independent mma chains, but take registers:
  // without staged activations they fit 2 blocks per SM. Q4_K gains from that on deep matrices
  // at every T and on all from T = 5; Q8_0R (little unpacking, so it wants bytes in flight)
  // runs one tile at 3 blocks per SM up to T = 2 and two tiles beyond; F16 and Q5_K keep one
  // tile at 2 blocks per SM except at T > 4 on deep matrices (two tiles, 1 block per SM).
  const DType wt = w.dtype();
  const bool deep = w.dim(0) >= 8192;
  if (wt == DType::Q4_K) return deep || n_tok > 4 ? GemvMmaShape{2, 2, false} : GemvMmaShape{1, 2, true};
  if (wt == DType::Q8_0R || wt == DType::Q8_0T) return n_tok <= 2 ? GemvMmaShape{1, 3, false} : GemvMmaShape{2, 2, false};
  return n_tok > 4 && deep ? GemvMmaShape{2, 1, true} : GemvMmaShape{1, 2, true};
}

std::vector<GemvMmaShape> gemv_mma_shapes(DType wt) {
  std::vector<GemvMmaShape> v = {{1, 2, true}, {1, 3, false}, {2, 1, true}, {2, 2, true}, {2, 2, false}};
  if (wt == DType::Q8_0R)
    for (GemvMmaShape d : {GemvMmaShape{1, 3, false, 4}, GemvMmaShape{1, 3, true, 4}, GemvMmaShape{1, 3, false, 6},
                              GemvMmaShape{1, 3, true, 6}})
      v.push_back(d);
  return v;
}

bool gemv_mma_swiglu_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w) {
  return gemv_mma_supports(ctx, x, w) && (w.dtype() != DType::Q8_0T || w.dim(0) % 32 == 0);
}

void gemv_mma_swiglu(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h, GemvMmaShape shape) {
  VI_CHECK(w.dtype() != DType::Q8_0T || w.dim(0) % 32 == 0,
           "gemv_mma_swiglu: a Q8_0T gate|up weight of {} rows: its halves are not whole 16-row tiles", w.dim(0));
  VI_CHECK(w.dim(0) % 2 == 0 && h.cols() * 2 == w.dim(0) && h.rows() == x.rows(),
           "gemv_mma_swiglu: h [{}, {}] does not match x rows {} and a gate|up weight of {} rows", h.rows(),
           h.cols(), x.rows(), w.dim(0));
  // The step kernel in the shape the unfused GEMV takes for these rows and tokens.
  const GemvMmaShape s = shape.tiles == 0 ? gemv_mma_default_shape(w, x.rows()) : shape;
  VI_CHECK(s.depth == 0, "gemv_mma_swiglu: the deep kernel has no fused SwiGLU");
  auto go = [&](auto tag) {
    constexpr DType W = decltype(tag)::value;
    switch (s.tiles * 100 + s.min_blocks * 10 + (s.stage_x ? 1 : 0)) {
      case 221: launch_k<W, 2, 2, true, true>(ctx, x, w, h); break;
      case 220: launch_k<W, 2, 2, false, true>(ctx, x, w, h); break;
      case 211: launch_k<W, 2, 1, true, true>(ctx, x, w, h); break;
      case 121: launch_k<W, 1, 2, true, true>(ctx, x, w, h); break;
      case 130: launch_k<W, 1, 3, false, true>(ctx, x, w, h); break;
      default: VI_FAIL("gemv_mma_swiglu: no kernel for {} row tiles at {} blocks per SM", s.tiles, s.min_blocks);
    }
  };
  switch (w.dtype()) {
    case DType::Q4_K: go(std::integral_constant<DType, DType::Q4_K>{}); break;
    case DType::Q5_K: go(std::integral_constant<DType, DType::Q5_K>{}); break;
    case DType::Q8_0R: go(std::integral_constant<DType, DType::Q8_0R>{}); break;
    case DType::Q8_0T: go(std::integral_constant<DType, DType::Q8_0T>{}); break;
    case DType::F16: go(std::integral_constant<DType, DType::F16>{}); break;
    default: VI_FAIL("gemv_mma_swiglu: no kernel for {} weights", dtype_name(w.dtype()));
  }
}

void gemv_mma(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, GemvMmaShape shape) {
  switch (w.dtype()) {
    case DType::Q4_K: launch<DType::Q4_K>(ctx, x, w, y, shape); break;
    case DType::Q5_K: launch<DType::Q5_K>(ctx, x, w, y, shape); break;
    case DType::Q8_0R: launch<DType::Q8_0R>(ctx, x, w, y, shape); break;
    case DType::Q8_0T: launch<DType::Q8_0T>(ctx, x, w, y, shape); break;
    case DType::F16: launch<DType::F16>(ctx, x, w, y, shape); break;
    default: VI_FAIL("op 'matmul' on cuda: the tensor-core GEMV has no kernel for weight dtype {}", dtype_name(w.dtype()));
  }
}

}  // namespace vi::cuda
