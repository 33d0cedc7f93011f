// ops::prefetch on CUDA: a small kernel that asks L2 for a byte range of a weight ahead of the
// GEMV that reads it.
//
// Why: a decode round alternates bandwidth-bound GEMVs with latency-bound steps (the GDN conv
// and recurrence, decode attention at short contexts) during which DRAM is mostly idle. The
// output projection that follows them (17.7 MB in the 27B model, ~8 µs at the GEMV's rate) fits
// in an H200's 50 MB L2 with room to spare, so its bytes can come in meanwhile and the GEMV
// then reads L2. The weights' loads in the GEMVs are evict-first (__ldcs), so lines they have
// read leave L2 first.
//
// How: sm_90's bulk prefetch (one instruction per 8 KB chunk, issued by the SM's copy engine,
// no data returned to the SM); older code asks line by line (prefetch.global.L2). Either way the
// kernel then waits for its predecessor (PDL) before it exits, so the kernels after it still
// see everything before it: a kernel after this one in the stream waits for this grid, and this
// grid finishes only after the one before it has.
#include <algorithm>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/pdl.cuh"
#include "ops/memory.h"

namespace vi::cuda {
namespace {

constexpr int64_t kBulkChunk = 8192;  // bytes per bulk prefetch instruction
constexpr int64_t kLine = 128;        // bytes per line prefetch
constexpr int kBulkThreads = 32;
constexpr int kLineThreads = 256;

// p: 16-byte aligned; bytes: a multiple of 16. Reads no value (allowed before pdl_wait on any
// address, pdl.cuh), so all of it overlaps the previous kernel's tail.
__global__ void __launch_bounds__(kLineThreads) prefetch_l2_kernel(const char* p, int64_t bytes) {
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nth = int64_t(gridDim.x) * blockDim.x;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  for (int64_t o = tid * kBulkChunk; o < bytes; o += nth * kBulkChunk) {
    const uint32_t n = static_cast<uint32_t>(min(kBulkChunk, bytes - o));
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + o), "r"(n) : "memory");
  }
#else
  for (int64_t o = tid * kLine; o < bytes; o += nth * kLine) prefetch_l2(p + o);
#endif
  pdl_trigger();
  pdl_wait();
}

void cuda_prefetch(ops::Context& ctx, const Tensor& t, int64_t begin, int64_t end) {
  // Whole 16-byte pieces inside [begin, end): a hint may leave out up to 15 bytes at each end.
  const auto base = reinterpret_cast<uintptr_t>(t.data());
  const uintptr_t lo = (base + begin + 15) & ~uintptr_t{15};
  const uintptr_t hi = (base + end) & ~uintptr_t{15};
  if (hi <= lo) return;
  const int64_t bytes = static_cast<int64_t>(hi - lo);
  const DeviceInfo& dev = current_device();
  const bool bulk = dev.code_cc >= 90;
  const int threads = bulk ? kBulkThreads : kLineThreads;
  const int64_t pieces = bulk ? (bytes + kBulkChunk - 1) / kBulkChunk : (bytes + kLine - 1) / kLine;
  // Spread over many SMs: each SM's share of the requests is issued by that SM.
  const int64_t blocks = std::min<int64_t>((pieces + threads - 1) / threads, bulk ? dev.sm_count : 4 * dev.sm_count);
  VI_CUDA_CHECK(pdl_launch(prefetch_l2_kernel, dim3(static_cast<unsigned>(std::max<int64_t>(blocks, 1))),
                           dim3(threads), 0, stream_of(ctx), reinterpret_cast<const char*>(lo), bytes));
}

int64_t cuda_cache_bytes(ops::Context&) { return static_cast<int64_t>(current_device().l2_bytes); }

const bool registered = [] {
  ops::MemoryFns& f = ops::memory_fns(Device::CUDA);
  f.prefetch = cuda_prefetch;
  f.cache_bytes = cuda_cache_bytes;
  return true;
}();

}  // namespace
}  // namespace vi::cuda
