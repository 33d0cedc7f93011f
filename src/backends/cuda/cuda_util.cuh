// Helpers shared by every CUDA kernel file: error checks that throw vi::Error with
// file:line, the stream of a call, fp32 <-> storage conversion for the activation dtypes,
// block/warp reductions, scratch buffers and the registration of (f32, f16) kernels.
// What does not live here: device discovery and profiles (device.cuh).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "ops/registry.h"

namespace vi::cuda {

[[noreturn]] void fail_cuda(cudaError_t err, const char* what, const char* file, int line);

}  // namespace vi::cuda

// VI_CUDA_CHECK(cudaMemcpy(...)): throws vi::Error naming the call, the CUDA error and file:line.
#define VI_CUDA_CHECK(call)                                                   \
  do {                                                                        \
    cudaError_t vi_err_ = (call);                                             \
    if (vi_err_ != cudaSuccess) ::vi::cuda::fail_cuda(vi_err_, #call, __FILE__, __LINE__); \
  } while (0)
// After a kernel launch: a bad launch configuration surfaces here, not at a later call.
#define VI_CUDA_LAUNCH_CHECK() VI_CUDA_CHECK(cudaGetLastError())

namespace vi::cuda {

inline cudaStream_t stream_of(const ops::Context& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

// Lets `kernel` launch with `bytes` of dynamic shared memory on the current device (over 48 KB
// must be opted into). The limit only grows, under a lock: threads that launch one kernel with
// different sizes at once (the ranks of a split model on one GPU, whose head counts differ) must
// not lower it under each other's launch — that launch fails with an invalid argument.
void opt_in_dynamic_smem(const void* kernel, int bytes);

// Activation storage types: kernels are templated on float or __half and do fp32 math.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// Raw fp16 bits (ggml block scales) to fp32.
__device__ __forceinline__ float half_bits_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
// Byte k (0..3) of a word of int8 values as a float without I2F (a quarter-rate conversion): with
// the word's sign bits flipped first (biased = word ^ 0x80808080), byte q + 128 is the low byte of
// the float 2^23 + q + 128, and subtracting 2^23 + 128 is exact.
__device__ __forceinline__ float s8_biased_to_f32(uint32_t biased, int k) {
  return __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540u + k)) - 8388736.0f;
}

// v as two f16 numbers (hi, lo) with hi + lo within 2^-22 of v relative (2^-25 absolute where lo
// falls below f16's normal range): an fp32 sum fed to an f16 mma without losing 11 bits. |v| must
// stay inside f16's range.
__device__ __forceinline__ __half2 f16_hi_lo(float v) {
  const __half hi = __float2half_rn(v);
  return __halves2half2(hi, __float2half_rn(v - __half2float(hi)));
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread
// gets the result. `red` is 32 floats of shared memory, reused by consecutive calls.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read by a previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < nwarps ? red[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < nwarps ? red[lane] : -INFINITY;
  return warp_max(v);
}

// Whether p is a multiple of `a` bytes (vector loads need 8- or 16-byte alignment).
inline bool is_aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

inline unsigned blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);  // grid-stride loops cover the rest
}

// Device scratch memory ordered on the call's stream (cudaMallocAsync: pooled, so a
// forward pass's temporaries do not hit the driver each time). Freed on destruction.
class Scratch {
 public:
  Scratch(const ops::Context& ctx, size_t bytes);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return p_; }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
  cudaStream_t s_ = nullptr;
};

// Copies a small host array (token ids, positions) to device scratch.
void upload_small(const ops::Context& ctx, const void* host, size_t bytes, Scratch& dst);

// Calls f(float{}) or f(__half{}) for an activation dtype; anything else fails loudly.
template <class F>
void dispatch_act(const char* op, DType t, F&& f) {
  if (t == DType::F32) {
    f(float{});
  } else if (t == DType::F16) {
    f(__half{});
  } else {
    VI_FAIL("op '{}' on cuda: activation dtype {} is not supported (f32 or f16)", op, dtype_name(t));
  }
}

}  // namespace vi::cuda
