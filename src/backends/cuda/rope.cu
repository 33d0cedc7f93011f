// CUDA kernel of rope. Angles as HF computes them in fp32 and products and sums rounded
// separately, like PyTorch's q*cos + rotate_half(q)*sin and the CPU kernel (rope.cuh).
// Positions on the device are read in place (the models' batch plan, also inside a recorded
// step); host ones are copied to scratch first.
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/rope.cuh"
#include "ops/rope.h"

namespace vi::cuda {
namespace {

template <class T>
__global__ void rope_kernel(T* x, const int32_t* __restrict__ pos, int64_t rows, int H, int D, int half, float theta,
                            int rot_dim) {
  pdl_wait();
  pdl_trigger();
  const int64_t n = rows * half;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / half;
    const int j = static_cast<int>(i % half);
    float c, s;
    rope_cos_sin(pos[r / H], j, rot_dim, theta, c, s);
    T* h = x + r * D;
    const float2 y = rope_rotate(to_f32(h[j]), to_f32(h[j + half]), c, s);
    h[j] = from_f32<T>(y.x);
    h[j + half] = from_f32<T>(y.y);
  }
}

void rope_cuda(ops::Context& ctx, Tensor& x, const Tensor& pos, int rot_dim, float theta) {
  dispatch_act("rope", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t T_ = x.dim(0), H = x.dim(1), D = x.dim(2);
    if (x.numel() == 0) return;
    const bool on_device = pos.device() == Device::CUDA;
    Scratch dpos(ctx, on_device ? 0 : static_cast<size_t>(T_) * sizeof(int32_t));
    if (!on_device) upload_small(ctx, pos.data(), static_cast<size_t>(T_) * sizeof(int32_t), dpos);
    const int half = rot_dim / 2;
    VI_CUDA_CHECK(pdl_launch(rope_kernel<T>, blocks_for(T_ * H * half, 256), 256, 0, stream_of(ctx), x.ptr<T>(),
                             on_device ? pos.ptr<int32_t>() : dpos.as<int32_t>(), T_ * H, static_cast<int>(H),
                             static_cast<int>(D), half, theta, rot_dim));
  });
}

[[maybe_unused]] const bool registered = [] {
  ops::rope_table().add(Device::CUDA, DType::F32, rope_cuda);
  ops::rope_table().add(Device::CUDA, DType::F16, rope_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
