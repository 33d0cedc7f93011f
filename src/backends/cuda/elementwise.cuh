// CUDA element-wise ops (add, swiglu, sigmoid_mul) and row softmax, f32/f16 storage with
// fp32 math. Registered into the ops/elementwise.h tables for Device::CUDA.
#pragma once

#include "backends/cuda/cuda_util.cuh"
#include "core/tensor.h"

namespace vi::cuda {

// out = a · sigmoid(b) element-wise (the sigmoid_mul op's kernel, checks done by the caller): for
// kernels that apply Qwen3.5's attention gate after their own launch (attention.cu).
void sigmoid_mul_cuda(ops::Context& ctx, const Tensor& a, const Tensor& b, Tensor& out);

// PyTorch's formulas, in fp32: silu(g) = g / (1 + exp(-g)), sigmoid(g) = 1 / (1 + exp(-g)).
__device__ __forceinline__ float silu_f(float g) { return g / (1.0f + expf(-g)); }
__device__ __forceinline__ float sigmoid_f(float g) { return 1.0f / (1.0f + expf(-g)); }

}  // namespace vi::cuda
