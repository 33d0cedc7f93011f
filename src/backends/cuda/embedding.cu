// CUDA kernel of embedding: one thread per output value, decoding its table entry. Ids on the
// device are read in place; host ones (range-checked by the op entry point) go to scratch.
#include "backends/cuda/embedding.cuh"
#include "backends/cuda/pdl.cuh"
#include "ops/embedding.h"

namespace vi::cuda {
namespace {

template <DType W, class T>
__global__ void embedding_kernel(const uint8_t* table, size_t row_bytes, const int32_t* __restrict__ ids, T* out,
                                 int64_t n_tok, int64_t d) {
  pdl_wait();
  pdl_trigger();
  const int64_t n = n_tok * d;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / d, c = i % d;
    out[i] = from_f32<T>(dq<W>(table + static_cast<size_t>(ids[t]) * row_bytes, c));
  }
}

void embedding_cuda(ops::Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out) {
  const int64_t n_tok = ids.dim(0), d = table.cols();
  if (n_tok == 0 || d == 0) return;
  const bool on_device = ids.device() == Device::CUDA;
  Scratch dids(ctx, on_device ? 0 : static_cast<size_t>(n_tok) * sizeof(int32_t));
  if (!on_device) upload_small(ctx, ids.data(), static_cast<size_t>(n_tok) * sizeof(int32_t), dids);
  const int32_t* id = on_device ? ids.ptr<int32_t>() : dids.as<int32_t>();
  dispatch_act("embedding", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_weight("embedding", table.dtype(), [&](auto w) {
      VI_CUDA_CHECK(pdl_launch(embedding_kernel<decltype(w)::value, T>, blocks_for(n_tok * d, 256), 256, 0,
                               stream_of(ctx), table.ptr<uint8_t>(), table.row_bytes(), id, out.ptr<T>(), n_tok, d));
    });
  });
}

[[maybe_unused]] const bool registered = [] {
  for (DType t : kWeightDTypes) ops::embedding_table().add(Device::CUDA, t, embedding_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
