// Device facts and measured ceilings for hwcheck/bench (declared in hwinfo.h).
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/hwinfo.h"

namespace vi::cuda {

namespace {

// A device buffer freed on scope exit.
struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) {
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      VI_FAIL("hwcheck: cannot allocate {:.0f} MiB on the GPU ({})", bytes / 1048576.0, cudaGetErrorString(err));
    }
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

// Random fp16 values in [-1, 1) from a hash of the index: never zeros (zeros can run
// faster than real data and hide unwritten outputs).
__global__ void fill_random_half(__half* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2half_rn(static_cast<float>(h & 0xffff) / 32768.0f - 1.0f);
  }
}

void fill_random(void* p, size_t bytes, uint32_t seed, cudaStream_t s) {
  fill_random_half<<<1024, 256, 0, s>>>(static_cast<__half*>(p), bytes / sizeof(__half), seed);
  VI_CUDA_LAUNCH_CHECK();
}

Measured summarize(std::vector<double> v) {
  Measured m;
  if (v.empty()) return m;
  std::sort(v.begin(), v.end());
  m.reps = static_cast<int>(v.size());
  m.min = v.front();
  m.max = v.back();
  m.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return m;
}

class Events {
 public:
  Events() {
    VI_CUDA_CHECK(cudaEventCreate(&a_));
    VI_CUDA_CHECK(cudaEventCreate(&b_));
  }
  ~Events() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  void start(cudaStream_t s) { VI_CUDA_CHECK(cudaEventRecord(a_, s)); }
  double stop_ms(cudaStream_t s) {
    VI_CUDA_CHECK(cudaEventRecord(b_, s));
    VI_CUDA_CHECK(cudaEventSynchronize(b_));
    float ms = 0;
    VI_CUDA_CHECK(cudaEventElapsedTime(&ms, a_, b_));
    return ms;
  }

 private:
  cudaEvent_t a_ = nullptr, b_ = nullptr;
};

double host_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

GpuFacts gpu_facts(int device) {
  DeviceGuard g(device);
  GpuFacts f;
  f.index = device;
  cudaDeviceProp p{};
  VI_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  f.name = p.name;
  f.cc = 10 * p.major + p.minor;
  f.sm_count = p.multiProcessorCount;
  f.total_mem = p.totalGlobalMem;
  f.l2_bytes = static_cast<size_t>(p.l2CacheSize);
  int khz = 0, mem_khz = 0, bus = 0;
  VI_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
  VI_CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device));
  VI_CUDA_CHECK(cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, device));
  f.sm_clock_mhz = khz / 1e3;
  f.mem_clock_mhz = mem_khz / 1e3;
  f.bus_width_bits = bus;
  f.theoretical_gbs = 2.0 * mem_khz * 1e3 * (bus / 8.0) / 1e9;
  char pci[32] = {};
  if (cudaDeviceGetPCIBusId(pci, sizeof pci, device) == cudaSuccess) f.pci_bus_id = pci;
  size_t free_b = 0, total_b = 0;
  VI_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  f.free_mem = free_b;
  cudaDriverGetVersion(&f.driver_version);
  cudaRuntimeGetVersion(&f.runtime_version);
  return f;
}

Measured measure_copy_gbs(int device, size_t bytes, int reps) {
  DeviceGuard g(device);
  VI_CHECK(bytes >= (1u << 20) && reps > 0, "copy bandwidth: need at least 1 MiB and one repetition");
  cudaStream_t s;
  VI_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<double> gbs;
  {
    DevBuf src(bytes), dst(bytes);
    fill_random(src.p, bytes, 1, s);
    fill_random(dst.p, bytes, 2, s);
    Events ev;
    for (int i = 0; i < 2 + reps; ++i) {  // two warm-up copies
      ev.start(s);
      VI_CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, s));
      const double ms = ev.stop_ms(s);
      if (i >= 2) gbs.push_back(2.0 * bytes / (ms * 1e-3) / 1e9);
    }
  }
  cudaStreamDestroy(s);
  return summarize(gbs);
}

bool has_cublas() { return VI_CUBLAS != 0; }

#if VI_CUBLAS
Measured measure_cublas_fp16_tflops(int device, int m, int n, int k, int reps) {
  DeviceGuard g(device);
  VI_CHECK(m > 0 && n > 0 && k > 0 && reps > 0, "GEMM rate: bad size {}x{}x{}", m, n, k);
  cudaStream_t s;
  VI_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t h;
  VI_CUBLAS_CHECK(cublasCreate(&h));
  VI_CUBLAS_CHECK(cublasSetStream(h, s));
  std::vector<double> tf;
  {
    DevBuf a(size_t(m) * k * 2), b(size_t(k) * n * 2), c(size_t(m) * n * 2);
    fill_random(a.p, size_t(m) * k * 2, 3, s);
    fill_random(b.p, size_t(k) * n * 2, 4, s);
    const float alpha = 1.0f / k, beta = 0.0f;  // keeps the fp16 output in range
    Events ev;
    for (int i = 0; i < 3 + reps; ++i) {
      ev.start(s);
      VI_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, a.p, CUDA_R_16F, m, b.p, CUDA_R_16F,
                                   k, &beta, c.p, CUDA_R_16F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      const double ms = ev.stop_ms(s);
      if (i >= 3) tf.push_back(2.0 * m * n * double(k) / (ms * 1e-3) / 1e12);
    }
  }
  cublasDestroy(h);
  cudaStreamDestroy(s);
  return summarize(tf);
}
#else
Measured measure_cublas_fp16_tflops(int, int, int, int, int) { return {}; }  // reps = 0: not built
#endif

std::vector<PeerLink> measure_peer_links(const std::vector<int>& rank_devices, size_t small_bytes,
                                         size_t large_bytes, int reps) {
  VI_CHECK(!rank_devices.empty() && reps > 0, "peer matrix: no ranks");
  int prev = 0;
  VI_CUDA_CHECK(cudaGetDevice(&prev));
  // Per device: a source and a destination buffer (a rank pair on one device copies
  // between the two), one stream.
  struct PerDev {
    std::unique_ptr<DevBuf> src, dst;
    cudaStream_t s = nullptr;
  };
  std::map<int, PerDev> devs;
  for (int d : rank_devices) {
    if (devs.count(d)) continue;
    VI_CUDA_CHECK(cudaSetDevice(d));
    PerDev& pd = devs[d];
    pd.src = std::make_unique<DevBuf>(std::max(small_bytes, large_bytes));
    pd.dst = std::make_unique<DevBuf>(std::max(small_bytes, large_bytes));
    VI_CUDA_CHECK(cudaStreamCreateWithFlags(&pd.s, cudaStreamNonBlocking));
    fill_random(pd.src->p, std::max(small_bytes, large_bytes), 5 + d, pd.s);
    VI_CUDA_CHECK(cudaStreamSynchronize(pd.s));
  }
  // Times small and large copies src -> dst (run on the source device's stream).
  auto time_pair = [&](int sd, int dd, double& lat_us, double& gbs) {
    VI_CUDA_CHECK(cudaSetDevice(sd));
    cudaStream_t s = devs[sd].s;
    void* src = devs[sd].src->p;
    void* dst = devs[dd].dst->p;
    std::vector<double> lat, bw;
    for (int i = 0; i < 3 + reps; ++i) {
      const double t0 = host_us();
      VI_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dd, src, sd, small_bytes, s));
      VI_CUDA_CHECK(cudaStreamSynchronize(s));
      if (i >= 3) lat.push_back(host_us() - t0);
    }
    Events ev;
    for (int i = 0; i < 1 + std::max(3, reps / 4); ++i) {
      ev.start(s);
      VI_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dd, src, sd, large_bytes, s));
      const double ms = ev.stop_ms(s);
      if (i >= 1) bw.push_back(large_bytes / (ms * 1e-3) / 1e9);
    }
    lat_us = summarize(lat).median;
    gbs = summarize(bw).median;
  };
  // Peer access is switched on only around its own measurement, so the "without" numbers
  // of later pairs are not taken with it on.
  auto set_peer = [](int a, int b, bool on) {
    for (auto [x, y] : {std::pair{a, b}, std::pair{b, a}}) {
      VI_CUDA_CHECK(cudaSetDevice(x));
      cudaError_t e = on ? cudaDeviceEnablePeerAccess(y, 0) : cudaDeviceDisablePeerAccess(y);
      if (e == cudaErrorPeerAccessAlreadyEnabled || e == cudaErrorPeerAccessNotEnabled) cudaGetLastError();
      else VI_CUDA_CHECK(e);
    }
  };
  std::vector<PeerLink> out;
  const int n = static_cast<int>(rank_devices.size());
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      PeerLink L;
      L.src_rank = i, L.dst_rank = j, L.src_dev = rank_devices[i], L.dst_dev = rank_devices[j];
      L.same_device = L.src_dev == L.dst_dev;
      if (!L.same_device) {
        int can = 0;
        VI_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, L.src_dev, L.dst_dev));
        L.can_access_peer = can != 0;
      }
      time_pair(L.src_dev, L.dst_dev, L.lat_us, L.gbs);
      if (L.can_access_peer) {
        set_peer(L.src_dev, L.dst_dev, true);
        time_pair(L.src_dev, L.dst_dev, L.lat_us_p2p, L.gbs_p2p);
        set_peer(L.src_dev, L.dst_dev, false);
      }
      // A healthy path copies a few KB in tens of microseconds; PCIe 3.0 x16 moves
      // ~12 GB/s. Far outside either, the path is broken (seen on machines whose P2P
      // is advertised but routed badly).
      const double worst_lat = std::max(L.lat_us, L.lat_us_p2p);
      if (worst_lat > 1000)
        L.problem = fmt::format("a {} KB copy took {:.2f} ms", small_bytes / 1024, worst_lat / 1000);
      else if (!L.same_device && L.gbs < 5)
        L.problem = fmt::format("{:.1f} GB/s without peer access, far below PCIe", L.gbs);
      else if (L.can_access_peer && L.gbs_p2p < 5)
        L.problem = fmt::format("{:.1f} GB/s with peer access, far below PCIe", L.gbs_p2p);
      out.push_back(L);
    }
  for (auto& [d, pd] : devs) {
    cudaSetDevice(d);
    VI_CUDA_CHECK(cudaStreamSynchronize(pd.s));
    cudaStreamDestroy(pd.s);
    pd.src.reset();
    pd.dst.reset();
  }
  cudaSetDevice(prev);
  return out;
}

}  // namespace vi::cuda
