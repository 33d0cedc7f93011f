// CUDA timestamps for the op profiler (ops/profiler.h): one cudaEvent per mark, recorded on
// the call's stream, so an op's time is what the GPU spent between its two marks —
// including any wait for the host to launch the op's kernels, which is the point: an
// op that starves the GPU shows up as slow.
#include "backends/cuda/cuda_util.cuh"
#include "ops/profiler.h"

namespace vi::cuda {

namespace {

void* event_create() {
  cudaEvent_t e = nullptr;
  VI_CUDA_CHECK(cudaEventCreate(&e));  // default flags: timing enabled
  return e;
}

void event_destroy(void* m) { cudaEventDestroy(static_cast<cudaEvent_t>(m)); }

void event_record(const ops::Context& ctx, void* m) {
  VI_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(m), stream_of(ctx)));
}

double event_elapsed_us(void* from, void* to) {
  float ms = 0;
  VI_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from), static_cast<cudaEvent_t>(to)));
  return 1000.0 * ms;
}

[[maybe_unused]] const bool registered = [] {
  ops::timer_fns(Device::CUDA) = {event_create, event_destroy, event_record, event_elapsed_us};
  return true;
}();

}  // namespace
}  // namespace vi::cuda
