// CUDA causal attention with grouped KV heads (ops/attention.h and the prefill side of
// ops/paged_attention.h): q [T, Hq, D] f32/f16, k/v [S, Hkv, D] f16 (the GPU KV cache) or
// f32; fp32 softmax with an online (running max / running sum) update over tiles of keys.
// One block per (query, head): correct, not fast (a tensor-core flash kernel is to come).
// Paged decode (T <= 8) and every i8 K/V read go to attention_decode.cuh.
#pragma once

#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

constexpr int kAttnThreads = 128;
constexpr int kAttnTile = 64;     // keys scored per step
constexpr int kAttnMaxDim = 512;  // head_dim bound: 4 output dims per thread

}  // namespace vi::cuda
