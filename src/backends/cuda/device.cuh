// Device facts the kernels need: compute capability, shared memory, the kernel profile.
#pragma once

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

// Per-device tables have this many entries: current_device() refuses a device index past it, so a
// table indexed by current_device().index needs no bound check of its own.
inline constexpr int kMaxDevices = 64;

struct DeviceInfo {
  int index = 0;
  int cc = 0;  // compute capability as 10 * major + minor (70 = V100, 90 = H100/H200)
  // The architecture this binary's kernels were compiled for, as loaded on this device (same
  // encoding): 90 for sm_90 code on an H200, but 70 for the compute_70 PTX of the CUDA 11.8
  // build JIT-compiled there. Instructions newer than this arch are not in the code.
  int code_cc = 0;
  int sm_count = 0;      // the SMs the kernels size their grids for (set_usable_sm_count)
  int sm_total = 0;      // the card's SMs
  size_t total_mem = 0;
  int smem_optin = 0;  // bytes of shared memory a block may opt into
  char name[256] = {};
};
// The current device's facts (queried once per device).
const DeviceInfo& current_device();

// Makes `dev` the current device for a scope and restores the caller's at its end (also when it
// throws).
class DeviceGuard {
 public:
  explicit DeviceGuard(int dev) {
    VI_CUDA_CHECK(cudaGetDevice(&prev_));
    VI_CUDA_CHECK(cudaSetDevice(dev));
  }
  ~DeviceGuard() { cudaSetDevice(prev_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
};

inline bool volta_profile(const ops::Context& ctx) { return resolve_profile(ctx) == ops::KernelProfile::kVolta; }
// Whether a kernel may use sm_80 instructions (mma.m16n8k16, cp.async, ldmatrix, bf16): the
// native profile on a device whose loaded code was compiled for sm_80 or newer.
inline bool sm80_code(const ops::Context& ctx) { return !volta_profile(ctx) && current_device().code_cc >= 80; }

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
