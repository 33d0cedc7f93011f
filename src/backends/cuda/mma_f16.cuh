// The f16 tensor-core instruction the decode GEMVs build on (mma.sync m16n8k16, sm_80+), and
// the bit casts between uint32_t and __half2 their operand packing needs.
//
// Fragments (PTX ISA, lane = 4g + c): a0 = A[g][2c, 2c+1], a1 = A[g+8][2c, 2c+1],
// a2 = A[g][2c+8, 2c+9], a3 = A[g+8][2c+8, 2c+9]; b0 = B[2c, 2c+1][g], b1 = B[2c+8, 2c+9][g];
// d = D[g][2c, 2c+1], D[g+8][2c, 2c+1]. fp32 accumulation.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/elementwise.cuh"

namespace vi::cuda {

__device__ __forceinline__ __half2 as_h2(uint32_t v) { return *reinterpret_cast<__half2*>(&v); }
__device__ __forceinline__ uint32_t as_u32(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }

// d += a · b for one m16n8k16 tile (a: 16 x 16 f16 row-major fragment, b: 16 x 8 f16). Callers
// run only where sm80_code() holds; below sm_80 the kernel traps.
__device__ __forceinline__ void mma_16816(float d[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

// d = a · b for one m16n8k16 tile, from zero (no zeroed accumulator registers to set first).
__device__ __forceinline__ void mma_16816_z(float d[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
#else
  __trap();
#endif
}

// The end of a decode GEMV over a 16-row tile whose WARPS warps split K: their m16n8
// accumulators meet in shared memory (red: [WARPS][4][32] floats) and y[tok * ld + n0 + row] is
// written for rows < N and tokens < n_tok (ld: N for a row-major [T, N] y). acc[i]: row g + 8
// (i >> 1), token 2c + (i & 1) of lane 4g + c. Every thread of the block calls it. tok_scale
// (or null): each token's sums are multiplied by tok_scale[tok] before rounding (the deferred
// norm's s, ops/deferred_norm.h), read by the thread that writes that token: with 128 threads,
// thread k writes tokens of parity (k >> 5) & 1, so a per-warp array may hold only those.
// This warp's accumulators into red[warp], then a block barrier: the tile sums' first half.
__device__ __forceinline__ void stash_tile_sums(const float acc[4], float (*red)[4][32]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < 4; ++i) red[warp][i][lane] = acc[i];
  __syncthreads();
}

// The second half: the warps' sums in red (stashed and past a barrier) added in warp order and
// written. Threads below 128 do it, so a block may hold warps that took no part (a copying warp).
template <int WARPS>
__device__ __forceinline__ void write_tile_sums(const float (*red)[4][32], __half* y, int64_t n0, int64_t N,
                                                int n_tok, int64_t ld, const float* tok_scale = nullptr) {
  for (int k = threadIdx.x; k < 4 * 32; k += blockDim.x) {
    const int i = k / 32, l = k % 32;
    float sum = 0.0f;
#pragma unroll
    for (int wv = 0; wv < WARPS; ++wv) sum += red[wv][i][l];
    const int64_t n = n0 + (l >> 2) + 8 * (i >> 1);
    const int tok = 2 * (l & 3) + (i & 1);
    if (tok_scale != nullptr && tok < n_tok) sum *= tok_scale[tok];
    if (n < N && tok < n_tok) y[static_cast<int64_t>(tok) * ld + n] = __float2half_rn(sum);
  }
}

template <int WARPS>
__device__ __forceinline__ void store_tile_sums(const float acc[4], float (*red)[4][32], __half* y, int64_t n0,
                                                int64_t N, int n_tok, int64_t ld, const float* tok_scale = nullptr) {
  stash_tile_sums(acc, red);
  write_tile_sums<WARPS>(red, y, n0, N, n_tok, ld, tok_scale);
}

// The end of a fused gate|up GEMV + SwiGLU (ops::matmul_swiglu) over TILES tiles whose rows g
// are gate rows f0 + 8t + g and rows g + 8 the matching up rows: red ([WARPS][TILES][4][32],
// written as store_tile_sums writes it and past a barrier) holds the warps' sums; each row sum is
// rounded to f16 as the unfused matmul stores it, and h[tok, f] = silu(gate) * up is computed as
// swiglu_halves does, for f < F and tokens < n_tok. Every thread of the block calls it.
// tok_scale: as store_tile_sums' (gate and up sums scaled before their rounding).
template <int WARPS, int TILES>
__device__ __forceinline__ void write_swiglu_sums(const float (*red)[TILES][4][32], __half* h, int64_t f0, int64_t F,
                                                  int n_tok, const float* tok_scale = nullptr) {
  for (int k = threadIdx.x; k < TILES * 2 * 32; k += blockDim.x) {
    const int t = k / 64, i = (k / 32) % 2, l = k % 32;  // i: token 2c + i; gate in slot i, up in i + 2
    float gate = 0.0f, up = 0.0f;
#pragma unroll
    for (int wv = 0; wv < WARPS; ++wv) {
      gate += red[wv][t][i][l];
      up += red[wv][t][i + 2][l];
    }
    const int64_t f = f0 + 8 * t + (l >> 2);
    const int tok = 2 * (l & 3) + i;
    if (tok_scale != nullptr && tok < n_tok) {
      gate *= tok_scale[tok];
      up *= tok_scale[tok];
    }
    if (f < F && tok < n_tok) {
      const float gh = __half2float(__float2half_rn(gate)), uh = __half2float(__float2half_rn(up));
      h[static_cast<int64_t>(tok) * F + f] = __float2half_rn(silu_f(gh) * uh);
    }
  }
}

}  // namespace vi::cuda
