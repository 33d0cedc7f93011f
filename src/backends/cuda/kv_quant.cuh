// int8 KV cache on the GPU (ops/kv_quant.h): the block-wide Hadamard rotation shared by
// the quantizing write (keys) and the attention kernels (queries).
#pragma once

#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

// In place, the R rows of x (row stride ld floats, shared memory) over their first D dims:
// y = H x with H the normalised block Hadamard of ops/kv_quant.h (powers of two greedily
// from the front). All threads of the block call it; it ends with a barrier.
__device__ inline void hadamard_rows_smem(float* x, int R, int ld, int D) {
  for (int b0 = 0; b0 < D;) {
    int n = 1;
    while (n * 2 <= D - b0) n *= 2;
    for (int h = 1; h < n; h *= 2) {
      for (int idx = threadIdx.x; idx < R * (n / 2); idx += blockDim.x) {
        const int r = idx / (n / 2), i = idx % (n / 2);
        const int j = b0 + (i / h) * 2 * h + i % h;
        float* row = x + r * ld;
        const float a = row[j], c = row[j + h];
        row[j] = a + c;
        row[j + h] = a - c;
      }
      __syncthreads();
    }
    const float norm = 1.0f / sqrtf(static_cast<float>(n));  // as the CPU computes it
    for (int idx = threadIdx.x; idx < R * n; idx += blockDim.x) x[(idx / n) * ld + b0 + idx % n] *= norm;
    __syncthreads();
    b0 += n;
  }
}

}  // namespace vi::cuda
