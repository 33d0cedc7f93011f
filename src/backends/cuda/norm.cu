// CUDA kernels of rms_norm, add_rms_norm, l2_norm and gated_rms_norm. Each output is written
// by the thread that read its input, after the row's reduction, so y may alias x (or z; for
// add_rms_norm, o).
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/norm.cuh"
#include "backends/cuda/pdl.cuh"
#include "ops/norm.h"

namespace vi::cuda {
namespace {

template <class T>
__global__ void rms_norm_kernel(const T* x, const float* __restrict__ w, float eps, float w_offset, T* y, int64_t n) {
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  const T* xr = x + blockIdx.x * n;
  T* yr = y + blockIdx.x * n;
  const float inv = rms_inv(row_sum_sq(xr, n, red), n, eps);
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_f32<T>((to_f32(xr[i]) * inv) * (w[i] + w_offset));
}

// x += o, then y = rms_norm(x). The sum is rounded to T before it is squared or stored,
// as the add kernel rounds it, so y equals rms_norm of what ops::add would have left in x.
// The second loop reads back x[i] that the same thread wrote in the first (no other thread
// touches it), from L1/L2: one DRAM pass over x, o and y.
template <class T>
__global__ void add_rms_norm_kernel(T* x, const T* o, const float* __restrict__ w, float eps, float w_offset, T* y,
                                    int64_t n) {
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  T* xr = x + blockIdx.x * n;
  const T* orow = o + blockIdx.x * n;
  T* yr = y + blockIdx.x * n;
  float ss = 0.0f;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const T s = from_f32<T>(to_f32(xr[i]) + to_f32(orow[i]));
    xr[i] = s;
    const float v = to_f32(s);
    ss += v * v;
  }
  const float inv = 1.0f / sqrtf(block_sum(ss, red) / static_cast<float>(n) + eps);
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_f32<T>((to_f32(xr[i]) * inv) * (w[i] + w_offset));
}

template <class T>
__global__ void l2_norm_kernel(const T* x, float eps, float scale, T* y, int64_t n) {
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  const T* xr = x + blockIdx.x * n;
  T* yr = y + blockIdx.x * n;
  const float f = scale / sqrtf(row_sum_sq(xr, n, red) + eps);  // eps on the sum (HF l2norm)
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_f32<T>(to_f32(xr[i]) * f);
}

template <class T>
__global__ void gated_rms_norm_kernel(const T* x, const T* z, const float* __restrict__ w, float eps, T* y, int64_t n) {
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  const T* xr = x + blockIdx.x * n;
  const T* zr = z + blockIdx.x * n;
  T* yr = y + blockIdx.x * n;
  const float f = 1.0f / sqrtf(row_sum_sq(xr, n, red) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    yr[i] = from_f32<T>(w[i] * (to_f32(xr[i]) * f) * silu_f(to_f32(zr[i])));
}

unsigned row_grid(const char* op, const Tensor& x) {
  VI_CHECK(x.rows() <= INT32_MAX, "op '{}' on cuda: {} rows is too many", op, x.rows());
  return static_cast<unsigned>(x.rows());
}

void rms_norm_cuda(ops::Context& ctx, const Tensor& x, const Tensor& w, float eps, float w_offset, Tensor& y) {
  dispatch_act("rms_norm", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (x.numel() == 0) return;
    VI_CUDA_CHECK(pdl_launch(rms_norm_kernel<T>, row_grid("rms_norm", x), norm_threads(x.cols()), 0, stream_of(ctx),
                             x.ptr<T>(), w.ptr<float>(), eps, w_offset, y.ptr<T>(), x.cols()));
  });
}

void add_rms_norm_cuda(ops::Context& ctx, Tensor& x, const Tensor& o, const Tensor& w, float eps, float w_offset,
                       Tensor& y) {
  dispatch_act("add_rms_norm", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (x.numel() == 0) return;
    VI_CUDA_CHECK(pdl_launch(add_rms_norm_kernel<T>, row_grid("add_rms_norm", x), norm_threads(x.cols()), 0,
                             stream_of(ctx), x.ptr<T>(), o.ptr<T>(), w.ptr<float>(), eps, w_offset, y.ptr<T>(),
                             x.cols()));
  });
}

void l2_norm_cuda(ops::Context& ctx, const Tensor& x, float eps, float scale, Tensor& y) {
  dispatch_act("l2_norm", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (x.numel() == 0) return;
    VI_CUDA_CHECK(pdl_launch(l2_norm_kernel<T>, row_grid("l2_norm", x), norm_threads(x.cols()), 0, stream_of(ctx),
                             x.ptr<T>(), eps, scale, y.ptr<T>(), x.cols()));
  });
}

void gated_rms_norm_cuda(ops::Context& ctx, const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) {
  dispatch_act("gated_rms_norm", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (x.numel() == 0) return;
    VI_CUDA_CHECK(pdl_launch(gated_rms_norm_kernel<T>, row_grid("gated_rms_norm", x), norm_threads(x.cols()), 0,
                             stream_of(ctx), x.ptr<T>(), z.ptr<T>(), w.ptr<float>(), eps, y.ptr<T>(), x.cols()));
  });
}

const bool registered = [] {
  for (DType t : {DType::F32, DType::F16}) {
    ops::rms_norm_table().add(Device::CUDA, t, rms_norm_cuda);
    ops::add_rms_norm_table().add(Device::CUDA, t, add_rms_norm_cuda);
    ops::l2_norm_table().add(Device::CUDA, t, l2_norm_cuda);
    ops::gated_rms_norm_table().add(Device::CUDA, t, gated_rms_norm_cuda);
  }
  return true;
}();

}  // namespace
}  // namespace vi::cuda
