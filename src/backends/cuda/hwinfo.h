// What `voltinfer hwcheck` and `voltinfer bench` learn about the GPUs (plain C++, no CUDA
// headers): the device's facts, and measured ceilings — copy bandwidth, fp16 tensor-core
// GEMM rate, peer-to-peer latency and bandwidth between every pair of ranks. The
// measurements use random data, warm up first, time with CUDA events (host clock plus a
// synchronisation for the latency probes) and report the median of their repetitions.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace vi::cuda {

struct GpuFacts {
  int index = 0;
  std::string name, pci_bus_id;
  int cc = 0;  // 10 * major + minor
  int sm_count = 0;
  double sm_clock_mhz = 0, mem_clock_mhz = 0;  // peak clocks the device reports
  int bus_width_bits = 0;
  size_t total_mem = 0, free_mem = 0;
  double theoretical_gbs = 0;  // 2 (double data rate) x memory clock x bus width
  size_t l2_bytes = 0;
  int driver_version = 0, runtime_version = 0;  // 13000 = 13.0
};
GpuFacts gpu_facts(int device);

struct Measured {
  double median = 0, min = 0, max = 0;
  int reps = 0;
};

// Device-to-device cudaMemcpy of `bytes` (far larger than L2): GB/s counting bytes read
// plus bytes written (2 x bytes per copy).
Measured measure_copy_gbs(int device, size_t bytes, int reps);

// Whether this build links cuBLAS (VI_CUBLAS; the CUDA 11.8 / sm_70 build may not).
bool has_cublas();
// cuBLAS fp16 x fp16 -> fp16 GEMM with fp32 accumulation (what prefill uses), m x n x k:
// TFLOP/s counting 2mnk. Without cuBLAS: an empty result (reps = 0).
Measured measure_cublas_fp16_tflops(int device, int m, int n, int k, int reps);

// One direction of one pair of ranks.
struct PeerLink {
  int src_rank = 0, dst_rank = 0, src_dev = 0, dst_dev = 0;
  bool same_device = false;
  bool can_access_peer = false;  // cudaDeviceCanAccessPeer (false on one device)
  // cudaMemcpyPeer without and with peer access enabled (with: only when can_access_peer).
  double lat_us = 0, gbs = 0;           // small copy (host clock incl. sync), large copy
  double lat_us_p2p = -1, gbs_p2p = -1;  // -1: not measured
  std::string problem;                   // empty when the path looks healthy
};
// Every ordered pair of ranks; rank r runs on rank_devices[r] (several ranks may share a
// device, which tests this code path on one GPU). small/large: the two copy sizes.
std::vector<PeerLink> measure_peer_links(const std::vector<int>& rank_devices, size_t small_bytes,
                                         size_t large_bytes, int reps);

}  // namespace vi::cuda
