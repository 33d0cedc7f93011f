// CUDA normalisation ops (ops/norm.h): rms_norm, l2_norm (GDN q/k) and gated_rms_norm (GDN
// output). One block per row, fp32 sum of squares, f32/f16 storage.
#pragma once

#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

// Threads per row block: a warp multiple that covers short rows without idle warps.
inline int norm_threads(int64_t n) { return n >= 256 ? 256 : n > 64 ? 128 : 64; }

}  // namespace vi::cuda
