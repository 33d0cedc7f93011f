// CUDA kv_scatter (ops/paged_attention.h): new K/V rows of a float pool go to the pool rows the
// batch plan computed, read from device memory, so the write is one launch with no host
// round trip and replays inside a recorded decode step. One block per row, 16-byte copies
// where the row allows them.
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/pdl.cuh"
#include "ops/paged_attention.h"

namespace vi::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) kv_scatter_kernel(const uint8_t* __restrict__ x, uint8_t* __restrict__ pool,
                                                              const int32_t* __restrict__ rows, size_t row_bytes,
                                                              bool vec) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const uint8_t* src = x + t * row_bytes;
  uint8_t* dst = pool + int64_t(rows[t]) * row_bytes;
  if (vec) {
    for (size_t i = threadIdx.x; i < row_bytes / 16; i += kThreads)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else {
    for (size_t i = threadIdx.x; i < row_bytes; i += kThreads) dst[i] = src[i];
  }
}

// rows: [T] i32 on the device (check_same_device in the entry point).
void kv_scatter_cuda(ops::Context& ctx, const Tensor& x, Tensor& pool, const Tensor& rows) {
  const size_t rb = x.row_bytes();
  const bool vec = rb % 16 == 0 && reinterpret_cast<uintptr_t>(x.data()) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(pool.data()) % 16 == 0;
  VI_CUDA_CHECK(pdl_launch(kv_scatter_kernel, static_cast<unsigned>(x.dim(0)), kThreads, 0, stream_of(ctx),
                           x.ptr<uint8_t>(), pool.ptr<uint8_t>(), rows.ptr<int32_t>(), rb, vec));
}

[[maybe_unused]] const bool registered = [] {
  ops::kv_scatter_table().add(Device::CUDA, DType::F32, kv_scatter_cuda);
  ops::kv_scatter_table().add(Device::CUDA, DType::F16, kv_scatter_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
