// The prefill side of CUDA matmul (f16 activations, more than kGemvMaxTokens tokens):
// y[T, N] = x[T, K] · w[N, K]ᵀ on tensor cores. F16 weights are used in place; any other
// weight dtype is dequantized to f16 a tile of rows at a time into scratch, then multiplied.
// The GEMM is cuBLAS in the native profile and gemm_wmma.cu in the volta profile, or
// gemm_wmma.cu in both in a build without cuBLAS (gemm_cublas.cuh).
#pragma once

#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

// Bytes of f16 weights dequantized per GEMM tile: bounds the scratch of a large matrix.
constexpr size_t kDequantTileBytes = size_t(64) << 20;

// x: [T, K] f16; w: [N, K] of any weight dtype with a device decoder; y: [T, N] f16.
void gemm_path(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y);
// A Q4_KTS gate|up stack w [2F, K]: gate [T, F] = x · w[0:F]ᵀ and up [T, F] = x · w[F:2F]ᵀ, each
// the GEMMs gemm_path runs on a [F, K] matrix (so also what gemm_path gives on the whole stack).
void gemm_path_q4kts_halves(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& gate, Tensor& up);

}  // namespace vi::cuda
