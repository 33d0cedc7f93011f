// cuBLAS GEMM of the native profile: one handle per device, bound to the call's stream.
// Compiled in every build; without cuBLAS (VI_CUBLAS=0) the entry point only reports that.
#include "backends/cuda/gemm_cublas.cuh"

#include "backends/cuda/env_switch.h"

#if VI_CUBLAS
#include <climits>
#endif

namespace vi::cuda {

bool cublas_allowed_by_env() {
  static const bool allowed = env_switch_on("VOLTINFER_CUBLAS");
  return allowed;
}

#if VI_CUBLAS
namespace {

// A handle per thread and device: a handle carries its stream from cublasSetStream to the GEMM,
// so threads that queue work on streams of their own (the ranks of a split model) must not share
// one. A thread's handles live as long as the process (ranks' threads live as long as the model).
cublasHandle_t cublas_for(const ops::Context& ctx) {
  thread_local cublasHandle_t handles[kMaxDevices] = {};
  const int dev = current_device().index;
  if (!handles[dev]) {
    VI_CUBLAS_CHECK(cublasCreate(&handles[dev]));
    // fp32 accumulation all the way: by default cuBLAS may reduce split-K partials of an f16
    // output in f16.
    VI_CUBLAS_CHECK(cublasSetMathMode(handles[dev], static_cast<cublasMath_t>(
                                                        CUBLAS_DEFAULT_MATH |
                                                        CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  }
  VI_CUBLAS_CHECK(cublasSetStream(handles[dev], stream_of(ctx)));
  return handles[dev];
}

}  // namespace

void gemm_cublas_f16(const ops::Context& ctx, const __half* x, const __half* w, __half* y, int64_t T, int64_t N,
                     int64_t K, int64_t ldy) {
  VI_CHECK(T < INT_MAX && N < INT_MAX && K < INT_MAX && ldy < INT_MAX, "op 'matmul' on cuda: GEMM too large");
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major view: yᵀ[N, T] = w[N, K] · xᵀ[K, T]; w row-major is (K x N) col-major.
  VI_CUBLAS_CHECK(cublasGemmEx(cublas_for(ctx), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(T),
                               static_cast<int>(K), &alpha, w, CUDA_R_16F, static_cast<int>(K), x, CUDA_R_16F,
                               static_cast<int>(K), &beta, y, CUDA_R_16F, static_cast<int>(ldy), CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
}

#else

void gemm_cublas_f16(const ops::Context&, const __half*, const __half*, __half*, int64_t, int64_t, int64_t, int64_t) {
  VI_FAIL("op 'matmul' on cuda: this build has no cuBLAS (VI_CUBLAS=OFF); the WMMA GEMM should have been chosen");
}

#endif

}  // namespace vi::cuda
