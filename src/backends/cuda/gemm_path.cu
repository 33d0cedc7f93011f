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

// The same for K % 8 == 0 (every quantized dtype): a thread decodes 8 values of a row with
// one block-header decode (dq8) and writes them as one 16-byte store, so the pass runs at
// memory speed instead of re-decoding a block header per value.
template <DType W>
__global__ void dequant8_f16_kernel(const uint8_t* __restrict__ w, size_t row_bytes, __half* out, int64_t rows,
                                    int64_t K) {
  const int64_t per_row = K / 8, n = rows * per_row;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, k0 = (i % per_row) * 8;
    float v[8];
    dq8<W>(w + static_cast<size_t>(r) * row_bytes, k0, v);
    __align__(16) __half2 h[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) h[e] = __floats2half2_rn(v[2 * e], v[2 * e + 1]);
    *reinterpret_cast<uint4*>(out + r * K + k0) = *reinterpret_cast<const uint4*>(h);
  }
}

// The same for the tiled layouts (rows r0 .. r0 + rows of w, r0 % 16 == 0; N: w's rows, which
// Q4_KTS needs to find a logical row).
template <DType W>
__global__ void dequant8_tiled_f16_kernel(const uint8_t* __restrict__ w, __half* out, int64_t r0, int64_t rows,
                                          int64_t K, int64_t N) {
  const int64_t per_row = K / 8, n = rows * per_row;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, k0 = (i % per_row) * 8;
    float v[8];
    if constexpr (W == DType::Q4_KT) dq8_q4kt(w, K / kQKK, r0 + r, k0, v);
    else if constexpr (W == DType::Q4_KTS) dq8_q4kts(w, K / kQKK, N / 2, r0 + r, k0, v);
    else if constexpr (W == DType::Q4_KI) dq8_q4ki(w, K / kQKK, r0 + r, k0, v);
    else dq8_q8t(w, K, r0 + r, k0, v);
    __align__(16) __half2 h[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) h[e] = __floats2half2_rn(v[2 * e], v[2 * e + 1]);
    *reinterpret_cast<uint4*>(out + r * K + k0) = *reinterpret_cast<const uint4*>(h);
  }
}

// w16[0 : nc, :] = rows of w in f16.
template <DType W>
void dequant_rows(const ops::Context& ctx, const uint8_t* w, size_t row_bytes, __half* w16, int64_t nc, int64_t K) {
  if (K % 8 == 0) {  // scratch from cudaMallocAsync is 256-byte aligned, rows are 16-byte multiples
    dequant8_f16_kernel<W><<<blocks_for(nc * K / 8, 256), 256, 0, stream_of(ctx)>>>(w, row_bytes, w16, nc, K);
  } else {
    dequant_f16_kernel<W><<<blocks_for(nc * K, 256), 256, 0, stream_of(ctx)>>>(w, row_bytes, w16, nc, K);
  }
  VI_CUDA_LAUNCH_CHECK();
}

// y[:, n0 : n0 + nc] = x · w16ᵀ with w16 = rows n0 .. n0 + nc of the weight in f16.
void gemm_f16(const ops::Context& ctx, const __half* x, const __half* w16, __half* y, int64_t n_tok, int64_t nc,
              int64_t K, int64_t ldy) {
  if (gemm_uses_cublas(ctx))
    gemm_cublas_f16(ctx, x, w16, y, n_tok, nc, K, ldy);
  else
    gemm_wmma_f16<__half>(ctx, x, w16, y, n_tok, nc, K, ldy);
}

// Rows r0 .. r0 + n of w (its logical rows: Q4_KTS finds each in its tile) times x into y (ldy
// apart), in chunks of whole 128-row multiples. Whole 128-row multiples: every tile's GEMM then
// starts at an aligned output column and has an N the GEMMs tile evenly. Odd splits (6553 rows of
// the 27B MLP) made the Q4_K GEMM 6x slower than the F16 one on the H200 (12.1 ms vs 1.9 at
// T = 8192); aligned, it is within 6% (2.0 ms).
template <DType W>
void gemm_rows(const ops::Context& ctx, const Tensor& x, const Tensor& w, int64_t r0, int64_t n, __half* y,
               int64_t ldy) {
  const int64_t n_tok = x.rows(), N = w.dim(0), K = w.dim(1);
  const __half* xp = x.ptr<__half>();
  const int64_t rows_fit = std::max<int64_t>(128, static_cast<int64_t>(kDequantTileBytes / (2 * K)) / 128 * 128);
  const int64_t chunk = std::min<int64_t>(n, rows_fit);
  Scratch tile(ctx, static_cast<size_t>(chunk * K) * sizeof(__half));
  for (int64_t n0 = 0; n0 < n; n0 += chunk) {
    const int64_t nc = std::min(chunk, n - n0);
    if constexpr (W == DType::Q4_KT || W == DType::Q4_KI || W == DType::Q8_0T || W == DType::Q4_KTS) {
      // chunks: whole tiles (Q4_KTS: logical rows, each found in its tile)
      dequant8_tiled_f16_kernel<W><<<blocks_for(nc * K / 8, 256), 256, 0, stream_of(ctx)>>>(
          w.ptr<uint8_t>(), tile.as<__half>(), r0 + n0, nc, K, N);
      VI_CUDA_LAUNCH_CHECK();
    } else {
      dequant_rows<W>(ctx, w.ptr<uint8_t>() + static_cast<size_t>(r0 + n0) * w.row_bytes(), w.row_bytes(),
                      tile.as<__half>(), nc, K);
    }
    gemm_f16(ctx, xp, tile.as<__half>(), y + n0, n_tok, nc, K, ldy);
  }
}

template <DType W>
void gemm_path_w(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t n_tok = x.rows(), N = w.dim(0), K = w.dim(1);
  if constexpr (W == DType::F16) {
    gemm_f16(ctx, x.ptr<__half>(), w.ptr<__half>(), y.ptr<__half>(), n_tok, N, K, N);
  } else if constexpr (W == DType::Q4_KTS) {
    // Each half as the matmul of a [F, K] view of it runs: into a [T, F] scratch, then into its
    // column block of y, so that every form gives the sums of the views' matmuls (the GEMM of an
    // output 2F wide may add in another order).
    const int64_t F = N / 2;
    Scratch half(ctx, static_cast<size_t>(n_tok * F) * sizeof(__half));
    for (int64_t h = 0; h < 2; ++h) {
      gemm_rows<W>(ctx, x, w, h * F, F, half.as<__half>(), F);
      VI_CUDA_CHECK(cudaMemcpy2DAsync(y.ptr<__half>() + h * F, N * sizeof(__half), half.get(), F * sizeof(__half),
                                      F * sizeof(__half), n_tok, cudaMemcpyDeviceToDevice, stream_of(ctx)));
    }
  } else {
    gemm_rows<W>(ctx, x, w, 0, N, y.ptr<__half>(), N);
  }
}

}  // namespace

void gemm_path_q4kts_halves(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& gate, Tensor& up) {
  const int64_t F = w.dim(0) / 2;
  VI_CHECK(w.dtype() == DType::Q4_KTS && x.dtype() == DType::F16 && gate.cols() == F && up.cols() == F &&
               gate.rows() == x.rows() && up.rows() == x.rows(),
           "gemm_path_q4kts_halves: a Q4_KTS stack [{}, {}] into halves [{}, {}] and [{}, {}] for {} rows", w.dim(0),
           w.dim(1), gate.rows(), gate.cols(), up.rows(), up.cols(), x.rows());
  gemm_rows<DType::Q4_KTS>(ctx, x, w, 0, F, gate.ptr<__half>(), F);
  gemm_rows<DType::Q4_KTS>(ctx, x, w, F, F, up.ptr<__half>(), F);
}

void gemm_path(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  if (w.dtype() == DType::Q4_KT) return gemm_path_w<DType::Q4_KT>(ctx, x, w, y);
  if (w.dtype() == DType::Q4_KTS) return gemm_path_w<DType::Q4_KTS>(ctx, x, w, y);
  if (w.dtype() == DType::Q4_KI) return gemm_path_w<DType::Q4_KI>(ctx, x, w, y);
  if (w.dtype() == DType::Q8_0T) return gemm_path_w<DType::Q8_0T>(ctx, x, w, y);
  dispatch_weight("matmul", w.dtype(), [&](auto wt) { gemm_path_w<decltype(wt)::value>(ctx, x, w, y); });
}

}  // namespace vi::cuda
