// Prefill GEMM path of matmul: weight-tile dequantizer and the GEMM dispatch (cuBLAS or
// gemm_wmma.cu, as gemm_cublas.cuh decides). See gemm_path.cuh.
#include "backends/cuda/device.cuh"
#include "backends/cuda/gemm_cublas.cuh"
#include "backends/cuda/gemm_path.cuh"
#include "backends/cuda/gemm_wmma.cuh"
#include "backends/cuda/quant.cuh"

namespace vi::cuda {
namespace {

template <DType W>
__global__ void dequant_f16_kernel(const uint8_t* __restrict__ w, size_t row_bytes, __half* out, int64_t rows,
                                   int64_t K) {
  const int64_t n = rows * K;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2half_rn(dq<W>(w + static_cast<size_t>(i / K) * row_bytes, i % K));
}

// y[:, n0 : n0 + nc] = x · w16ᵀ with w16 = rows n0 .. n0 + nc of the weight in f16.
void gemm_f16(const ops::Context& ctx, const __half* x, const __half* w16, __half* y, int64_t n_tok, int64_t nc,
              int64_t K, int64_t ldy) {
  if (gemm_uses_cublas(ctx))
    gemm_cublas_f16(ctx, x, w16, y, n_tok, nc, K, ldy);
  else
    gemm_wmma_f16<__half>(ctx, x, w16, y, n_tok, nc, K, ldy);
}

template <DType W>
void gemm_path_w(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t n_tok = x.rows(), N = w.dim(0), K = w.dim(1);
  const __half* xp = x.ptr<__half>();
  __half* yp = y.ptr<__half>();
  if constexpr (W == DType::F16) {
    gemm_f16(ctx, xp, w.ptr<__half>(), yp, n_tok, N, K, N);
  } else {
    const int64_t chunk = std::min<int64_t>(N, std::max<int64_t>(64, kDequantTileBytes / (2 * K)));
    Scratch tile(ctx, static_cast<size_t>(chunk * K) * sizeof(__half));
    for (int64_t n0 = 0; n0 < N; n0 += chunk) {
      const int64_t nc = std::min(chunk, N - n0);
      dequant_f16_kernel<W><<<blocks_for(nc * K, 256), 256, 0, stream_of(ctx)>>>(
          w.ptr<uint8_t>() + static_cast<size_t>(n0) * w.row_bytes(), w.row_bytes(), tile.as<__half>(), nc, K);
      VI_CUDA_LAUNCH_CHECK();
      gemm_f16(ctx, xp, tile.as<__half>(), yp + n0, n_tok, nc, K, N);
    }
  }
}

}  // namespace

void gemm_path(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  dispatch_weight("matmul", w.dtype(), [&](auto wt) { gemm_path_w<decltype(wt)::value>(ctx, x, w, y); });
}

}  // namespace vi::cuda
