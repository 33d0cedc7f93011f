// The Volta-profile GEMM: y[T, N] = x[T, K] · w[N, K]ᵀ with fp16 operands and fp32
// accumulation on tensor cores through WMMA (sm_70's mma.m8n8k4 underneath), no cp.async,
// no ldmatrix; 128 x 128 block tiles, 40 KB of shared memory per block (Volta allows 96 KB).
#pragma once

#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

// x: [T, K] f16 (ldx = K); w: [N, K] f16 (ldw = K); y: T rows of N values at stride ldy.
template <class TOut>
void gemm_wmma_f16(const ops::Context& ctx, const __half* x, const __half* w, TOut* y, int64_t T, int64_t N,
                   int64_t K, int64_t ldy);

}  // namespace vi::cuda
