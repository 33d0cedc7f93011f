// CUDA copy for every dtype: cudaMemcpyAsync on the call's stream (regions may not overlap
// partially: the op entry point skips src == dst, and models copy between distinct buffers).
#include "backends/cuda/copy.cuh"
#include "ops/copy.h"

namespace vi::cuda {
namespace {

void copy_cuda(ops::Context& ctx, const Tensor& src, Tensor& dst) {
  VI_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
}

const bool registered = [] {
  for (size_t t = 0; t < static_cast<size_t>(DType::kCount); ++t)
    ops::copy_table().add(Device::CUDA, static_cast<DType>(t), copy_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
