// CUDA repacks of matmul weights at load (ops/prepare_matmul_weight.h): Q8_0 -> Q8_0R.
// Q8_0 blocks are 34 bytes, so no value run of a row starts on a 16-byte boundary and
// the GEMV could not issue 16-byte loads; Q8_0R keeps the bytes per row and aligns them.
// Q4_K (144-byte blocks) and F16 are read in their file layouts.
#include "backends/cuda/cuda_util.cuh"
#include "ops/memory.h"
#include "ops/prepare_matmul_weight.h"

namespace vi::cuda {
namespace {

// One thread per group of 8 blocks: n_groups = N * K / 256 (rows are whole groups).
__global__ void repack_q8_0r_kernel(const BlockQ8_0* __restrict__ in, BlockQ8_0R* __restrict__ out,
                                    int64_t n_groups) {
  const int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (g >= n_groups) return;
  const BlockQ8_0* b = in + g * 8;
  BlockQ8_0R r;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    r.d[j] = b[j].d;
#pragma unroll
    for (int l = 0; l < kQK; ++l) r.qs[j * kQK + l] = b[j].qs[l];
  }
  out[g] = r;
}

Tensor prepare_q8_0(ops::Context& ctx, const Tensor& w) {
  const int64_t N = w.dim(0), K = w.dim(1);
  if (K % (8 * kQK) != 0) return w;  // rows would not be whole Q8_0R groups: keep Q8_0
  Tensor out = ops::empty(ctx, DType::Q8_0R, {N, K});
  out.set_name(w.name());
  const int64_t n_groups = N * (K / (8 * kQK));
  if (n_groups > 0) {
    repack_q8_0r_kernel<<<static_cast<unsigned>((n_groups + 255) / 256), 256, 0, stream_of(ctx)>>>(
        w.ptr<BlockQ8_0>(), out.ptr<BlockQ8_0R>(), n_groups);
    VI_CUDA_LAUNCH_CHECK();
  }
  return out;
}

const bool registered = [] {
  ops::prepare_matmul_weight_table().add(Device::CUDA, DType::Q8_0, prepare_q8_0);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
