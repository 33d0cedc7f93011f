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

// Up to kBatchPairs copies of one copy_batch launch, by value (graph-safe, no upload): 1.5 KB
// of kernel parameters, inside the 4 KB every toolkit allows.
constexpr int kBatchPairs = 64;
struct BatchPairs {
  const uint8_t* src[kBatchPairs];
  uint8_t* dst[kBatchPairs];
  int64_t bytes[kBatchPairs];
};

// Grid (blocks, pairs): pair blockIdx.y copied by its blocks, 16 bytes a thread where both
// ends are 16-byte aligned (device allocations and the state tensors are), bytes otherwise.
__global__ void copy_batch_kernel(BatchPairs p) {
  pdl_wait();
  pdl_trigger();
  const int i = blockIdx.y;
  const uint8_t* s = p.src[i];
  uint8_t* d = p.dst[i];
  const int64_t n = p.bytes[i], stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t t0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  int64_t done = 0;
  if (((reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(d)) & 15) == 0) {
    const int64_t n16 = n / 16;
    for (int64_t k = t0; k < n16; k += stride)
      reinterpret_cast<uint4*>(d)[k] = reinterpret_cast<const uint4*>(s)[k];
    done = n16 * 16;
  }
  for (int64_t k = done + t0; k < n; k += stride) d[k] = s[k];
}

void copy_batch_cuda(ops::Context& ctx, const Tensor* srcs, const Tensor* dsts, size_t n) {
  for (size_t at = 0; at < n; at += kBatchPairs) {
    BatchPairs p{};
    int m = 0;
    int64_t most = 0;
    for (size_t i = at; i < std::min(n, at + kBatchPairs); ++i) {
      if (srcs[i].data() == dsts[i].data() || srcs[i].nbytes() == 0) continue;
      p.src[m] = static_cast<const uint8_t*>(srcs[i].data());
      p.dst[m] = static_cast<uint8_t*>(dsts[i].data());
      p.bytes[m] = static_cast<int64_t>(srcs[i].nbytes());
      most = std::max(most, p.bytes[m]);
      ++m;
    }
    if (m == 0) continue;
    // Enough blocks for the largest pair at 16 bytes a thread, at most 64 a pair.
    const unsigned bx = static_cast<unsigned>(std::clamp<int64_t>((most / 16 + 255) / 256, 1, 64));
    VI_CUDA_CHECK(pdl_launch(copy_batch_kernel, dim3(bx, static_cast<unsigned>(m)), 256, 0, stream_of(ctx), p));
  }
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

[[maybe_unused]] const bool registered = [] {
  for (size_t t = 0; t < static_cast<size_t>(DType::kCount); ++t)
    ops::copy_table().add(Device::CUDA, static_cast<DType>(t), copy_cuda);
  for (size_t t = 0; t < static_cast<size_t>(DType::kCount); ++t)
    ops::copy_batch_table().add(Device::CUDA, static_cast<DType>(t), copy_batch_cuda);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I8})
    ops::split_cols_table().add(Device::CUDA, t, split_cols_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
