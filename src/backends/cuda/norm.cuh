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

}  // namespace vi::cuda
