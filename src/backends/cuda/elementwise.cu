// CUDA kernels of add, swiglu, sigmoid_mul (grid-stride, one element per thread step),
// swiglu_halves (of a stacked gate|up row) and softmax (one block per row, fp32 max/sum
// reductions, exact two-pass like the CPU).
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/pdl.cuh"
#include "ops/elementwise.h"

namespace vi::cuda {
namespace {

enum class Bin { kAdd, kSwiglu, kSigmoidMul };

template <Bin op, class T>
__global__ void binary_kernel(const T* __restrict__ a, const T* __restrict__ b, T* out, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float x = to_f32(a[i]), y = to_f32(b[i]);
    float r;
    if constexpr (op == Bin::kAdd) r = x + y;
    else if constexpr (op == Bin::kSwiglu) r = silu_f(x) * y;
    else r = x * sigmoid_f(y);
    out[i] = from_f32<T>(r);
  }
}

template <Bin op>
void binary(const char* name, ops::Context& ctx, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_act(name, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = a.numel();
    if (n == 0) return;
    VI_CUDA_CHECK(pdl_launch(binary_kernel<op, T>, blocks_for(n, 256), 256, 0, stream_of(ctx), a.ptr<T>(), b.ptr<T>(),
                             out.ptr<T>(), n));
  });
}

void add_cuda(ops::Context& ctx, const Tensor& a, const Tensor& b, Tensor& out) { binary<Bin::kAdd>("add", ctx, a, b, out); }
void swiglu_cuda(ops::Context& ctx, const Tensor& a, const Tensor& b, Tensor& out) {
  binary<Bin::kSwiglu>("swiglu", ctx, a, b, out);
}

// out[r, j] = silu(gu[r, j]) * gu[r, F + j]: the swiglu kernel's arithmetic on the two halves
// of a row. x of the grid walks the columns, y the rows (grid-stride past 65535), so no
// thread divides an index by F.
template <class T>
__global__ void swiglu_halves_kernel(const T* __restrict__ gu, T* __restrict__ out, int64_t rows, int64_t F) {
  pdl_wait();
  pdl_trigger();
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= F) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* g = gu + r * 2 * F;
    out[r * F + j] = from_f32<T>(silu_f(to_f32(g[j])) * to_f32(g[F + j]));
  }
}

void swiglu_halves_cuda(ops::Context& ctx, const Tensor& gu, Tensor& out) {
  dispatch_act("swiglu_halves", gu.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = out.rows(), F = out.cols();
    if (rows == 0 || F == 0) return;
    const int64_t col_blocks = (F + 255) / 256;
    VI_CHECK(col_blocks <= INT32_MAX, "op 'swiglu_halves' on cuda: rows of {} are too wide", F);
    const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(rows < 65535 ? rows : 65535));
    VI_CUDA_CHECK(
        pdl_launch(swiglu_halves_kernel<T>, grid, 256, 0, stream_of(ctx), gu.ptr<T>(), out.ptr<T>(), rows, F));
  });
}

// One block per row; out may alias x (each element is read before it is written).
template <class T>
__global__ void softmax_kernel(const T* x, T* out, int64_t n) {
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  const T* xr = x + blockIdx.x * n;
  T* yr = out + blockIdx.x * n;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, to_f32(xr[i]));
  mx = block_max(mx, red);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += expf(to_f32(xr[i]) - mx);
  sum = block_sum(sum, red);
  const float inv = 1.0f / sum;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_f32<T>(expf(to_f32(xr[i]) - mx) * inv);
}

void softmax_cuda(ops::Context& ctx, const Tensor& x, Tensor& out) {
  dispatch_act("softmax", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (x.numel() == 0) return;
    VI_CHECK(x.rows() <= INT32_MAX, "op 'softmax' on cuda: {} rows is too many", x.rows());
    VI_CUDA_CHECK(pdl_launch(softmax_kernel<T>, static_cast<unsigned>(x.rows()), 256, 0, stream_of(ctx), x.ptr<T>(),
                             out.ptr<T>(), x.cols()));
  });
}

}  // namespace

void sigmoid_mul_cuda(ops::Context& ctx, const Tensor& a, const Tensor& b, Tensor& out) {
  binary<Bin::kSigmoidMul>("sigmoid_mul", ctx, a, b, out);
}

namespace {
[[maybe_unused]] const bool registered = [] {
  for (DType t : {DType::F32, DType::F16}) {
    ops::add_table().add(Device::CUDA, t, add_cuda);
    ops::swiglu_table().add(Device::CUDA, t, swiglu_cuda);
    ops::swiglu_halves_table().add(Device::CUDA, t, swiglu_halves_cuda);
    ops::sigmoid_mul_table().add(Device::CUDA, t, sigmoid_mul_cuda);
    ops::softmax_table().add(Device::CUDA, t, softmax_cuda);
  }
  return true;
}();

}  // namespace
}  // namespace vi::cuda
