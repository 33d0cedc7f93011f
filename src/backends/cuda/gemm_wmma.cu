// WMMA GEMM of the Volta profile: y[T, N] = x[T, K] · w[N, K]ᵀ, f16 operands, fp32
// accumulation, sm_70 features only (WMMA 16x16x16, no cp.async, no ldmatrix).
//
// Block tile 128 (tokens) x 128 (weight rows) x 32 (K); 8 warps as 2 x 4, each 64 x 32
// (4 x 2 accumulator fragments). K tiles are double-buffered in shared memory with register
// staging: the next tile's global loads (16 bytes per thread and operand, twice) are issued
// before the current tile's MMAs and stored to the other buffer after them, so one barrier
// per K step suffices and the loads' latency hides behind the math (Volta has no cp.async).
// Blocks are ordered in groups of 8 token tiles that sweep all weight tiles, so a wave of
// blocks shares a few x tiles and weight tiles in L2 instead of streaming the whole weight
// once per token tile. Edges (any T, N, K) are zero-filled at the loads and bounded at the
// stores; misaligned pointers or K % 8 != 0 take an element-wise load path.
#include <mma.h>

#include <cstdint>

#include "backends/cuda/gemm_wmma.cuh"

namespace vi::cuda {
namespace {

using namespace nvcuda;

constexpr int kBM = 128, kBN = 128, kBK = 32;
constexpr int kWarpsM = 2, kWarpsN = 4;           // warp grid; warp tile 64 x 32
constexpr int kFragM = kBM / kWarpsM / 16;        // 4
constexpr int kFragN = kBN / kWarpsN / 16;        // 2
constexpr int kThreads = 32 * kWarpsM * kWarpsN;  // 256
constexpr int kLd = kBK + 8;                      // halves per tile row: +8 staggers banks, keeps 32-byte tiles
constexpr int kTileHalves = kBM * kLd;            // one operand tile
constexpr int kChunksPerThread = kBM * kBK / 8 / kThreads;  // 16-byte chunks per operand: 2
constexpr int kGroupM = 8;                        // token tiles per block group (L2 reuse)
constexpr int kLdStage = 16 + 4;                  // floats: epilogue staging of one fragment
static_assert(kChunksPerThread * kThreads * 8 == kBM * kBK && kBM == kBN, "tile/thread mismatch");
static_assert(kThreads / 32 * 16 * kLdStage * 4 <= 2 * kTileHalves * 2, "epilogue staging must fit in As");

// Rows [r0, r0 + 128) x columns [k0, k0 + 32) of a row-major [rows, K] f16 matrix, as
// kChunksPerThread 16-byte chunks per thread (zeros outside the matrix).
__device__ __forceinline__ void load_tile(const __half* __restrict__ src, int64_t rows, int64_t K, int64_t r0,
                                          int64_t k0, bool vec, uint4 (&reg)[kChunksPerThread]) {
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    const int chunk = threadIdx.x + i * kThreads;
    const int64_t r = r0 + chunk / (kBK / 8), k = k0 + (chunk % (kBK / 8)) * 8;
    if (vec && r < rows && k + 8 <= K) {
      reg[i] = __ldg(reinterpret_cast<const uint4*>(src + r * K + k));
    } else {
      __align__(16) __half h[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) h[e] = (r < rows && k + e < K) ? src[r * K + k + e] : __float2half(0.0f);
      reg[i] = *reinterpret_cast<const uint4*>(h);
    }
  }
}

__device__ __forceinline__ void store_tile(__half* dst, const uint4 (&reg)[kChunksPerThread]) {
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    const int chunk = threadIdx.x + i * kThreads;
    *reinterpret_cast<uint4*>(dst + (chunk / (kBK / 8)) * kLd + (chunk % (kBK / 8)) * 8) = reg[i];
  }
}

template <class TOut>
__global__ void __launch_bounds__(kThreads, 2) gemm_wmma_kernel(const __half* __restrict__ x, const __half* __restrict__ w,
                                                             TOut* __restrict__ y, int64_t T, int64_t N, int64_t K,
                                                             int64_t ldy, bool vec) {
  __shared__ __align__(128) __half As[2][kTileHalves];  // [m][k]
  __shared__ __align__(128) __half Bs[2][kTileHalves];  // [n][k] = B(k, n) column-major

  // Grouped block order: groups of kGroupM token tiles; within a group, token tile fastest.
  const int64_t tiles_m = (T + kBM - 1) / kBM, tiles_n = (N + kBN - 1) / kBN;
  const int64_t bid = blockIdx.x, per_group = int64_t(kGroupM) * tiles_n;
  const int64_t first_m = bid / per_group * kGroupM;
  const int64_t group_m = min(int64_t(kGroupM), tiles_m - first_m);
  const int64_t m0 = (first_m + (bid % per_group) % group_m) * kBM;
  const int64_t n0 = ((bid % per_group) / group_m) * kBN;

  const int warp = threadIdx.x >> 5, wm = warp / kWarpsN, wn = warp % kWarpsN;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFragM][kFragN];
#pragma unroll
  for (int i = 0; i < kFragM; ++i)
#pragma unroll
    for (int j = 0; j < kFragN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  uint4 ra[kChunksPerThread], rb[kChunksPerThread];
  load_tile(x, T, K, m0, 0, vec, ra);
  load_tile(w, N, K, n0, 0, vec, rb);
  store_tile(As[0], ra);
  store_tile(Bs[0], rb);
  __syncthreads();

  const int64_t k_tiles = (K + kBK - 1) / kBK;
  int cur = 0;
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    const bool more = kt + 1 < k_tiles;
    if (more) {  // issue the next tile's loads before this tile's math
      load_tile(x, T, K, m0, (kt + 1) * kBK, vec, ra);
      load_tile(w, N, K, n0, (kt + 1) * kBK, vec, rb);
    }
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[kFragM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[kFragN];
#pragma unroll
      for (int i = 0; i < kFragM; ++i)
        wmma::load_matrix_sync(a[i], As[cur] + (wm * kFragM * 16 + i * 16) * kLd + kk, kLd);
#pragma unroll
      for (int j = 0; j < kFragN; ++j)
        wmma::load_matrix_sync(b[j], Bs[cur] + (wn * kFragN * 16 + j * 16) * kLd + kk, kLd);
#pragma unroll
      for (int i = 0; i < kFragM; ++i)
#pragma unroll
        for (int j = 0; j < kFragN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    if (more) {  // the other buffer was last read before the previous barrier
      store_tile(As[cur ^ 1], ra);
      store_tile(Bs[cur ^ 1], rb);
    }
    __syncthreads();
    cur ^= 1;
  }

  // Epilogue: each warp stages one 16 x 16 fragment at a time in its slice of As (free now),
  // then lane l writes 8 values of row l / 2.
  float* stage = reinterpret_cast<float*>(&As[0][0]) + warp * 16 * kLdStage;
  const int lane = threadIdx.x & 31, sr = lane >> 1, sc = (lane & 1) * 8;
#pragma unroll
  for (int i = 0; i < kFragM; ++i) {
#pragma unroll
    for (int j = 0; j < kFragN; ++j) {
      wmma::store_matrix_sync(stage, acc[i][j], kLdStage, wmma::mem_row_major);
      __syncwarp();
      const int64_t gm = m0 + wm * kFragM * 16 + i * 16 + sr;
      const int64_t gn = n0 + wn * kFragN * 16 + j * 16 + sc;
      if (gm < T) {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (gn + e < N) y[gm * ldy + gn + e] = from_f32<TOut>(stage[sr * kLdStage + sc + e]);
      }
      __syncwarp();
    }
  }
}

}  // namespace

template <class TOut>
void gemm_wmma_f16(const ops::Context& ctx, const __half* x, const __half* w, TOut* y, int64_t T, int64_t N, int64_t K,
                   int64_t ldy) {
  if (T == 0 || N == 0) return;
  const int64_t blocks = ((T + kBM - 1) / kBM) * ((N + kBN - 1) / kBN);
  VI_CHECK(blocks < (int64_t(1) << 31), "gemm_wmma: a {} x {} output is too large for one launch", T, N);
  // 16-byte loads need 16-byte aligned rows: K % 8 == 0 and aligned bases.
  const bool vec = K % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  gemm_wmma_kernel<TOut><<<static_cast<unsigned>(blocks), kThreads, 0, stream_of(ctx)>>>(x, w, y, T, N, K, ldy, vec);
  VI_CUDA_LAUNCH_CHECK();
}

template void gemm_wmma_f16<__half>(const ops::Context&, const __half*, const __half*, __half*, int64_t, int64_t,
                                    int64_t, int64_t);
template void gemm_wmma_f16<float>(const ops::Context&, const __half*, const __half*, float*, int64_t, int64_t,
                                   int64_t, int64_t);

}  // namespace vi::cuda
