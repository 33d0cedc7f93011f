// CUDA kernel of add_bias: grid-stride over the elements, the bias column by modulo.
#include "backends/cuda/add_bias.cuh"
#include "backends/cuda/pdl.cuh"
#include "ops/bias.h"

namespace vi::cuda {
namespace {

template <class T>
__global__ void add_bias_kernel(const T* x, const float* __restrict__ bias, T* out, int64_t n, int64_t cols) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f32<T>(to_f32(x[i]) + bias[i % cols]);
}

void add_bias_cuda(ops::Context& ctx, const Tensor& x, const Tensor& bias, Tensor& out) {
  VI_CHECK(bias.device() == Device::CUDA, "op 'add_bias' on cuda: bias {} must be on the GPU", bias.shape_str());
  dispatch_act("add_bias", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = x.numel();
    if (n == 0) return;
    VI_CUDA_CHECK(pdl_launch(add_bias_kernel<T>, blocks_for(n, 256), 256, 0, stream_of(ctx), x.ptr<T>(),
                             bias.ptr<float>(), out.ptr<T>(), n, x.cols()));
  });
}

[[maybe_unused]] const bool registered = [] {
  ops::add_bias_table().add(Device::CUDA, DType::F32, add_bias_cuda);
  ops::add_bias_table().add(Device::CUDA, DType::F16, add_bias_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
