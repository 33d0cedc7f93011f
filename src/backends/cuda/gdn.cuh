// CUDA Gated DeltaNet ops (ops/gdn.h): conv1d_causal, gdn_gates and gated_delta_rule with
// fp32 state. Math: MODEL_QWEN35 §5, the CPU kernels in backends/cpu/gdn_*.cpp.
#pragma once

#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

constexpr int kConvMaxTaps = 8;    // conv kernel width bound (Qwen3.5 uses 4)
constexpr int kDeltaMaxDk = 256;   // key head dim bound of the delta-rule kernel
constexpr int kDeltaCols = 32;     // value columns per block
constexpr int kDeltaRowGroups = 4;  // warps per block; warp w owns state rows w, w+4, ...

// gdn_gates' decay g of one token and value head: neg_exp_A * softplus(a + dt_bias), with
// PyTorch's softplus (the identity above 20). Shared by gates_kernel and the fused decode
// step so both compute g with the same instructions.
__device__ __forceinline__ float gdn_decay_gate(float a, float dt_bias, float neg_exp_A) {
  const float z = a + dt_bias;
  const float sp = z > 20.0f ? z : log1pf(expf(z));
  return neg_exp_A * sp;
}

// The middle of a delta-rule token step (delta_rule_token and gdn_decode_step's vector form):
// this thread's part of Sᵀk into red_kv, the block barrier, Sᵀk summed over the row groups in
// their order, and delta_of of it (beta (v − Sᵀk)).
template <int COLS, class DeltaOf>
__device__ __forceinline__ float delta_rule_delta(float part, float (&red_kv)[kDeltaRowGroups][COLS], int rg, int col,
                                                  DeltaOf delta_of) {
  red_kv[rg][col] = part;
  __syncthreads();
  float kv = 0.0f;
#pragma unroll
  for (int w = 0; w < kDeltaRowGroups; ++w) kv += red_kv[w][col];
  return delta_of(kv);
}

// One token of the gated delta rule for this thread's value column, the step delta_rule_kernel
// and the fused decode step share: s holds rows rg, rg + kDeltaRowGroups, ... of the column of
// the fp32 state; they are decayed, Sᵀk is reduced over the row groups through red_kv, the
// rank-1 update S += k deltaᵀ applied with delta = delta_of(Sᵀk) (beta (v − Sᵀk)), and this
// thread's part of qᵀS left in red_o[rg][col] for the caller to sum (after the second barrier).
// kq: the token's k (row 0) and q (row 1) in fp32, shared. Every thread of the block calls it.
template <int R, int COLS, class DeltaOf>
__device__ __forceinline__ void delta_rule_token(float (&s)[R], const float (&kq)[2][kDeltaMaxDk],
                                                 float (&red_kv)[kDeltaRowGroups][COLS],
                                                 float (&red_o)[kDeltaRowGroups][COLS], int rg, int col, int dk,
                                                 float decay, DeltaOf delta_of) {
  float part = 0.0f;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = rg + kDeltaRowGroups * r;
    s[r] *= decay;
    if (i < dk) part += s[r] * kq[0][i];
  }
  const float delta = delta_rule_delta(part, red_kv, rg, col, delta_of);
  float po = 0.0f;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = rg + kDeltaRowGroups * r;
    if (i < dk) {
      s[r] += kq[0][i] * delta;
      po += s[r] * kq[1][i];
    }
  }
  red_o[rg][col] = po;
  __syncthreads();
}

}  // namespace vi::cuda
