// CUDA kernels of matmul: the decode GEMV, and the dispatch between it and the prefill
// GEMM path (gemm_path.cu). See matmul.cuh for the plan.
#include "backends/cuda/device.cuh"
#include "backends/cuda/gemm_path.cuh"
#include "backends/cuda/matmul.cuh"
#include "ops/matmul.h"

namespace vi::cuda {
namespace {

constexpr int kGemvWarps = 4;  // weight rows per block

// Grid: (ceil(N / 4), ceil(T / TT)). Lane l handles values 8l + 256s of the row.
template <DType W, class T, int TT>
__global__ void __launch_bounds__(32 * kGemvWarps)
    gemv_kernel(const uint8_t* __restrict__ w, size_t row_bytes, const T* __restrict__ x, T* __restrict__ y,
                int64_t n_tok, int64_t N, int64_t K) {
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  const int64_t t0 = int64_t(blockIdx.y) * TT;
  if (n >= N) return;
  const int tt = static_cast<int>(min(int64_t(TT), n_tok - t0));
  const uint8_t* wr = w + static_cast<size_t>(n) * row_bytes;
  const T* xt = x + t0 * K;
  float acc[TT];
#pragma unroll
  for (int t = 0; t < TT; ++t) acc[t] = 0.0f;
  const int64_t K8 = K / 8 * 8;
  for (int64_t i0 = int64_t(lane) * 8; i0 < K8; i0 += 256) {
    float wv[8];
    dq8<W>(wr, i0, wv);
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      if (t < tt) {
        const T* xr = xt + t * K + i0;
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[t] += wv[k] * to_f32(xr[k]);
      }
    }
  }
  for (int64_t i = K8 + lane; i < K; i += 32) {  // plain dtypes only: K % 8 tail
    const float wv = dq<W>(wr, i);
#pragma unroll
    for (int t = 0; t < TT; ++t)
      if (t < tt) acc[t] += wv * to_f32(xt[t * K + i]);
  }
#pragma unroll
  for (int t = 0; t < TT; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0 && t < tt) y[(t0 + t) * N + n] = from_f32<T>(s);
  }
}

template <DType W, class T, int TT>
void launch_gemv(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t n_tok = x.rows(), N = w.dim(0), K = w.dim(1);
  VI_CHECK((n_tok + TT - 1) / TT <= 65535, "op 'matmul' on cuda: {} f32 tokens is too many for one launch", n_tok);
  dim3 grid(static_cast<unsigned>((N + kGemvWarps - 1) / kGemvWarps), static_cast<unsigned>((n_tok + TT - 1) / TT));
  gemv_kernel<W, T, TT><<<grid, 32 * kGemvWarps, 0, stream_of(ctx)>>>(w.ptr<uint8_t>(), w.row_bytes(), x.ptr<T>(),
                                                                     y.ptr<T>(), n_tok, N, K);
  VI_CUDA_LAUNCH_CHECK();
}

template <DType W>
void matmul_cuda(ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t n_tok = x.rows();
  if (n_tok == 0 || w.dim(0) == 0) return;
  dispatch_act("matmul", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (std::is_same_v<T, __half> && n_tok > kGemvMaxTokens) {
      gemm_path(ctx, x, w, y);
    } else if (n_tok == 1) {
      launch_gemv<W, T, 1>(ctx, x, w, y);
    } else if (n_tok == 2) {
      launch_gemv<W, T, 2>(ctx, x, w, y);
    } else if (n_tok <= 4) {
      launch_gemv<W, T, 4>(ctx, x, w, y);
    } else {
      launch_gemv<W, T, 8>(ctx, x, w, y);
    }
  });
}

template <DType W>
void add_matmul() {
  ops::matmul_table().add(Device::CUDA, W, matmul_cuda<W>);
}

const bool registered = [] {
  add_matmul<DType::F32>();
  add_matmul<DType::F16>();
  add_matmul<DType::BF16>();
  add_matmul<DType::Q8_0>();
  add_matmul<DType::Q4_0>();
  add_matmul<DType::Q4_1>();
  add_matmul<DType::Q4_K>();
  add_matmul<DType::Q5_K>();
  add_matmul<DType::Q6_K>();
  return true;
}();

}  // namespace
}  // namespace vi::cuda
