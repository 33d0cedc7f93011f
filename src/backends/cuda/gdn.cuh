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

}  // namespace vi::cuda
