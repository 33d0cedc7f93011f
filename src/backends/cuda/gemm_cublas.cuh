// The cuBLAS side of the prefill GEMM, and which GEMM a call uses. Builds with VI_CUBLAS=OFF
// (the CUDA 11.8 sm_70 build) have no cuBLAS: there gemm_wmma.cu runs in every profile.
#pragma once

#include "backends/cuda/device.cuh"

#ifndef VI_CUBLAS
#error "VI_CUBLAS must be defined (0 or 1) by the build: see cmake/cuda.cmake"
#endif

namespace vi::cuda {

inline constexpr bool kHaveCublas = VI_CUBLAS != 0;

// cuBLAS runs the native profile's GEMM when the build has it; the volta profile, and every
// profile of a build without cuBLAS, use our WMMA kernel.
// VOLTINFER_CUBLAS=0 in the environment sends the native profile to our WMMA GEMM too (to
// tell a cuBLAS difference from one of ours).
bool cublas_allowed_by_env();
inline bool gemm_uses_cublas(const ops::Context& ctx) {
  return kHaveCublas && !volta_profile(ctx) && cublas_allowed_by_env();
}

// y[T, N] (row stride ldy) = x[T, K] · w[N, K]ᵀ; f16 in and out, fp32 accumulation.
// Throws in a build without cuBLAS (callers check gemm_uses_cublas first).
void gemm_cublas_f16(const ops::Context& ctx, const __half* x, const __half* w, __half* y, int64_t T, int64_t N,
                     int64_t K, int64_t ldy);

}  // namespace vi::cuda
