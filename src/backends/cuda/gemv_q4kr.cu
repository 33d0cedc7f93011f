// Tensor-core decode GEMV on Q4_KR weights: see gemv_q4kr.cuh for the plan and the numerics.
#include "backends/cuda/device.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "backends/cuda/gemv_q4kr.cuh"

namespace vi::cuda {
namespace {

// One step (128 values of a row: half h of one super-block) of lane (g, c): sub-block 4h + c
// of rows g and g + 8, and the activations of token g that meet it.
template <bool XSTAGE>
struct Stage {
  uint4 q[2];             // the sub-block's 32 values (4 words), rows g and g + 8
  uint32_t dd[2];         // (d, dmin) as f16
  uint32_t sc[2], mn[2];  // the half's 4 scales and 4 mins, a byte each (this lane's: byte c)
  uint4 x[XSTAGE ? 4 : 1];
};

template <bool XSTAGE>
__device__ __forceinline__ void load_x(const __half* xs, int c, uint4* xv) {
  // xs: token g at the step's first value, or null (a token past T: zeros).
#pragma unroll
  for (int i = 0; i < 4; ++i)
    xv[i] = xs ? __ldg(reinterpret_cast<const uint4*>(xs + 32 * c + 8 * i)) : make_uint4(0, 0, 0, 0);
}

// qs0/qs1: this lane's 16 quant bytes of rows g, g + 8; hd0/hd1: their super-block's header.
template <bool XSTAGE>
__device__ __forceinline__ void load_stage_at(const uint8_t* qs0, const uint8_t* qs1, const uint8_t* hd0,
                                              const uint8_t* hd1, int h, const __half* xs, int c, Stage<XSTAGE>& st) {
  const uint8_t* q[2] = {qs0, qs1};
  const uint8_t* hd[2] = {hd0, hd1};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    st.q[i] = __ldcs(reinterpret_cast<const uint4*>(q[i]));
    st.dd[i] = __ldg(reinterpret_cast<const uint32_t*>(hd[i]));
    st.sc[i] = __ldg(reinterpret_cast<const uint32_t*>(hd[i] + 4 + 8 * h));
    st.mn[i] = __ldg(reinterpret_cast<const uint32_t*>(hd[i] + 8 + 8 * h));
  }
  if constexpr (XSTAGE) load_x<XSTAGE>(xs, c, st.x);
}

constexpr int kQsBytes = 4 * kQKK / 2;                           // a Q4_KR block's quants, then headers
constexpr int kHdrBytes = static_cast<int>(sizeof(BlockQ4_KRHeader));
constexpr int kBlkBytes = static_cast<int>(sizeof(BlockQ4_KR));  // 8 steps of 128 values

// Step s of rows r0, r1: block s / 8, super-block (s / 2) % 4, half s % 2.
template <bool XSTAGE>
__device__ __forceinline__ void load_stage(const uint8_t* r0, const uint8_t* r1, const __half* xs, int s, int c,
                                           Stage<XSTAGE>& st) {
  const size_t blk = static_cast<size_t>(s >> 3) * kBlkBytes;
  const int sb = (s >> 1) & 3, h = s & 1;
  const int qo = 128 * sb + 64 * h + 16 * c, ho = kQsBytes + kHdrBytes * sb;
  load_stage_at(r0 + blk + qo, r1 + blk + qo, r0 + blk + ho, r1 + blk + ho, h, xs, c, st);
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// acc (rows g, g + 8 x tokens 2c, 2c + 1) += this step's products.
//   A = sc·q exactly in f16 (≤ 945) from 1024 + q (or 1024 + 16q) by one f16 FMA, so t = Σ sc·q·x
//   over the step in fp32; the mins enter through a second mma whose A is m everywhere:
//   u = Σ m·x. The super-block scales follow once per step: acc += d·t − dmin·u.
template <bool XSTAGE>
__device__ __forceinline__ void compute_stage(const Stage<XSTAGE>& st, const __half* xs, int c, float acc[4]) {
  constexpr uint32_t kLo = 0x000F000Fu, kHi = 0x00F000F0u, kMagic = 0x64006400u;  // f16 0x64XX = 1024 + XX
  uint4 xl[XSTAGE ? 1 : 4];
  if constexpr (!XSTAGE) load_x<XSTAGE>(xs, c, xl);
  const uint4* xv = XSTAGE ? st.x : xl;
  const __half2 k1024 = __float2half2_rn(1024.0f), kNeg1024 = __float2half2_rn(-1024.0f);
  const __half2 kSixteenth = __float2half2_rn(0.0625f);
  // This lane's sub-block scale and min of rows g, g + 8 as f16 pairs: byte c of each word put
  // under 0x64 is 1024 + byte; minus 1024 is the byte, exactly.
  const uint32_t sel = 0x4040u | static_cast<uint32_t>(c) | (static_cast<uint32_t>(c) << 8);
  __half2 sc[2], sc16[2], neg[2], neg16[2], mn[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    sc[r] = __hsub2(as_h2(__byte_perm(st.sc[r], 0x64u, sel)), k1024);
    mn[r] = __hsub2(as_h2(__byte_perm(st.mn[r], 0x64u, sel)), k1024);
    neg[r] = __hmul2(sc[r], kNeg1024);     // −1024·sc: exact (≤ 64512)
    sc16[r] = __hmul2(sc[r], kSixteenth);  // for the 1024 + 16q pairs: exact
    neg16[r] = __hmul2(sc16[r], kNeg1024);
  }
  uint32_t a[2][4];
  auto scaled = [&](uint32_t w, int r) {  // the word's four pairs as sc·q
    const uint32_t w8 = w >> 8;
    a[r][0] = as_u32(__hfma2(as_h2((w & kLo) | kMagic), sc[r], neg[r]));     // values 0, 1
    a[r][1] = as_u32(__hfma2(as_h2((w & kHi) | kMagic), sc16[r], neg16[r])); // values 2, 3
    a[r][2] = as_u32(__hfma2(as_h2((w8 & kLo) | kMagic), sc[r], neg[r]));    // values 4, 5
    a[r][3] = as_u32(__hfma2(as_h2((w8 & kHi) | kMagic), sc16[r], neg16[r]));// values 6, 7
  };
  const uint32_t m0 = as_u32(mn[0]), m1 = as_u32(mn[1]);
  float t[4], u[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    scaled(word(st.q[0], i), 0);
    scaled(word(st.q[1], i), 1);
    // Values 8i .. 8i+7 of the sub-block: pairs (0,1), (2,3) meet xv[i].x, .y in one mma,
    // (4,5), (6,7) meet .z, .w in the next.
    if (i == 0) {
      mma_16816_z(t, a[0][0], a[1][0], a[0][1], a[1][1], xv[i].x, xv[i].y);
      mma_16816_z(u, m0, m1, m0, m1, xv[i].x, xv[i].y);
    } else {
      mma_16816(t, a[0][0], a[1][0], a[0][1], a[1][1], xv[i].x, xv[i].y);
      mma_16816(u, m0, m1, m0, m1, xv[i].x, xv[i].y);
    }
    mma_16816(t, a[0][2], a[1][2], a[0][3], a[1][3], xv[i].z, xv[i].w);
    mma_16816(u, m0, m1, m0, m1, xv[i].z, xv[i].w);
  }
  const float2 dm0 = __half22float2(as_h2(st.dd[0])), dm1 = __half22float2(as_h2(st.dd[1]));
  acc[0] = fmaf(dm0.x, t[0], fmaf(-dm0.y, u[0], acc[0]));
  acc[1] = fmaf(dm0.x, t[1], fmaf(-dm0.y, u[1], acc[1]));
  acc[2] = fmaf(dm1.x, t[2], fmaf(-dm1.y, u[2], acc[2]));
  acc[3] = fmaf(dm1.x, t[3], fmaf(-dm1.y, u[3], acc[3]));
}

// Grid: ceil(N / 16) blocks of 32 * WARPS threads; warp w takes steps w, w + WARPS, ... of K,
// two in flight (ping-pong). Registers budgeted for 16 warps per SM (128 a thread).
// AFFINE (WARPS 4 or 8): a warp's steps sit at fixed byte distances (the pair s, s + WARPS
// kPair bytes apart, the next pair kIter further), so the loads take one row pointer each and
// immediate offsets, instead of the 64-bit address arithmetic per load that the ncu run
// counted (docs/notes/gemv.md, run 9).
template <int WARPS, bool XSTAGE, bool AFFINE>
__global__ void __launch_bounds__(32 * WARPS, 16 / WARPS)
    gemv_q4kr_kernel(const uint8_t* __restrict__ w, size_t row_bytes, const __half* __restrict__ x,
                     __half* __restrict__ y, int n_tok, int64_t N, int steps, int64_t K) {
  static_assert(!AFFINE || WARPS == 4 || WARPS == 8, "affine addressing needs 4 or 8 warps");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int64_t n0 = int64_t(blockIdx.x) * 16;
  // Rows past N read row N - 1 (their results are never stored): every load is in bounds.
  const uint8_t* r0 = w + static_cast<size_t>(min(n0 + g, N - 1)) * row_bytes;
  const uint8_t* r1 = w + static_cast<size_t>(min(n0 + g + 8, N - 1)) * row_bytes;
  const __half* xg = g < n_tok ? x + static_cast<int64_t>(g) * K : nullptr;
  auto xs = [&](int s) { return xg ? xg + static_cast<int64_t>(s) * 128 : nullptr; };

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  Stage<XSTAGE> st0, st1;
  if constexpr (AFFINE) {
    // Step warp (< 8: block 0) is super-block (warp / 2) % 4, half warp % 2. With 4 warps its
    // partner (step + 4) is 2 super-blocks on in the same block; with 8, the same place in the
    // next block.
    constexpr int kPairQ = WARPS == 4 ? 2 * 128 : kBlkBytes, kPairH = WARPS == 4 ? 2 * kHdrBytes : kBlkBytes;
    constexpr int kIter = (WARPS / 4) * kBlkBytes;
    const int h = warp & 1, sb = (warp >> 1) & 3;
    const uint8_t* q0 = r0 + 128 * sb + 64 * h + 16 * c;
    const uint8_t* q1 = r1 + 128 * sb + 64 * h + 16 * c;
    const uint8_t* h0 = r0 + kQsBytes + kHdrBytes * sb;
    const uint8_t* h1 = r1 + kQsBytes + kHdrBytes * sb;
    if (warp < steps) load_stage_at(q0, q1, h0, h1, h, xs(warp), c, st0);
    for (int s = warp; s < steps; s += 2 * WARPS) {
      if (s + WARPS < steps) load_stage_at(q0 + kPairQ, q1 + kPairQ, h0 + kPairH, h1 + kPairH, h, xs(s + WARPS), c, st1);
      compute_stage(st0, xs(s), c, acc);
      if (s + 2 * WARPS < steps) load_stage_at(q0 + kIter, q1 + kIter, h0 + kIter, h1 + kIter, h, xs(s + 2 * WARPS), c, st0);
      if (s + WARPS < steps) compute_stage(st1, xs(s + WARPS), c, acc);
      q0 += kIter;
      q1 += kIter;
      h0 += kIter;
      h1 += kIter;
    }
  } else {
    if (warp < steps) load_stage(r0, r1, xs(warp), warp, c, st0);
    for (int s = warp; s < steps; s += 2 * WARPS) {
      if (s + WARPS < steps) load_stage(r0, r1, xs(s + WARPS), s + WARPS, c, st1);
      compute_stage(st0, xs(s), c, acc);
      if (s + 2 * WARPS < steps) load_stage(r0, r1, xs(s + 2 * WARPS), s + 2 * WARPS, c, st0);
      if (s + WARPS < steps) compute_stage(st1, xs(s + WARPS), c, acc);
    }
  }

  // acc[i]: row g + 8 (i >> 1), token 2c + (i & 1). The warps' partial sums meet in shared memory.
  __shared__ float red[WARPS][4][32];
#pragma unroll
  for (int i = 0; i < 4; ++i) red[warp][i][lane] = acc[i];
  __syncthreads();
  for (int k = threadIdx.x; k < 4 * 32; k += blockDim.x) {
    const int i = k / 32, l = k % 32;
    float sum = 0.0f;
#pragma unroll
    for (int wv = 0; wv < WARPS; ++wv) sum += red[wv][i][l];
    const int64_t n = n0 + (l >> 2) + 8 * (i >> 1);
    const int tok = 2 * (l & 3) + (i & 1);
    if (n < N && tok < n_tok) y[static_cast<int64_t>(tok) * N + n] = __float2half_rn(sum);
  }
}

template <int WARPS, bool XSTAGE, bool AFFINE = false>
void launch_k(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t N = w.dim(0), K = w.dim(1);
  gemv_q4kr_kernel<WARPS, XSTAGE, AFFINE><<<static_cast<unsigned>((N + 15) / 16), 32 * WARPS, 0, stream_of(ctx)>>>(
      w.ptr<uint8_t>(), w.row_bytes(), x.ptr<__half>(), y.ptr<__half>(), static_cast<int>(x.rows()), N,
      static_cast<int>(K / 128), K);
  VI_CUDA_LAUNCH_CHECK();
}

constexpr int kWarpChoices[] = {2, 4, 8};

}  // namespace

GemvQ4krShape gemv_q4kr_default_shape(int64_t N, int64_t K) {
  // The fastest shape measured on the H200 at the 27B shapes (docs/notes/gemv.md, run 9):
  // 4 warps per block everywhere; activations loaded when a step multiplies on deep matrices
  // (FFN up/gate, head: 23.7 vs 27.7 us staged, T = 1) and a step ahead on 5120-row ones.
  return {K / 128 >= 8 ? 4 : 2, N < 8192};
}

std::vector<GemvQ4krShape> gemv_q4kr_shapes() {
  std::vector<GemvQ4krShape> v;
  for (int wv : kWarpChoices)
    for (bool xs : {false, true}) v.push_back({wv, xs});
  for (int wv : {4, 8})
    for (bool xs : {false, true}) v.push_back({wv, xs, true});
  return v;
}

bool gemv_q4kr_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w) {
  if (!sm80_code(ctx) || w.dtype() != DType::Q4_KR) return false;
  if (x.dtype() != DType::F16 || x.rows() < 1 || x.rows() > 8) return false;
  // 16-byte weight and activation loads; K / 128 steps fit an int.
  return w.dim(1) < (int64_t(1) << 31) && w.row_bytes() % 16 == 0 && is_aligned(w.data(), 16) &&
         is_aligned(x.data(), 16);
}

void gemv_q4kr(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, GemvQ4krShape shape) {
  if (shape.warps == 0) shape = gemv_q4kr_default_shape(w.dim(0), w.dim(1));
  switch (shape.warps * 100 + (shape.stage_x ? 10 : 0) + (shape.affine ? 1 : 0)) {
    case 200: launch_k<2, false>(ctx, x, w, y); break;
    case 210: launch_k<2, true>(ctx, x, w, y); break;
    case 400: launch_k<4, false>(ctx, x, w, y); break;
    case 410: launch_k<4, true>(ctx, x, w, y); break;
    case 401: launch_k<4, false, true>(ctx, x, w, y); break;
    case 411: launch_k<4, true, true>(ctx, x, w, y); break;
    case 800: launch_k<8, false>(ctx, x, w, y); break;
    case 810: launch_k<8, true>(ctx, x, w, y); break;
    case 801: launch_k<8, false, true>(ctx, x, w, y); break;
    case 811: launch_k<8, true, true>(ctx, x, w, y); break;
    default:
      VI_FAIL("gemv_q4kr: no kernel for {} warps{}{}", shape.warps, shape.stage_x ? "" : " without staged activations",
              shape.affine ? " with affine addressing" : "");
  }
}

}  // namespace vi::cuda
