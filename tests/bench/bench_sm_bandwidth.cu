// How many bytes a second the multiprocessors pull from device memory, by how many of them are
// active and how many bytes each keeps in flight: the question behind the one-wave decode GEMVs
// (docs/notes/gemv.md, "Run 32"). A GEMV over 320 tiles of 16 rows puts 3 tiles on 56 SMs and 2
// on 76; if one SM cannot stream more than its 1/132 share of the copy rate, those 56 SMs set the
// call's time however the warps inside a tile split the work.
//
// Every block streams its own contiguous region once (evict-first loads, nothing written but one
// word that the compiler cannot drop), one block per SM: the dynamic shared memory each block asks
// for keeps a second one off its SM. Three load kinds:
//   ldg   16-byte loads, U independent loads a thread issued before the first use (threads x U x
//         16 bytes in flight a block);
//   bulk  cp.async.bulk copies of CHUNK bytes into STAGES shared-memory slots, each waited for on
//         an mbarrier and re-issued by one thread (STAGES x CHUNK in flight; sm_90);
//   ldg2  like ldg, but a second set of U loads issued before the first set is used (the register
//         double buffer the Q4_KT walk keeps: 2 x U x 16 bytes a thread).
// Time: CUDA events around one launch, median of 5 after a warm-up; GB/s = bytes read / time, and
// per SM = that over the SMs in use. The device-to-device copy bandwidth (read + write, hwcheck's)
// is measured in the same run.
//
//   bench_sm_bandwidth [--sms 1,8,33,66,132] [--mb-per-sm 24]
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cuda/cuda_util.cuh"
#include "bench_cuda_util.cuh"

namespace {

using vi::benchutil::event_ms;
using vi::benchutil::parse_list;

// Shared memory that a block asks for so that no second block fits on its SM (the H200 offers
// 227 KB a block; more than half of it is enough).
constexpr int kOneBlockSmem = 120 * 1024;

// U loads a thread in flight, then their use; `twice`: the next U issued before this U is used.
template <int U, bool TWICE>
__global__ void read_ldg(const uint4* __restrict__ p, int64_t n16, uint32_t* __restrict__ sink) {
  const uint4* base = p + int64_t(blockIdx.x) * n16;
  const int64_t step = int64_t(blockDim.x) * U;
  uint32_t acc = 0;
  uint4 a[U], b[U];
  int64_t i = threadIdx.x;
#pragma unroll
  for (int u = 0; u < U; ++u)
    a[u] = i + u * blockDim.x < n16 ? __ldcs(base + i + u * blockDim.x) : make_uint4(0, 0, 0, 0);
  for (; i < n16; i += (TWICE ? 2 : 1) * step) {
    if constexpr (TWICE) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t j = i + step + u * blockDim.x;
        b[u] = j < n16 ? __ldcs(base + j) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= a[u].x ^ a[u].y ^ a[u].z ^ a[u].w;
    if constexpr (TWICE) {
#pragma unroll
      for (int u = 0; u < U; ++u) acc ^= b[u].x ^ b[u].y ^ b[u].z ^ b[u].w;
    }
    const int64_t next = i + (TWICE ? 2 : 1) * step;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t j = next + u * blockDim.x;
      a[u] = j < n16 ? __ldcs(base + j) : make_uint4(0, 0, 0, 0);
    }
  }
  if (acc == 0x9E3779B9u) sink[blockIdx.x] = acc;  // the loads cannot be dropped
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define VI_BENCH_BULK 1
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#endif

// One thread keeps `stages` bulk copies of `chunk` bytes in flight; each lands in its slot,
// is waited for, one word of it read, and the slot refilled.
__global__ void read_bulk(const uint8_t* __restrict__ p, int64_t bytes, int chunk, int stages,
                          uint32_t* __restrict__ sink) {
#ifdef VI_BENCH_BULK
  extern __shared__ __align__(128) uint8_t slots[];
  __shared__ uint64_t full[16];
  const uint8_t* base = p + int64_t(blockIdx.x) * bytes;
  const int64_t n = bytes / chunk;
  if (threadIdx.x != 0) return;
  for (int s = 0; s < stages; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&full[s])) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  auto issue = [&](int64_t k) {
    const int s = static_cast<int>(k % stages);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&full[s])), "r"(chunk)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(slots + int64_t(s) * chunk)),
                 "l"(base + k * chunk), "r"(chunk), "r"(smem_addr(&full[s]))
                 : "memory");
  };
  for (int64_t k = 0; k < stages && k < n; ++k) issue(k);
  uint32_t acc = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int s = static_cast<int>(k % stages);
    const uint32_t parity = static_cast<uint32_t>(k / stages) & 1u;
    uint32_t done = 0;
    while (!done)
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(smem_addr(&full[s])), "r"(parity)
          : "memory");
    acc ^= *reinterpret_cast<const uint32_t*>(slots + int64_t(s) * chunk + (k & 63) * 4);
    if (k + stages < n) issue(k + stages);
  }
  if (acc == 0x9E3779B9u) sink[blockIdx.x] = acc;
#else
  __trap();
#endif
}

template <int U, bool TWICE>
float run_ldg(const uint8_t* buf, int64_t bytes_per_block, int sms, int threads, uint32_t* sink) {
  auto k = read_ldg<U, TWICE>;
  VI_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneBlockSmem));
  return event_ms(nullptr, 1, 5, [&] {
    k<<<sms, threads, kOneBlockSmem>>>(reinterpret_cast<const uint4*>(buf), bytes_per_block / 16, sink);
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sm_list = {1, 8, 33, 56, 66, 132};
  int64_t mb_per_sm = 24;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sms" && i + 1 < argc) sm_list = parse_list(argv[++i]);
    else if (a == "--mb-per-sm" && i + 1 < argc) mb_per_sm = std::stoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_sm_bandwidth [--sms 1,8,33,66,132] [--mb-per-sm 24]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  VI_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int n_sm = prop.multiProcessorCount;
  const double copy = vi::benchutil::copy_bandwidth();
  const int64_t per_block = mb_per_sm << 20;
  const int max_sms = static_cast<int>(*std::max_element(sm_list.begin(), sm_list.end()));
  uint8_t* buf = nullptr;
  uint32_t* sink = nullptr;
  VI_CUDA_CHECK(cudaMalloc(&buf, per_block * max_sms));
  VI_CUDA_CHECK(cudaMalloc(&sink, sizeof(uint32_t) * max_sms));
  vi::benchutil::fill_kernel<<<1024, 256>>>(buf, size_t(per_block * max_sms) / 4, vi::DType::F32, 7u, false);
  VI_CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("# %s, %d SMs, copy bandwidth %.0f GB/s (%.1f GB/s an SM); %lld MB a block\n", prop.name, n_sm, copy,
              copy / n_sm, static_cast<long long>(mb_per_sm));
  std::printf("| kind | SMs | threads | in flight a block (KB) | GB/s | GB/s an SM | %% of copy |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  auto row = [&](const char* kind, int sms, int threads, double kb, float ms) {
    const double gbs = double(per_block) * sms / (ms * 1e-3) / 1e9;
    std::printf("| %s | %d | %d | %.0f | %.0f | %.1f | %.1f |\n", kind, sms, threads, kb, gbs, gbs / sms,
                100.0 * gbs / copy);
    std::fflush(stdout);
  };
  for (int64_t sms64 : sm_list) {
    const int sms = static_cast<int>(std::min<int64_t>(sms64, n_sm));
    for (int threads : {128, 256, 512, 1024}) {
      row("ldg U=1", sms, threads, threads * 16 / 1024.0, run_ldg<1, false>(buf, per_block, sms, threads, sink));
      row("ldg U=4", sms, threads, threads * 64 / 1024.0, run_ldg<4, false>(buf, per_block, sms, threads, sink));
      row("ldg U=8", sms, threads, threads * 128 / 1024.0, run_ldg<8, false>(buf, per_block, sms, threads, sink));
      row("ldg2 U=4", sms, threads, threads * 128 / 1024.0, run_ldg<4, true>(buf, per_block, sms, threads, sink));
    }
    if (prop.major >= 9) {
      VI_CUDA_CHECK(cudaFuncSetAttribute(read_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
      for (int chunk : {4096, 16384}) {
        for (int stages : {2, 4, 8, 12}) {
          const int smem = std::max(chunk * stages, kOneBlockSmem);
          if (chunk * stages > 200 * 1024) continue;
          const float ms =
              event_ms(nullptr, 1, 5, [&] { read_bulk<<<sms, 32, smem>>>(buf, per_block, chunk, stages, sink); });
          row(chunk == 4096 ? "bulk 4 KB" : "bulk 16 KB", sms, 1, chunk * stages / 1024.0, ms);
        }
      }
    }
  }
  VI_CUDA_CHECK(cudaFree(buf));
  VI_CUDA_CHECK(cudaFree(sink));
  return 0;
}
