// The fused gate|up GEMV + SwiGLU on Q4_KT over whole tiles (gemv_q4kt_swiglu.cu, sm_90), the
// kernel gemv_q4kt.cu routes gemv_q4kt_swiglu and the deferred norm's SwiGLU consumer to where
// the shared-memory ring can run. Internal to the CUDA backend.
#pragma once

#include "backends/cuda/gemv_q4kt.cuh"
#include "backends/cuda/q4kt_deferred.cuh"
#include "core/tensor.h"
#include "ops/registry.h"

namespace vi::cuda {

// h[T, F] from x [T, K] f16 and a stacked gate|up w [2F, K] in Q4_KT (F % 16 == 0): `shape`
// (8-warp blocks per SM, slots per warp) one of gemv_q4kt_swiglu_shapes' ring shapes. consume:
// the deferred norm consumer's arguments (x is then u, each token's sums scaled by its s), or null.
void q4kt_swiglu_tiles(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h, Q4ktShape shape,
                       const NormArgs* consume);

}  // namespace vi::cuda
