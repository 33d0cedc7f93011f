// The deferred norm's part in a Q4_KT decode GEMV launch (ops/deferred_norm.h), shared by the
// kernels of gemv_q4kt.cu (4-warp blocks, and the ring's 8-warp blocks): kNormConsume scales each token's sums by s[t]
// before they are rounded; kNormProduce ends the GEMV with the residual add, u and the tile's
// sums of squares (added to the token's fixed-point total by atomics) instead of writing y. What
// either needs beyond the GEMV's own operands (the totals; the residual and norm-weight rows of
// the tile) is copied into shared memory by cp.async when the block starts and read at its end
// (read from L2 after the loop it cost a round trip per block).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/cp_async.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "ops/deferred_norm.h"

namespace vi::cuda {

enum : int { kNormNone = 0, kNormConsume = 1, kNormProduce = 2 };
constexpr int kSsWords = 2 * ops::kDeferredNormSlots;  // u64 words per token
static_assert(kSsWords == 4, "a token's words are two 16-byte copies");
struct NormArgs {
  const unsigned long long* ss_in;  // consume: [T, kSsWords] the totals
  float inv_d, eps;                 // consume: 1 / d, the norm's eps
  __half* x;                        // produce: the residual [T, N], read and written
  const float* w;                   // produce: norm weight [N] f32
  float w_offset;                   // produce
  __half* u;                        // produce: [T, N]
  unsigned long long* ss;           // produce: [T, kSsWords], added to
};

// Consume. A thread's sums at the end are for tokens of its warp's parity (store_tile_sums and
// write_swiglu_sums give thread k of a 128-thread block token 2 (k & 3) + ((k >> 5) & 1)), so
// lane j < 4 of each warp stages token 2 j + parity's words and computes its s: no block
// barrier, and the copies land while the loop runs.
struct ConsumeStage {
  uint4 words[4][4][2];  // [warp][lane j][two 16-byte halves]
};
__device__ __forceinline__ void stage_totals(const NormArgs& na, int n_tok, ConsumeStage& st) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = 2 * (lane >> 1) + (warp & 1);
  if (lane < 8 && t < n_tok)  // lanes 2j, 2j + 1: the two halves of token 2 j + parity
    cp_async16(&st.words[warp][lane >> 1][lane & 1], na.ss_in + static_cast<int64_t>(t) * kSsWords + 2 * (lane & 1),
               true);
  cp_async_commit();
}

// After the loop: s[t] = unit · rsqrt(total · inv_d + eps) for this warp's tokens into s_warp[t].
__device__ __forceinline__ void warp_scales(const NormArgs& na, int n_tok, const ConsumeStage& st, float* s_warp) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = 2 * lane + (warp & 1);
  cp_async_wait<0>();
  __syncwarp();
  if (lane < 4 && t < n_tok) {
    const uint4 a = st.words[warp][lane][0], b = st.words[warp][lane][1];
    auto u64 = [](uint32_t lo, uint32_t hi) { return static_cast<unsigned long long>(hi) << 32 | lo; };
    const unsigned long long fine = u64(a.x, a.y) + u64(b.x, b.y), coarse = u64(a.z, a.w) + u64(b.z, b.w);
    const float total = __ull2float_rn(fine) * (1.0f / ops::kDeferredNormFineScale) +
                        __ull2float_rn(coarse) * (1.0f / ops::kDeferredNormCoarseScale);
    s_warp[t] = ops::kDeferredNormUnit * rsqrtf(total * na.inv_d + na.eps);
  }
  __syncwarp();
}

// Produce: the tile's rows of the norm weight (before pdl_wait: a weight) and of the residual
// (after it) into shared memory: 64 bytes, and 32 bytes a token.
struct ProduceStage {
  __half x[8][16];
  float w[16];
};
__device__ __forceinline__ void stage_norm_weight(const NormArgs& na, ProduceStage& st) {
  if (threadIdx.x < 4) cp_async16(st.w + 4 * threadIdx.x, na.w + int64_t(blockIdx.x) * 16 + 4 * threadIdx.x, true);
}
__device__ __forceinline__ void stage_residual(const NormArgs& na, int64_t N, int n_tok, ProduceStage& st) {
  const int tok = threadIdx.x >> 1, h = threadIdx.x & 1;
  if (tok < n_tok)
    cp_async16(&st.x[tok][8 * h], na.x + static_cast<int64_t>(tok) * N + int64_t(blockIdx.x) * 16 + 8 * h, true);
  cp_async_commit();
}

// Produce, after the loop: the tile's row sums o rounded to f16 as matmul stores them, then
// x[t, n] = f16(x + o) as add_rms_norm rounds it, u = f16(x · (w_offset + w) / unit), and each
// x² in fixed point (ops/deferred_norm.h) added over the 8 rows a warp holds of one token (lanes
// 4g + c, g the row: three shuffles) and to slot `half` of the token's total by one atomic per
// word. Integer sums: any order of blocks gives the same bits. Every thread of the block calls it.
// WARPS: the block's warps (4, or the ring kernel's 8: warps 4-7 only add their sums).
template <int WARPS = 4>
__device__ __forceinline__ void finish_deferred_tile(const float acc[4], const NormArgs& na, const ProduceStage& st,
                                                     int64_t N, int n_tok) {
  __shared__ float red[WARPS][4][32];
  cp_async_wait<0>();  // the staged rows: visible to every thread after stash_tile_sums' barrier
  stash_tile_sums(acc, red);
  if (threadIdx.x >= 128) return;  // whole warps: the shuffles below stay within warps 0-3
  const int i = threadIdx.x / 32, l = threadIdx.x % 32;
  float sum = 0.0f;
#pragma unroll
  for (int wv = 0; wv < WARPS; ++wv) sum += red[wv][i][l];
  const int r = (l >> 2) + 8 * (i >> 1), tok = 2 * (l & 3) + (i & 1);
  const int64_t at = static_cast<int64_t>(tok) * N + int64_t(blockIdx.x) * 16 + r;
  unsigned long long fine = 0, coarse = 0;
  if (tok < n_tok) {
    const float o = __half2float(__float2half_rn(sum));
    const __half xn = __float2half_rn(__half2float(st.x[tok][r]) + o);
    na.x[at] = xn;
    const float xf = __half2float(xn);
    na.u[at] = __float2half_rn(xf * (st.w[r] + na.w_offset) * (1.0f / ops::kDeferredNormUnit));
    const float v = fminf(xf * xf, ops::kDeferredNormClamp);  // a NaN square becomes the clamp too
    if (v < ops::kDeferredNormFineLimit)
      fine = __float2ull_rn(v * ops::kDeferredNormFineScale);
    else
      coarse = __float2ull_rn(v * ops::kDeferredNormCoarseScale);
  }
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) {
    fine += __shfl_xor_sync(0xffffffffu, fine, o);
    coarse += __shfl_xor_sync(0xffffffffu, coarse, o);
  }
  if ((l >> 2) == 0 && tok < n_tok) {
    unsigned long long* w = na.ss + static_cast<int64_t>(tok) * kSsWords + 2 * (i >> 1);
    if (fine) atomicAdd(w, fine);
    if (coarse) atomicAdd(w + 1, coarse);
  }
}

// The consumer's NormArgs for the deferred norm `in`.
inline NormArgs consume_args(const ops::DeferredNorm& in) {
  NormArgs na{};
  na.ss_in = in.ss.ptr<unsigned long long>();
  na.inv_d = 1.0f / static_cast<float>(in.u.cols());
  na.eps = in.eps;
  return na;
}

}  // namespace vi::cuda
