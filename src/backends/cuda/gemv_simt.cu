// CUDA-core GEMV kernels: see gemv_simt.cuh.
#include <type_traits>

#include "backends/cuda/env_switch.h"
#include "backends/cuda/gemv_simt.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/quant.cuh"

namespace vi::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block
constexpr int kRows = 2;   // weight rows per warp: each activation load serves both

// Eight activations at p as loaded (load), as fp32 when used (get); VEC: p is 16-byte aligned
// (one or two vector loads). Split so that a step loads every token's activations before it
// uses any: each load then waits once for all, not each for the multiplies of the token before.
template <class T, bool VEC>
struct X8 {
  T v[8];
  __device__ __forceinline__ void load(const T* p) {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = p[k];
  }
  __device__ __forceinline__ void get(float out[8]) const {
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = to_f32(v[k]);
  }
};
template <>
struct X8<__half, true> {
  uint4 v;
  __device__ __forceinline__ void load(const __half* p) { v = *reinterpret_cast<const uint4*>(p); }
  __device__ __forceinline__ void get(float out[8]) const {
    const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __half22float2(h[k]);
      out[2 * k] = f.x;
      out[2 * k + 1] = f.y;
    }
  }
};
template <>
struct X8<float, true> {
  float4 a, b;
  __device__ __forceinline__ void load(const float* p) {
    a = reinterpret_cast<const float4*>(p)[0];
    b = reinterpret_cast<const float4*>(p)[1];
  }
  __device__ __forceinline__ void get(float out[8]) const {
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  }
};

// Grid: (ceil(N / (kWarps * kRows)), ceil(T / TT)). Tokens t0 .. t0 + tt of this block.
// STREAM: dq8's evict-first weight loads (simt_stream says where).
template <DType W, class T, int TT, bool VEC, bool STREAM>
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
    // Tokens past tt read token tt - 1 and add into sums that are never stored: no branch keeps
    // a load behind the multiplies of the token before (with 4 tokens that cost the Q8_0R GEMVs
    // 2.6x their one-token time on the H200).
    X8<T, VEC> xr[TT];
    float wv[kRows][8];
    if constexpr (TT == 1 && !STREAM) {  // the weights first, as this kernel had them before the hoist
#pragma unroll
      for (int r = 0; r < kRows; ++r) dq8<W, false>(wr[r], i0, wv[r]);
      xr[0].load(xt + i0);
    } else {
#pragma unroll
      for (int t = 0; t < TT; ++t) xr[t].load(xt + min(t, tt - 1) * K + i0);
#pragma unroll
      for (int r = 0; r < kRows; ++r) dq8<W, STREAM>(wr[r], i0, wv[r]);
    }
#pragma unroll
    for (int t = 0; t < TT; ++t) {
      float xv[8];
      xr[t].get(xv);
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[r][t] += wv[r][k] * xv[k];
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

// Evict-first weight loads for the GEMV layouts (the other dtypes' dq8 ignores it), where they
// were measured faster on the H200 (volta profile, 2026-12-04 21:39 job, µs a call against the
// L1-cached loads without the hoist): Q4_KR at every token count (gate|up 74.4 against 81.9 at
// T = 1, FFN down 48.4 against 66.3), Q8_0R from 2 tokens (gate|up 88.3 against 157.4 at T = 4).
// Q8_0R at one token keeps its L1-cached loads: evict-first cost it 11-49% there (FFN down 63.3
// against 42.4). The 8-token Q4_KR kernel (5 to 8 tokens) keeps them too: the 2026-12-05 02:09
// job measured its L1-cached loads faster on the wide matrices (gate|up 157.9 against 173.4,
// GDN inputs 79.8 against 92.2, the head 1084 against 1160) and ~5% faster over a round's GEMVs,
// while every other token count confirmed the rule above. tt: the kernel's token count (TT).
// VI_SIMT_STREAM=0 / =1 forces them off / on.
template <DType W>
bool simt_stream(int tt) {
  static const int forced = env_switch_forced("VI_SIMT_STREAM");
  if (W != DType::Q8_0R && W != DType::Q4_KR) return false;
  if (forced >= 0) return forced == 1;
  return W == DType::Q4_KR ? tt < 8 : tt >= 2;
}

template <DType W, class T, int TT>
void launch(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t n_tok = x.rows(), N = w.dim(0), K = w.dim(1);
  VI_CHECK((n_tok + TT - 1) / TT <= 65535, "op 'matmul' on cuda: {} tokens is too many for one GEMV launch", n_tok);
  const dim3 grid(static_cast<unsigned>((N + kWarps * kRows - 1) / (kWarps * kRows)),
                  static_cast<unsigned>((n_tok + TT - 1) / TT));
  const bool vec = K % 8 == 0 && reinterpret_cast<uintptr_t>(x.data()) % 16 == 0;
  constexpr bool kLayout = W == DType::Q8_0R || W == DType::Q4_KR;
  auto* kernel = vec ? gemv_simt_kernel<W, T, TT, true, false> : gemv_simt_kernel<W, T, TT, false, false>;
  if (kLayout && simt_stream<W>(TT))
    kernel = vec ? gemv_simt_kernel<W, T, TT, true, kLayout> : gemv_simt_kernel<W, T, TT, false, kLayout>;
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
