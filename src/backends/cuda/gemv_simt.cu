// CUDA-core GEMV kernels: see gemv_simt.cuh.
#include <type_traits>

#include "backends/cuda/gemv_simt.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/quant.cuh"

namespace vi::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block
constexpr int kRows = 2;   // weight rows per warp: each activation load serves both

// Eight activations at p as fp32; VEC: p is 16-byte aligned (one or two vector loads).
template <class T, bool VEC>
__device__ __forceinline__ void load_x8(const T* p, float out[8]) {
  if constexpr (VEC && std::is_same_v<T, __half>) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __half22float2(h[k]);
      out[2 * k] = f.x;
      out[2 * k + 1] = f.y;
    }
  } else if constexpr (VEC) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = to_f32(p[k]);
  }
}

// Grid: (ceil(N / (kWarps * kRows)), ceil(T / TT)). Tokens t0 .. t0 + tt of this block.
template <DType W, class T, int TT, bool VEC>
__global__ void __launch_bounds__(32 * kWarps)
    gemv_simt_kernel(const uint8_t* __restrict__ w, size_t row_bytes, const T* __restrict__ x, T* __restrict__ y,
                     int64_t n_tok, int64_t N, int64_t K) {
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t n0 = (int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kRows;
  if (n0 >= N) return;
  const int64_t t0 = int64_t(blockIdx.y) * TT;
  const int tt = static_cast<int>(min(int64_t(TT), n_tok - t0));
  const uint8_t* wr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) wr[r] = w + static_cast<size_t>(min(n0 + r, N - 1)) * row_bytes;  // past N: never stored
  const T* xt = x + t0 * K;
  float acc[kRows][TT];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < TT; ++t) acc[r][t] = 0.0f;
  const int64_t K8 = K / 8 * 8;
  for (int64_t i0 = int64_t(lane) * 8; i0 < K8; i0 += 256) {
    float wv[kRows][8];
#pragma unroll
    for (int r = 0; r < kRows; ++r) dq8<W>(wr[r], i0, wv[r]);
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      if (t < tt) {
        float xv[8];
        load_x8<T, VEC>(xt + t * K + i0, xv);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int k = 0; k < 8; ++k) acc[r][t] += wv[r][k] * xv[k];
      }
    }
  }
  for (int64_t i = K8 + lane; i < K; i += 32) {  // plain dtypes only: K % 8 tail
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float wv = dq<W>(wr[r], i);
#pragma unroll
      for (int t = 0; t < TT; ++t)
        if (t < tt) acc[r][t] += wv * to_f32(xt[t * K + i]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      const float s = warp_sum(acc[r][t]);
      if (lane == 0 && t < tt && n0 + r < N) y[(t0 + t) * N + n0 + r] = from_f32<T>(s);
    }
}

template <DType W, class T, int TT>
void launch(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t n_tok = x.rows(), N = w.dim(0), K = w.dim(1);
  VI_CHECK((n_tok + TT - 1) / TT <= 65535, "op 'matmul' on cuda: {} tokens is too many for one GEMV launch", n_tok);
  const dim3 grid(static_cast<unsigned>((N + kWarps * kRows - 1) / (kWarps * kRows)),
                  static_cast<unsigned>((n_tok + TT - 1) / TT));
  const bool vec = K % 8 == 0 && reinterpret_cast<uintptr_t>(x.data()) % 16 == 0;
  auto* kernel = vec ? gemv_simt_kernel<W, T, TT, true> : gemv_simt_kernel<W, T, TT, false>;
  VI_CUDA_CHECK(pdl_launch(kernel, grid, 32 * kWarps, 0, stream_of(ctx), w.ptr<uint8_t>(), w.row_bytes(), x.ptr<T>(),
                           y.ptr<T>(), n_tok, N, K));
}

}  // namespace

void gemv_simt(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t n_tok = x.rows();
  dispatch_act("matmul", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_weight("matmul", w.dtype(), [&](auto wt) {
      constexpr DType W = decltype(wt)::value;
      if (n_tok == 1) launch<W, T, 1>(ctx, x, w, y);
      else if (n_tok == 2) launch<W, T, 2>(ctx, x, w, y);
      else if (n_tok <= 4) launch<W, T, 4>(ctx, x, w, y);
      else launch<W, T, 8>(ctx, x, w, y);
    });
  });
}

}  // namespace vi::cuda
