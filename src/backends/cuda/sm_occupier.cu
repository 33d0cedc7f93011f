// SmOccupier: see sm_occupier.h.
#include "backends/cuda/sm_occupier.h"

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/sm_id.cuh"

namespace vi::cuda {
namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One block an SM (its shared memory keeps any other block off). slots (mapped host memory):
// [0] the host's release, [1 + b] block b's SM + 1 once it runs, then -1 if its guard ended it.
__global__ void occupy_kernel(volatile int* slots, uint64_t guard_ns) {
  if (threadIdx.x != 0) return;
  slots[1 + blockIdx.x] = sm_id() + 1;
  __threadfence_system();
  const uint64_t t0 = global_ns();
  while (slots[0] == 0) {
    if (global_ns() - t0 > guard_ns) {
      slots[1 + blockIdx.x] = -1;
      __threadfence_system();
      return;
    }
    __nanosleep(2000);
  }
}

__global__ void probe_sm_kernel(int* sms) {
  if (threadIdx.x == 0) sms[blockIdx.x] = sm_id();
}

constexpr int kProbeBlocksPerSm = 16;

}  // namespace

struct SmOccupier::Impl {
  int n = 0, all_sms = 0;
  size_t smem = 0;  // a block's opt-in shared memory: the most one block may take
  uint64_t guard_ns = 0;
  bool holding = false;
  cudaStream_t stream = nullptr;
  volatile int* host = nullptr;  // mapped: see occupy_kernel
  int* dev = nullptr;
  int* probe = nullptr;  // [kProbeBlocksPerSm x all_sms]
};

void set_sm_occupier_environment() {
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
}

bool SmOccupier::supported() {
  cudaDeviceProp p{};
  VI_CUDA_CHECK(cudaGetDeviceProperties(&p, current_device().index));
  return p.reservedSharedMemPerBlock > 0 &&
         p.sharedMemPerBlockOptin + p.reservedSharedMemPerBlock >= p.sharedMemPerMultiprocessor;
}

SmOccupier::SmOccupier(int n, double guard_s) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.n = n;
  if (n <= 0) return;
  const DeviceInfo& d = current_device();
  cudaDeviceProp p{};
  VI_CUDA_CHECK(cudaGetDeviceProperties(&p, d.index));
  VI_CHECK(n < p.multiProcessorCount, "SmOccupier: {} SMs held of {} leaves none", n, p.multiProcessorCount);
  VI_CHECK(supported(), "SmOccupier: on {} a block cannot keep others off its SM (no shared memory reserved per block)",
           p.name);
  m.all_sms = p.multiProcessorCount;
  m.smem = p.sharedMemPerBlockOptin;
  m.guard_ns = static_cast<uint64_t>(guard_s * 1e9);
  VI_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  void* h = nullptr;
  VI_CUDA_CHECK(cudaHostAlloc(&h, sizeof(int) * (1 + n), cudaHostAllocMapped));
  m.host = static_cast<volatile int*>(h);
  VI_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&m.dev), h, 0));
  VI_CUDA_CHECK(cudaFuncSetAttribute(occupy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(m.smem)));
  VI_CUDA_CHECK(cudaFuncSetAttribute(occupy_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  VI_CUDA_CHECK(cudaMalloc(&m.probe, sizeof(int) * kProbeBlocksPerSm * m.all_sms));
  // Both kernels loaded now, should the module loading be lazy after all (see
  // set_sm_occupier_environment): the probe's first launch comes while SMs are held.
  cudaFuncAttributes fa{};
  VI_CUDA_CHECK(cudaFuncGetAttributes(&fa, probe_sm_kernel));
  VI_CUDA_CHECK(cudaFuncGetAttributes(&fa, occupy_kernel));
  set_usable_sm_count(m.all_sms - n);
}

SmOccupier::~SmOccupier() {
  Impl& m = *impl_;
  if (m.n <= 0) return;
  if (m.holding) {  // no throw here: let them go and wait
    m.host[0] = 1;
    cudaStreamSynchronize(m.stream);
  }
  set_usable_sm_count(0);
  cudaFree(m.probe);
  cudaFreeHost(const_cast<int*>(m.host));
  cudaStreamDestroy(m.stream);
}

int SmOccupier::held() const { return impl_->n; }
int SmOccupier::usable_sms() const { return impl_->n > 0 ? impl_->all_sms - impl_->n : current_device().sm_count; }

std::vector<int> SmOccupier::held_sm_ids() const {
  const Impl& m = *impl_;
  std::vector<int> ids;
  if (!m.holding) return ids;
  for (int i = 0; i < m.n; ++i) ids.push_back(m.host[1 + i] - 1);
  return ids;
}

void SmOccupier::hold(void* work_stream) {
  Impl& m = *impl_;
  if (m.n <= 0 || m.holding) return;
  for (int i = 0; i <= m.n; ++i) m.host[i] = 0;
  occupy_kernel<<<m.n, 32, m.smem, m.stream>>>(reinterpret_cast<volatile int*>(m.dev), m.guard_ns);
  VI_CUDA_LAUNCH_CHECK();
  m.holding = true;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < m.n;) {
    if (m.host[1 + i] != 0) {
      ++i;
      continue;
    }
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
      release();
      VI_FAIL("SmOccupier: only {} of {} holding blocks started within 10 s", i, m.n);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  std::vector<char> held(static_cast<size_t>(m.all_sms), 0);
  for (int i = 0; i < m.n; ++i) {
    const int sm = m.host[1 + i] - 1;
    if (sm < 0 || sm >= m.all_sms || held[static_cast<size_t>(sm)]) {
      release();
      VI_FAIL("SmOccupier: holding block {} on SM {}, which another holds or does not exist", i, sm);
    }
    held[static_cast<size_t>(sm)] = 1;
  }
  // The probe (16 blocks an SM, enough to reach every free SM) runs on the work's own stream: it
  // also shows that work there is not held up until the release (set_sm_occupier_environment).
  cudaStream_t ws = static_cast<cudaStream_t>(work_stream);
  const int probes = kProbeBlocksPerSm * m.all_sms;
  std::vector<int> ran(static_cast<size_t>(probes));
  cudaEvent_t done;
  VI_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  probe_sm_kernel<<<probes, 32, 0, ws>>>(m.probe);
  VI_CUDA_LAUNCH_CHECK();
  VI_CUDA_CHECK(cudaEventRecord(done, ws));
  const auto t1 = std::chrono::steady_clock::now();
  cudaError_t q;
  while ((q = cudaEventQuery(done)) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() - t1 > std::chrono::seconds(2)) {
      release();
      VI_CUDA_CHECK(cudaEventSynchronize(done));
      cudaEventDestroy(done);
      VI_FAIL("SmOccupier: a probe kernel on the work's stream did not run within 2 s beside the holding blocks "
              "(a kernel loaded at its first launch, or a hardware queue shared with them): call "
              "set_sm_occupier_environment() before the first use of CUDA, or set CUDA_MODULE_LOADING=EAGER and "
              "CUDA_DEVICE_MAX_CONNECTIONS=32");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  cudaEventDestroy(done);
  VI_CUDA_CHECK(q);
  VI_CUDA_CHECK(cudaMemcpy(ran.data(), m.probe, sizeof(int) * probes, cudaMemcpyDeviceToHost));
  for (int sm : ran) {
    if (sm >= 0 && sm < m.all_sms && held[static_cast<size_t>(sm)]) {
      release();
      VI_FAIL("SmOccupier: a probe block ran on held SM {}: the holding blocks do not keep others off", sm);
    }
  }
}

void SmOccupier::release() {
  Impl& m = *impl_;
  if (!m.holding) return;
  m.host[0] = 1;
  VI_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  m.holding = false;
  for (int i = 0; i < m.n; ++i)
    VI_CHECK(m.host[1 + i] > 0, "SmOccupier: holding block {} ended by its guard ({:.0f} s) before the release: "
             "the work timed in between did not all run with the SMs held", i, m.guard_ns / 1e9);
}

}  // namespace vi::cuda
