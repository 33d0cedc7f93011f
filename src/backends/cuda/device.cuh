// Device facts the kernels need: compute capability, shared memory, the kernel profile.
#pragma once

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

struct DeviceInfo {
  int index = 0;
  int cc = 0;  // compute capability as 10 * major + minor (70 = V100, 90 = H100/H200)
  int sm_count = 0;
  size_t total_mem = 0;
  char name[256] = {};
};
// The current device's facts (queried once per device).
const DeviceInfo& current_device();

inline bool volta_profile(const ops::Context& ctx) { return resolve_profile(ctx) == ops::KernelProfile::kVolta; }

}  // namespace vi::cuda

// cuBLAS builds only (VI_CUBLAS=1, cmake/cuda.cmake): its header and a checked call.
#if VI_CUBLAS
#include <cublas_v2.h>

#define VI_CUBLAS_CHECK(call)                                                                       \
  do {                                                                                              \
    cublasStatus_t vi_st_ = (call);                                                                 \
    if (vi_st_ != CUBLAS_STATUS_SUCCESS)                                                            \
      ::vi::fail_at(__FILE__, __LINE__, fmt::format("{} failed: cuBLAS status {}", #call, static_cast<int>(vi_st_))); \
  } while (0)
#endif
