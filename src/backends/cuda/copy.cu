// CUDA copy for every dtype: cudaMemcpyAsync on the call's stream (regions may not overlap
// partially: the op entry point skips src == dst, and models copy between distinct buffers);
// split_cols: one kernel for all parts.
#include "backends/cuda/copy.cuh"

#include <algorithm>

#include "backends/cuda/pdl.cuh"
#include "ops/copy.h"

namespace vi::cuda {
namespace {

void copy_cuda(ops::Context& ctx, const Tensor& src, Tensor& dst) {
  VI_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
}

// The parts of one split_cols call, by value: the kernel needs no upload (graph-safe).
struct SplitParts {
  void* ptr[ops::kSplitMaxParts];
  int64_t col0[ops::kSplitMaxParts + 1];  // first column of each part; col0[n] = C
  int n;
};

// One thread per element of src [R, C]; E: an unsigned type of the element's size.
template <class E>
__global__ void split_cols_kernel(const E* __restrict__ src, SplitParts parts, int64_t R, int64_t C) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < R * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / C, c = i % C;
    int p = 0;
    while (c >= parts.col0[p + 1]) ++p;
    const int64_t w = parts.col0[p + 1] - parts.col0[p];
    static_cast<E*>(parts.ptr[p])[r * w + (c - parts.col0[p])] = src[i];
  }
}

void split_cols_cuda(ops::Context& ctx, const Tensor& src, Tensor* const* dsts, size_t n_parts) {
  SplitParts parts{};
  parts.n = static_cast<int>(n_parts);
  int64_t c = 0;
  for (size_t i = 0; i < n_parts; ++i) {
    parts.ptr[i] = dsts[i]->data();
    parts.col0[i] = c;
    c += dsts[i]->dim(1);
  }
  parts.col0[n_parts] = c;
  const int64_t R = src.dim(0), C = src.dim(1);
  const unsigned blocks = std::min<unsigned>(blocks_for(R * C, 256), 4096);
  switch (dtype_info(src.dtype()).block_bytes) {
    case 1:
      VI_CUDA_CHECK(
          pdl_launch(split_cols_kernel<uint8_t>, blocks, 256, 0, stream_of(ctx), src.ptr<uint8_t>(), parts, R, C));
      break;
    case 2:
      VI_CUDA_CHECK(
          pdl_launch(split_cols_kernel<uint16_t>, blocks, 256, 0, stream_of(ctx), src.ptr<uint16_t>(), parts, R, C));
      break;
    case 4:
      VI_CUDA_CHECK(
          pdl_launch(split_cols_kernel<uint32_t>, blocks, 256, 0, stream_of(ctx), src.ptr<uint32_t>(), parts, R, C));
      break;
    default: VI_FAIL("op 'split_cols' on cuda: no kernel for dtype {}", dtype_name(src.dtype()));
  }
}

const bool registered = [] {
  for (size_t t = 0; t < static_cast<size_t>(DType::kCount); ++t)
    ops::copy_table().add(Device::CUDA, static_cast<DType>(t), copy_cuda);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I8})
    ops::split_cols_table().add(Device::CUDA, t, split_cols_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
