// CUDA quantizing scatter into an int8 KV pool (ops/kv_quant.h). One block per (row, kv
// head): the head vector goes to shared memory in fp32, is rotated for K, and is written
// as int8 with scale max|x| / 127 — the CPU kernel's arithmetic, so both round alike
// except where the rotation's summation order moves a value across a rounding boundary.
#include "backends/cuda/kv_quant.cuh"
#include "backends/cuda/pdl.cuh"
#include "ops/kv_quant.h"

namespace vi::cuda {
namespace {

constexpr int kThreads = 128;

template <class TX>
__global__ void __launch_bounds__(kThreads) kv_write_i8_kernel(const TX* __restrict__ x, int8_t* __restrict__ pool,
                                                               float* __restrict__ scale,
                                                               const int32_t* __restrict__ rows, int Hkv, int D,
                                                               bool rotate) {
  extern __shared__ float v[];  // [D]
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  const int t = blockIdx.x, h = blockIdx.y;
  const TX* src = x + (int64_t(t) * Hkv + h) * D;
  for (int d = threadIdx.x; d < D; d += kThreads) v[d] = to_f32(src[d]);
  __syncthreads();
  if (rotate) hadamard_rows_smem(v, 1, D, D);
  float amax = 0.0f;
  for (int d = threadIdx.x; d < D; d += kThreads) amax = fmaxf(amax, fabsf(v[d]));
  amax = block_max(amax, red);
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  const int64_t r = rows[t];
  int8_t* dst = pool + (r * Hkv + h) * D;
  for (int d = threadIdx.x; d < D; d += kThreads)
    dst[d] = static_cast<int8_t>(fminf(fmaxf(rintf(v[d] * inv), -127.0f), 127.0f));
  if (threadIdx.x == 0) scale[r * Hkv + h] = amax / 127.0f;
}

// rows: [T] i32 on the device (the op entry point keeps host ones off this path).
void kv_write_i8_cuda(ops::Context& ctx, const Tensor& x, Tensor& pool, Tensor& scale, const Tensor& rows,
                      bool rotate) {
  const int64_t T = x.dim(0), Hkv = pool.dim(1), D = pool.dim(2);
  dispatch_act("paged_kv_write_i8", x.dtype(), [&](auto tag) {
    using TX = decltype(tag);
    VI_CUDA_CHECK(pdl_launch(kv_write_i8_kernel<TX>, dim3(static_cast<unsigned>(T), static_cast<unsigned>(Hkv)),
                             kThreads, static_cast<size_t>(D) * sizeof(float), stream_of(ctx), x.ptr<TX>(),
                             pool.ptr<int8_t>(), scale.ptr<float>(), rows.ptr<int32_t>(), static_cast<int>(Hkv),
                             static_cast<int>(D), rotate));
  });
}

[[maybe_unused]] const bool registered = [] {
  ops::paged_kv_write_i8_table().add(Device::CUDA, DType::F32, kv_write_i8_cuda);
  ops::paged_kv_write_i8_table().add(Device::CUDA, DType::F16, kv_write_i8_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
