// CUDA memory functions registered as ops::memory_fns(Device::CUDA). Allocations are
// stream-ordered (cudaMallocAsync from the device's pool, which keeps freed memory for
// reuse), so the per-forward activation tensors of the models cost no driver round trip.
#include <memory>

#include "backends/cuda/device.cuh"
#include "backends/cuda/memory.cuh"
#include "ops/device_memory.h"
#include "ops/memory.h"

namespace vi::cuda {

namespace {

void keep_pool_memory() {
  // The default pool would hand freed memory back to the driver at every synchronisation.
  int dev = current_device().index;
  cudaMemPool_t pool;
  VI_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  uint64_t threshold = UINT64_MAX;
  VI_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
}

}  // namespace

Tensor device_empty(ops::Context& ctx, DType dtype, const std::vector<int64_t>& shape) {
  static bool pool_ready = (keep_pool_memory(), true);
  (void)pool_ready;
  Tensor meta = Tensor::view(dtype, shape, nullptr, nullptr, Device::CUDA);  // size only
  const size_t bytes = meta.nbytes();
  cudaStream_t s = stream_of(ctx);
  void* p = nullptr;
  cudaError_t err = cudaMallocAsync(&p, bytes ? bytes : 16, s);
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    VI_FAIL(
        "out of GPU memory: a {} {} tensor needs {:.1f} MiB but {} has {:.1f} MiB free of {:.1f} MiB. "
        "The model's weights and KV cache do not fit: use a smaller --ctx-size or a more quantized model",
        meta.shape_str(), dtype_name(dtype), bytes / 1048576.0, current_device().name, free_b / 1048576.0,
        total_b / 1048576.0);
  }
  std::shared_ptr<void> owner(p, [s](void* q) { cudaFreeAsync(q, s); });
  return Tensor::view(dtype, shape, p, std::move(owner), Device::CUDA);
}

namespace {

Tensor cuda_upload(ops::Context& ctx, const Tensor& host) {
  Tensor t = device_empty(ctx, host.dtype(), host.shape());
  t.set_name(host.name());
  if (host.nbytes())
    VI_CUDA_CHECK(cudaMemcpyAsync(t.data(), host.data(), host.nbytes(), cudaMemcpyHostToDevice, stream_of(ctx)));
  return t;
}

// Pageable source: the runtime stages it before returning, so the caller may reuse it at once.
void cuda_upload_into(ops::Context& ctx, const void* host, size_t bytes, Tensor& dst) {
  VI_CUDA_CHECK(cudaMemcpyAsync(dst.data(), host, bytes, cudaMemcpyHostToDevice, stream_of(ctx)));
}

void cuda_zero(ops::Context& ctx, Tensor& t) {
  VI_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, t.nbytes(), stream_of(ctx)));
}

Tensor cuda_download(ops::Context& ctx, const Tensor& t) {
  Tensor host = Tensor::empty(t.dtype(), t.shape());
  host.set_name(t.name());
  if (t.nbytes()) {
    VI_CUDA_CHECK(cudaMemcpyAsync(host.data(), t.data(), t.nbytes(), cudaMemcpyDeviceToHost, stream_of(ctx)));
    VI_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  }
  return host;
}

void cuda_synchronize(ops::Context& ctx) { VI_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx))); }

void* cuda_new_stream(ops::Context&) {
  // Once streams of their own queue work side by side (the ranks of a split model), the pool must
  // not make one stream wait for another to reuse memory the other freed: rank 0's allocation
  // could then wait behind rank 1's collective, which waits for rank 0's — a deadlock on the GPU.
  int dev = current_device().index;
  cudaMemPool_t pool;
  VI_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  int no = 0;
  VI_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no));
  cudaStream_t s = nullptr;
  VI_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void cuda_stream_wait(ops::Context& waiter, ops::Context& signaler) {
  // An event per wait, destroyed at once: the driver keeps it until the wait has passed.
  cudaEvent_t e = nullptr;
  VI_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  VI_CUDA_CHECK(cudaEventRecord(e, stream_of(signaler)));
  VI_CUDA_CHECK(cudaStreamWaitEvent(stream_of(waiter), e, 0));
  VI_CUDA_CHECK(cudaEventDestroy(e));
}

ops::DeviceMemory cuda_device_memory(ops::Context&) {
  ops::DeviceMemory m;
  VI_CUDA_CHECK(cudaMemGetInfo(&m.free, &m.total));
  m.name = current_device().name;
  return m;
}

[[maybe_unused]] const bool registered = [] {
  ops::device_memory_fn(Device::CUDA) = cuda_device_memory;
  ops::MemoryFns& f = ops::memory_fns(Device::CUDA);
  f.empty = device_empty;
  f.upload = cuda_upload;
  f.upload_into = cuda_upload_into;
  f.zero = cuda_zero;
  f.download = cuda_download;
  f.synchronize = cuda_synchronize;
  f.new_stream = cuda_new_stream;
  f.stream_wait = cuda_stream_wait;
  return true;
}();

}  // namespace
}  // namespace vi::cuda
