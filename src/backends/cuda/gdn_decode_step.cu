// CUDA gdn_decode_step: one block per (value head, sequence). The output norm needs the
// whole head's output, so a block covers all dv value columns (the separate recurrent kernel
// splits a head into blocks of 32 columns): cols = dv rounded up to a warp, at most 128,
// times kDeltaRowGroups row groups; a head wider than 128 columns takes several passes.
// Per pass, as delta_rule_kernel does for one token: each thread holds rows rg, rg+4, ... of
// its column of the fp32 state in registers, decays them, Sᵀk and Sᵀq are reduced over the
// row groups through shared memory, and the state goes back. The decay and beta come from
// a and b through gates_kernel's formula; the head's output is rounded to T (what
// gated_delta_rule would have stored) into shared memory, then normalised, weighted and
// gated as gated_rms_norm_kernel does, by the thread that reads z[e] (so y may alias z).
#include <algorithm>

#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/gdn_decode_step.cuh"
#include "backends/cuda/pdl.cuh"
#include "ops/gdn_decode_step.h"

namespace vi::cuda {
namespace {

struct StatePtrs {
  float* p[kDecodeMaxSeqs];  // [Hv, dk, dv] f32 of each sequence of the launch
};

// R: state rows per thread (ceil(dk / kDeltaRowGroups), rounded up to a template size).
// Rows n0 + blockIdx.y of q, k: [N, Hk, dk]; v, z, y: [N, Hv, dv]; a, b: [N, Hv].
template <class T, int R>
__global__ void __launch_bounds__(kDecodeMaxCols* kDeltaRowGroups)
    gdn_decode_step_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                           const T* __restrict__ a, const T* __restrict__ b, const float* __restrict__ neg_exp_A,
                           const float* __restrict__ dt_bias, const T* z, const float* __restrict__ norm_w, float eps,
                           StatePtrs states, int64_t n0, T* y, int Hk, int Hv, int dk, int dv, int cols, bool tiled) {
  __shared__ float kq[2][kDeltaMaxDk];  // the token's k and q head, fp32
  __shared__ float red_kv[kDeltaRowGroups][kDecodeMaxCols];
  __shared__ float red_o[kDeltaRowGroups][kDecodeMaxCols];
  __shared__ float o_sh[kDecodeMaxDv];  // the head's output, rounded to T
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  const int j = blockIdx.x;  // value head
  const int64_t n = n0 + blockIdx.y;  // token (= sequence) row
  const int col = threadIdx.x % cols, rg = threadIdx.x / cols;
  const int hk = tiled ? j % Hk : j / (Hv / Hk);
  const int64_t hj = n * Hv + j;
  const float decay = expf(gdn_decay_gate(to_f32(a[hj]), dt_bias[j], neg_exp_A[j]));
  const float bt = sigmoid_f(to_f32(b[hj]));
  const int64_t qk_off = (n * Hk + hk) * dk;
  for (int i = threadIdx.x; i < dk; i += blockDim.x) {
    kq[0][i] = to_f32(k[qk_off + i]);
    kq[1][i] = to_f32(q[qk_off + i]);
  }
  __syncthreads();
  float* S = states.p[blockIdx.y] + int64_t(j) * dk * dv;
  const T* vh = v + hj * dv;
  for (int c0 = 0; c0 < dv; c0 += cols) {
    const int e = c0 + col;  // value column
    const bool live = e < dv;
    float s[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = rg + kDeltaRowGroups * r;
      s[r] = (live && i < dk) ? S[int64_t(i) * dv + e] : 0.0f;
    }
    delta_rule_token(s, kq, red_kv, red_o, rg, col, dk, decay, [&](float kv) {
      const float vv = live ? to_f32(vh[e]) : 0.0f;
      return bt * (vv - kv);
    });
    // Every read of red_kv comes before the barrier above and every read of red_o before the
    // next pass's first barrier, and the next pass writes each only after that barrier: two
    // barriers per pass suffice.
    if (rg == 0 && live) {
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < kDeltaRowGroups; ++w) o += red_o[w][col];
      o_sh[e] = to_f32(from_f32<T>(o));
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = rg + kDeltaRowGroups * r;
      if (live && i < dk) S[int64_t(i) * dv + e] = s[r];
    }
  }
  __syncthreads();  // o_sh holds the whole head
  float ss = 0.0f;
  for (int e = threadIdx.x; e < dv; e += blockDim.x) ss += o_sh[e] * o_sh[e];
  const float f = 1.0f / sqrtf(block_sum(ss, red) / static_cast<float>(dv) + eps);
  const T* zh = z + hj * dv;
  T* yh = y + hj * dv;
  for (int e = threadIdx.x; e < dv; e += blockDim.x)
    yh[e] = from_f32<T>(norm_w[e] * (o_sh[e] * f) * silu_f(to_f32(zh[e])));
}

template <class T, int R>
void launch_decode_step(const ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                        const Tensor& b, const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z,
                        const Tensor& norm_w, float eps, const std::vector<Tensor>& states, bool tiled, Tensor& y) {
  const int64_t N = q.dim(0), Hk = q.dim(1), dk = q.dim(2), Hv = v.dim(1), dv = v.dim(2);
  const int cols = static_cast<int>(std::min<int64_t>(kDecodeMaxCols, (dv + 31) / 32 * 32));
  // More sequences than one launch's state pointers: the next launches take the rest.
  for (int64_t n0 = 0; n0 < N; n0 += kDecodeMaxSeqs) {
    const int64_t ns = std::min<int64_t>(kDecodeMaxSeqs, N - n0);
    StatePtrs ptrs{};
    for (int64_t i = 0; i < ns; ++i) ptrs.p[i] = states[static_cast<size_t>(n0 + i)].ptr<float>();
    const dim3 grid(static_cast<unsigned>(Hv), static_cast<unsigned>(ns));
    VI_CUDA_CHECK(pdl_launch(gdn_decode_step_kernel<T, R>, grid, cols * kDeltaRowGroups, 0, stream_of(ctx),
                             q.ptr<T>(), k.ptr<T>(), v.ptr<T>(), a.ptr<T>(), b.ptr<T>(), neg_exp_A.ptr<float>(),
                             dt_bias.ptr<float>(), z.ptr<T>(), norm_w.ptr<float>(), eps, ptrs, n0, y.ptr<T>(),
                             static_cast<int>(Hk), static_cast<int>(Hv), static_cast<int>(dk), static_cast<int>(dv),
                             cols, tiled));
  }
}

void gdn_decode_step_cuda(ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                          const Tensor& b, const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z,
                          const Tensor& norm_w, float eps, const std::vector<Tensor>& states, ops::GvaLayout layout,
                          Tensor& y) {
  const int64_t dk = q.dim(2), Hv = v.dim(1), dv = v.dim(2);
  VI_CHECK(dk <= kDeltaMaxDk, "op 'gdn_decode_step' on cuda: key head dim {} exceeds {}", dk, kDeltaMaxDk);
  VI_CHECK(dv <= kDecodeMaxDv, "op 'gdn_decode_step' on cuda: value head dim {} exceeds {}", dv, kDecodeMaxDv);
  VI_CHECK(Hv <= INT32_MAX, "op 'gdn_decode_step' on cuda: {} value heads is too many", Hv);
  if (q.dim(0) == 0) return;
  const bool tiled = layout == ops::GvaLayout::kTiled;
  dispatch_act("gdn_decode_step", q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = (dk + kDeltaRowGroups - 1) / kDeltaRowGroups;
    if (rows <= 8) launch_decode_step<T, 8>(ctx, q, k, v, a, b, neg_exp_A, dt_bias, z, norm_w, eps, states, tiled, y);
    else if (rows <= 16) launch_decode_step<T, 16>(ctx, q, k, v, a, b, neg_exp_A, dt_bias, z, norm_w, eps, states, tiled, y);
    else if (rows <= 32) launch_decode_step<T, 32>(ctx, q, k, v, a, b, neg_exp_A, dt_bias, z, norm_w, eps, states, tiled, y);
    else launch_decode_step<T, 64>(ctx, q, k, v, a, b, neg_exp_A, dt_bias, z, norm_w, eps, states, tiled, y);
  });
}

const bool registered = [] {
  for (DType t : {DType::F32, DType::F16}) ops::gdn_decode_step_table().add(Device::CUDA, t, gdn_decode_step_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
