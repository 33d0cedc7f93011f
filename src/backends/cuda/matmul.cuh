// CUDA matmul y[T, N] = x[T, K] · w[N, K]ᵀ (ops/matmul.h) for every weight dtype.
//   T <= kGemvMaxTokens, or f32 activations: GEMV, which streams each weight row once for up
//     to 8 tokens (decode is memory-bound): on tensor cores where gemv_q4kr.cuh (Q4_KR) or
//     gemv_mma.cuh (Q4_K / Q5_K / Q8_0R / F16) applies (native profile, sm_80+, f16
//     activations), else on CUDA cores (gemv_simt.cuh).
//   larger T with f16 activations: dequantize a tile of weight rows to f16 (F16 weights are
//     used in place), then a tensor-core GEMM: cuBLAS (native profile) or our WMMA kernel
//     (volta profile). fp32 accumulation everywhere.
#pragma once

#include "backends/cuda/quant.cuh"

namespace vi::cuda {

constexpr int64_t kGemvMaxTokens = 8;

}  // namespace vi::cuda
