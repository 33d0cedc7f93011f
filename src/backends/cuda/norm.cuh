// CUDA normalisation ops (ops/norm.h): rms_norm, add_rms_norm (residual add + norm), l2_norm
// (GDN q/k) and gated_rms_norm (GDN output). One block per row, fp32 sum of squares, f32/f16 storage.
#pragma once

#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

// Threads per row block: a warp multiple that covers short rows without idle warps, and up
// to 1024 for long ones. A decode step normalises one 5120-wide row per call: one block,
// whose loop of dependent loads is the whole cost (256 threads: 20 loads each, ~16 us per
// call on the H200 under the profiler; 1024 threads and unrolled loads: 5, issued together).
inline int norm_threads(int64_t n) {
  int t = 64;
  while (t < 1024 && t * 4 < n) t *= 2;
  return t;
}

// Sum of squares of the row xr[n] over the whole block (every thread gets it; `red`: 32
// floats of shared memory). The one summation order of rms_norm's kernels: an op that
// repeats the norm inside a fused kernel calls this, with norm_threads(n) threads, to get
// its bits.
template <class T>
__device__ inline float row_sum_sq(const T* xr, int64_t n, float* red) {
  float ss = 0.0f;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = to_f32(xr[i]);
    ss += v * v;
  }
  return block_sum(ss, red);
}

// rsqrt(mean(x²) + eps) from the row's sum of squares, rounded as rms_norm rounds it; an
// element is then (x * inv) * (w + w_offset).
__device__ __forceinline__ float rms_inv(float ss, int64_t n, float eps) {
  return 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
}

}  // namespace vi::cuda
