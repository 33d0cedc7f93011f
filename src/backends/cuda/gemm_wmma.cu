// WMMA GEMM kernel of the Volta profile. Block tile 64 (tokens) x 64 (weight rows), four
// warps of 32 x 32 (2 x 2 fragments of 16 x 16 x 16); K in steps of 32 staged through
// shared memory with zero fill at the edges, so any T, N, K works.
#include <mma.h>

#include "backends/cuda/gemm_wmma.cuh"

namespace vi::cuda {
namespace {

constexpr int kBM = 64, kBN = 64, kBK = 32;
constexpr int kLdAB = kBK + 8;  // halves; +8 staggers banks and keeps 16-byte rows
constexpr int kLdC = kBN + 4;   // floats

template <class TOut>
__global__ void __launch_bounds__(128) gemm_wmma_kernel(const __half* __restrict__ x, const __half* __restrict__ w,
                                                        TOut* y, int64_t T, int64_t N, int64_t K, int64_t ldy) {
  using namespace nvcuda;
  __shared__ __align__(32) __half As[kBM * kLdAB];  // [m][k]
  __shared__ __align__(32) __half Bs[kBN * kLdAB];  // [n][k] = B(k, n) column-major
  __shared__ __align__(32) float Cs[kBM * kLdC];
  const int warp = threadIdx.x >> 5, wm = warp >> 1, wn = warp & 1;
  const int64_t m0 = int64_t(blockIdx.y) * kBM, n0 = int64_t(blockIdx.x) * kBN;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    for (int e = threadIdx.x; e < kBM * kBK; e += blockDim.x) {
      const int r = e / kBK, c = e % kBK;
      const int64_t gm = m0 + r, gn = n0 + r, gk = k0 + c;
      As[r * kLdAB + c] = (gm < T && gk < K) ? x[gm * K + gk] : __float2half(0.0f);
      Bs[r * kLdAB + c] = (gn < N && gk < K) ? w[gn * K + gk] : __float2half(0.0f);
    }
    __syncthreads();
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], As + (wm * 32 + i * 16) * kLdAB + kk, kLdAB);
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], Bs + (wn * 32 + j * 16) * kLdAB + kk, kLdAB);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * kLdC + wn * 32 + j * 16, acc[i][j], kLdC, wmma::mem_row_major);
  __syncthreads();
  for (int e = threadIdx.x; e < kBM * kBN; e += blockDim.x) {
    const int r = e / kBN, c = e % kBN;
    const int64_t gm = m0 + r, gn = n0 + c;
    if (gm < T && gn < N) y[gm * ldy + gn] = from_f32<TOut>(Cs[r * kLdC + c]);
  }
}

}  // namespace

template <class TOut>
void gemm_wmma_f16(const ops::Context& ctx, const __half* x, const __half* w, TOut* y, int64_t T, int64_t N, int64_t K,
                   int64_t ldy) {
  VI_CHECK((T + kBM - 1) / kBM <= 65535, "gemm_wmma: {} tokens is too many for one launch", T);
  dim3 grid(static_cast<unsigned>((N + kBN - 1) / kBN), static_cast<unsigned>((T + kBM - 1) / kBM));
  gemm_wmma_kernel<TOut><<<grid, 128, 0, stream_of(ctx)>>>(x, w, y, T, N, K, ldy);
  VI_CUDA_LAUNCH_CHECK();
}

template void gemm_wmma_f16<__half>(const ops::Context&, const __half*, const __half*, __half*, int64_t, int64_t,
                                    int64_t, int64_t);
template void gemm_wmma_f16<float>(const ops::Context&, const __half*, const __half*, float*, int64_t, int64_t,
                                   int64_t, int64_t);

}  // namespace vi::cuda
