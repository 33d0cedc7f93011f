// CUDA kernels of the Gated DeltaNet ops.
//  conv1d_causal: a thread owns one channel and a run of up to kConvRun tokens, with the
//    K-1 inputs before its run in registers (summed oldest-first after the current tap, the
//    CPU kernel's order). Only the thread of a channel's first run reads the old state, and
//    the same thread writes the new one, so runs never race on it.
//  gdn_gates: element-wise.
//  gated_delta_rule: the chunked form with f16 activations, dk <= 128 and at least
//    kChunkedMinTokens tokens runs on tensor cores (gdn_chunked.cu). Everything else
//    (decode, short verify batches, f32 activations, larger dk) runs the token-sequential
//    kernel here: one block per (value head, 32 value columns); the block's slice of the
//    fp32 state S[dk, 32] stays in registers for all T tokens, split over 4 warps by rows;
//    Sᵀk and Sᵀq are reduced over the warps through shared memory.
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/gdn.cuh"
#include "backends/cuda/gdn_chunked.cuh"
#include "backends/cuda/pdl.cuh"
#include "ops/gdn.h"

namespace vi::cuda {
namespace {

// ---- conv1d_causal ----

// Tokens per thread: a prefill chunk of 4096 tokens x 2048 channels is 8192 threads' worth of
// runs instead of 2048 threads walking all 4096 tokens (the one-run-per-channel kernel ran at
// 13 GB/s on the H200, a third of a 27B prefill).
constexpr int kConvRun = 16;

template <class T>
__global__ void conv1d_kernel(const T* x, const float* __restrict__ w, float* state, bool silu, T* y, int64_t T_,
                              int64_t C, int K, int64_t run) {
  pdl_wait();
  pdl_trigger();
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int64_t t0 = int64_t(blockIdx.y) * run, t1 = min(T_, t0 + run);
  const int H = K - 1;
  float hist[kConvMaxTaps - 1];  // the H inputs before the current token, oldest first
  float wt[kConvMaxTaps];
#pragma unroll
  for (int i = 0; i < kConvMaxTaps; ++i) wt[i] = i < K ? w[c * K + i] : 0.0f;
  // Input t0 - H + i: from x where it is inside the chunk, from the old state before it.
#pragma unroll
  for (int i = 0; i < kConvMaxTaps - 1; ++i) {
    const int64_t t = t0 - H + i;
    hist[i] = i >= H ? 0.0f : t >= 0 ? to_f32(x[t * C + c]) : state[(H + t) * C + c];
  }
  for (int64_t t = t0; t < t1; ++t) {
    const float xv = to_f32(x[t * C + c]);
    float acc = wt[H] * xv;
#pragma unroll
    for (int i = 0; i < kConvMaxTaps - 1; ++i)
      if (i < H) acc += wt[i] * hist[i];
    y[t * C + c] = from_f32<T>(silu ? silu_f(acc) : acc);
#pragma unroll
    for (int i = 0; i < kConvMaxTaps - 2; ++i)
      if (i + 1 < H) hist[i] = hist[i + 1];
    if (H > 0) hist[H - 1] = xv;
  }
  if (blockIdx.y != 0) return;
  // The new state is the last H inputs of (old state, chunk). A run that reached the end holds
  // them in hist (the only way in place, where x is already overwritten); otherwise the chunk
  // is out of place and its last inputs are read back from x (T_ > kConvRun >= H).
  if (t1 == T_) {
#pragma unroll
    for (int i = 0; i < kConvMaxTaps - 1; ++i)
      if (i < H) state[i * C + c] = hist[i];
  } else {
#pragma unroll
    for (int i = 0; i < kConvMaxTaps - 1; ++i)
      if (i < H) state[i * C + c] = to_f32(x[(T_ - H + i) * C + c]);
  }
}

void conv1d_cuda(ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& state, bool silu, Tensor& y) {
  const int64_t T_ = x.dim(0), C = x.dim(1), K = w.dim(1);
  VI_CHECK(K <= kConvMaxTaps, "op 'conv1d_causal' on cuda: kernel width {} exceeds {}", K, kConvMaxTaps);
  if (C == 0 || T_ == 0) return;
  static_assert(kConvMaxTaps - 1 <= kConvRun, "only a channel's first run may read the old state");
  // In place (y aliases x) a run would read inputs the run before it already overwrote: one
  // run per channel then, in token order.
  const int64_t run = x.data() == y.data() ? T_ : kConvRun;
  const int64_t runs = (T_ + run - 1) / run;
  VI_CHECK(runs < 65536, "op 'conv1d_causal' on cuda: {} tokens in one call exceed the grid", T_);
  dispatch_act("conv1d_causal", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(static_cast<unsigned>((C + 127) / 128), static_cast<unsigned>(runs));
    VI_CUDA_CHECK(pdl_launch(conv1d_kernel<T>, grid, 128, 0, stream_of(ctx), x.ptr<T>(), w.ptr<float>(),
                             state.ptr<float>(), silu, y.ptr<T>(), T_, C, static_cast<int>(K), run));
  });
}

// ---- gdn_gates ----

template <class T>
__global__ void gates_kernel(const T* a, const T* b, const float* __restrict__ neg_exp_A, const float* __restrict__ dt_bias,
                             float* g, float* beta, int64_t n, int64_t Hv) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = i % Hv;
    g[i] = gdn_decay_gate(to_f32(a[i]), dt_bias[j], neg_exp_A[j]);
    beta[i] = sigmoid_f(to_f32(b[i]));
  }
}

void gates_cuda(ops::Context& ctx, const Tensor& a, const Tensor& b, const Tensor& neg_exp_A, const Tensor& dt_bias,
                Tensor& g, Tensor& beta) {
  const int64_t n = a.numel();
  if (n == 0) return;
  dispatch_act("gdn_gates", a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    VI_CUDA_CHECK(pdl_launch(gates_kernel<T>, blocks_for(n, 256), 256, 0, stream_of(ctx), a.ptr<T>(), b.ptr<T>(),
                             neg_exp_A.ptr<float>(), dt_bias.ptr<float>(), g.ptr<float>(), beta.ptr<float>(), n,
                             a.dim(1)));
  });
}

// ---- gated_delta_rule ----

// R: state rows per thread (ceil(dk / 4), rounded up to a template size).
template <class T, int R>
__global__ void __launch_bounds__(kDeltaCols* kDeltaRowGroups)
    delta_rule_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                      const float* __restrict__ g, const float* __restrict__ beta, float* state, T* out, int64_t T_,
                      int Hk, int Hv, int dk, int dv, bool tiled) {
  __shared__ float kq[2][kDeltaMaxDk];  // this token's k and q, fp32
  __shared__ float red_kv[kDeltaRowGroups][kDeltaCols];
  __shared__ float red_o[kDeltaRowGroups][kDeltaCols];
  pdl_wait();
  pdl_trigger();
  const int j = blockIdx.x;  // value head
  const int col = threadIdx.x & 31, rg = threadIdx.x >> 5;
  const int e = blockIdx.y * kDeltaCols + col;  // value column
  const bool live = e < dv;
  const int hk = tiled ? j % Hk : j / (Hv / Hk);
  float* S = state + int64_t(j) * dk * dv;
  float s[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = rg + kDeltaRowGroups * r;
    s[r] = (live && i < dk) ? S[int64_t(i) * dv + e] : 0.0f;
  }
  for (int64_t t = 0; t < T_; ++t) {
    const int64_t qk_off = (t * Hk + hk) * dk;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
      kq[0][i] = to_f32(k[qk_off + i]);
      kq[1][i] = to_f32(q[qk_off + i]);
    }
    __syncthreads();
    delta_rule_token(s, kq, red_kv, red_o, rg, col, dk, expf(g[t * Hv + j]), [&](float kv) {
      const float vv = live ? to_f32(v[(t * Hv + j) * int64_t(dv) + e]) : 0.0f;
      return beta[t * Hv + j] * (vv - kv);
    });
    if (rg == 0 && live) {
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < kDeltaRowGroups; ++w) o += red_o[w][col];
      out[(t * Hv + j) * int64_t(dv) + e] = from_f32<T>(o);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = rg + kDeltaRowGroups * r;
    if (live && i < dk) S[int64_t(i) * dv + e] = s[r];
  }
}

template <class T, int R>
void launch_delta(const ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                  const Tensor& beta, Tensor& state, bool tiled, Tensor& out) {
  const int64_t T_ = q.dim(0), Hk = q.dim(1), dk = q.dim(2), Hv = v.dim(1), dv = v.dim(2);
  dim3 grid(static_cast<unsigned>(Hv), static_cast<unsigned>((dv + kDeltaCols - 1) / kDeltaCols));
  VI_CUDA_CHECK(pdl_launch(delta_rule_kernel<T, R>, grid, kDeltaCols * kDeltaRowGroups, 0, stream_of(ctx), q.ptr<T>(),
                           k.ptr<T>(), v.ptr<T>(), g.ptr<float>(), beta.ptr<float>(), state.ptr<float>(), out.ptr<T>(),
                           T_, static_cast<int>(Hk), static_cast<int>(Hv), static_cast<int>(dk),
                           static_cast<int>(dv), tiled));
}

void delta_rule_cuda(ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                     const Tensor& beta, Tensor& state, ops::GvaLayout layout, ops::DeltaRuleForm form, Tensor& out) {
  const int64_t dk = q.dim(2);
  VI_CHECK(dk <= kDeltaMaxDk, "op 'gated_delta_rule' on cuda: key head dim {} exceeds {}", dk, kDeltaMaxDk);
  if (q.dim(0) == 0) return;
  const bool tiled = layout == ops::GvaLayout::kTiled;
  if (form == ops::DeltaRuleForm::kChunked && q.dtype() == DType::F16 && dk <= kChunkedMaxDk &&
      q.dim(0) >= kChunkedMinTokens && delta_rule_chunked_fits()) {
    delta_rule_chunked_f16(ctx, q, k, v, g, beta, state, tiled, out);
    return;
  }
  dispatch_act("gated_delta_rule", q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = (dk + kDeltaRowGroups - 1) / kDeltaRowGroups;
    if (rows <= 8) launch_delta<T, 8>(ctx, q, k, v, g, beta, state, tiled, out);
    else if (rows <= 16) launch_delta<T, 16>(ctx, q, k, v, g, beta, state, tiled, out);
    else if (rows <= 32) launch_delta<T, 32>(ctx, q, k, v, g, beta, state, tiled, out);
    else launch_delta<T, 64>(ctx, q, k, v, g, beta, state, tiled, out);
  });
}

[[maybe_unused]] const bool registered = [] {
  for (DType t : {DType::F32, DType::F16}) {
    ops::conv1d_causal_table().add(Device::CUDA, t, conv1d_cuda);
    ops::gdn_gates_table().add(Device::CUDA, t, gates_cuda);
    ops::gated_delta_rule_table().add(Device::CUDA, t, delta_rule_cuda);
  }
  return true;
}();

}  // namespace
}  // namespace vi::cuda
