// The CUDA-core GEMV: y[T, N] = x[T, K] · w[N, K]ᵀ for every weight dtype with a device
// decoder (quant.cuh), f32 or f16 activations, any T (in launches of up to 8 tokens). It is
// what the volta profile runs, and the native profile wherever the tensor-core GEMV
// (gemv_mma.cuh) does not apply: f32 activations and the dtypes it has no unit decoder for.
//
// A warp owns kRows = 2 weight rows; lane l decodes values 8l + 256s of both (dq8) and
// multiplies them with the activations of every token, loaded once for both rows (16-byte
// loads when rows of x are 16-byte aligned) and all before the first is used. The Q8_0R and
// Q4_KR quant words are loaded evict-first where that measured faster (simt_stream). fp32
// accumulation, one warp sum per output.
#pragma once

#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

// x: [T, K] f32 or f16; w: [N, K] of any dtype in kWeightDTypes; y: [T, N] like x.
void gemv_simt(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y);

}  // namespace vi::cuda
