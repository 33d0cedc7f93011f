// What the CUDA micro-benchmarks share: a counter-based hash for filling buffers on the
// device (and the fill of K/V-like tensors), the median, comma lists, the copy bandwidth
// (hwcheck's own measurement, so every "% of copy" means the same thing), the time of one call
// between CUDA events, and the time per call of calls replayed from a captured graph.
#pragma once

#include <cuda_runtime.h>

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/hwinfo.h"
#include "core/tensor.h"

namespace vi::benchutil {

__device__ __forceinline__ uint32_t mix(uint64_t i, uint32_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

// Values in [-1, 1) for f16/f32, [-127, 127] for i8, scales in [0.005, 0.01).
__global__ void fill_kernel(void* p, size_t n, DType t, uint32_t seed, bool is_scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float u = (mix(i, seed) >> 8) * (1.0f / 16777216.0f);
    if (t == DType::I8) static_cast<int8_t*>(p)[i] = static_cast<int8_t>(static_cast<int>(u * 255.0f) - 127);
    else if (t == DType::F16) static_cast<__half*>(p)[i] = __float2half(2.0f * u - 1.0f);
    else static_cast<float*>(p)[i] = is_scale ? 0.005f + 0.005f * u : 2.0f * u - 1.0f;
  }
}

inline void fill_tensor(Tensor& t, uint32_t seed, bool is_scale = false) {
  fill_kernel<<<1024, 256>>>(t.data(), static_cast<size_t>(t.numel()), t.dtype(), seed, is_scale);
  VI_CUDA_LAUNCH_CHECK();
  VI_CUDA_CHECK(cudaDeviceSynchronize());
}

// "1,4,8" -> {1, 4, 8}.
inline std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    out.push_back(std::stoll(s.substr(i, j - i)));
    i = j + 1;
  }
  return out;
}

inline float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device-to-device copy of 1 GiB, bytes read + written over time, median of 9 (hwcheck's).
inline double copy_bandwidth() {
  int dev = 0;
  VI_CUDA_CHECK(cudaGetDevice(&dev));
  return vi::cuda::measure_copy_gbs(dev, size_t(1) << 30, 9).median;
}

// Median milliseconds of call() over `reps` calls, each timed alone between CUDA events on `s`,
// after `warmups` untimed calls. Throws vi::Error on a failed launch.
template <class Call>
float event_ms(cudaStream_t s, int warmups, int reps, Call&& call) {
  for (int i = 0; i < warmups; ++i) call();
  VI_CUDA_CHECK(cudaGetLastError());
  cudaEvent_t e0, e1;
  VI_CUDA_CHECK(cudaEventCreate(&e0));
  VI_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    VI_CUDA_CHECK(cudaEventRecord(e0, s));
    call();
    VI_CUDA_CHECK(cudaEventRecord(e1, s));
    VI_CUDA_CHECK(cudaEventSynchronize(e1));
    VI_CUDA_CHECK(cudaGetLastError());
    float m = 0;
    VI_CUDA_CHECK(cudaEventElapsedTime(&m, e0, e1));
    ms.push_back(m);
  }
  VI_CUDA_CHECK(cudaEventDestroy(e0));
  VI_CUDA_CHECK(cudaEventDestroy(e1));
  return median(ms);
}

// launch(i) for i in [0, calls) captured once into a graph; after one warm-up replay, `reps`
// timed replays: µs per call of each. Throws vi::Error if the capture fails.
template <class Launch>
std::vector<float> graph_us_per_call(cudaStream_t s, int calls, int reps, cudaStreamCaptureMode mode,
                                     Launch&& launch) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  VI_CUDA_CHECK(cudaStreamBeginCapture(s, mode));
  for (int i = 0; i < calls; ++i) launch(i);
  VI_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  VI_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0));  // also CUDA 11.8's signature
  cudaEvent_t e0, e1;
  VI_CUDA_CHECK(cudaEventCreate(&e0));
  VI_CUDA_CHECK(cudaEventCreate(&e1));
  VI_CUDA_CHECK(cudaGraphLaunch(exec, s));  // warm-up
  std::vector<float> us;
  for (int r = 0; r < reps; ++r) {
    VI_CUDA_CHECK(cudaEventRecord(e0, s));
    VI_CUDA_CHECK(cudaGraphLaunch(exec, s));
    VI_CUDA_CHECK(cudaEventRecord(e1, s));
    VI_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    VI_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    us.push_back(ms * 1e3f / calls);
  }
  VI_CUDA_CHECK(cudaEventDestroy(e0));
  VI_CUDA_CHECK(cudaEventDestroy(e1));
  VI_CUDA_CHECK(cudaGraphExecDestroy(exec));
  VI_CUDA_CHECK(cudaGraphDestroy(graph));
  return us;
}

}  // namespace vi::benchutil
