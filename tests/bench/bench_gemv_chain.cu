// What a kernel boundary costs a decode round's GEMVs (docs/notes/gemv.md run 27): L layers of a
// chain of dependent Q4_K GEMVs (each step's x is the step before's y), timed two ways on the
// same weights (prepared as the loader prepares them: Q4_KT):
//   kernels     one gemv_q4kt launch per GEMV (ops::matmul, programmatic launches as in a decode
//               round), the chain captured in a CUDA graph;
//   persistent  gemv_q4kt_chain: the whole chain in one launch, a grid barrier between steps,
//               3 or 4 blocks per SM, with and without each block's first loads of its next
//               step issued before the barrier ("prefetch"), the blocks waiting on the arrival
//               count or on a flag the last arrival sets ("flag").
// Per chain: µs, µs per GEMV, weight GB/s and % of the copy bandwidth (measured in the same run),
// and the outputs of all steps that differ from the kernels' (the persistent kernel walks the
// tiles with gemv_q4kt's loads and arithmetic, so any difference is a fault, reported as such).
// Each figure: the median of 9 replays of a graph of `reps` chains (direct launches, timed with
// events, where a cooperative launch cannot be captured). The weights are zero-mean Q4_K (all
// scales and mins 32, dmin = 7.5 d, d about 1 / (147 √K)) so the chain's values stay finite.
//
//   bench_gemv_chain [--chains 17408x5120:5120x17408,6144x5120:5120x6144] [--layers 8]
//                    [--tokens 1,4] [--reps 4]
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/gemv_q4kt.cuh"
#include "backends/cuda/gemv_q4kt_chain.cuh"
#include "bench_cuda_util.cuh"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/matmul.h"
#include "ops/memory.h"
#include "ops/prepare_matmul_weight.h"

namespace {

using vi::DType;
using vi::Tensor;
namespace ops = vi::ops;
using vi::benchutil::median;
using vi::benchutil::mix;

// Q4_K blocks (144 bytes: d, dmin, 12 scale bytes, 128 quant bytes) of random quants with every
// sub-block's 6-bit scale and min 32 (bytes 0-7 0xA0, 8-11 0: get_scale_min_k4's packing) and
// dmin = 7.5 d, so w = 32 d (q - 7.5) has mean 0 and standard deviation ~147 d.
__global__ void fill_q4k_centered(uint8_t* p, size_t n_blocks, float d_base, uint32_t seed) {
  for (size_t b = blockIdx.x * size_t(blockDim.x) + threadIdx.x; b < n_blocks; b += size_t(gridDim.x) * blockDim.x) {
    uint8_t* blk = p + b * 144;
    const float d = d_base * (0.75f + 0.5f * static_cast<float>(mix(b, seed) & 0xFFFFu) / 65536.0f);
    const __half hd = __float2half_rn(d), hm = __float2half_rn(7.5f * __half2float(hd));
    memcpy(blk, &hd, 2);
    memcpy(blk + 2, &hm, 2);
    for (int i = 0; i < 12; ++i) blk[4 + i] = i < 8 ? 0xA0 : 0;
    for (int i = 0; i < 32; ++i) {
      const uint32_t r = mix(b * 32 + i, seed ^ 0x5bd1e995u);
      memcpy(blk + 16 + 4 * i, &r, 4);
    }
  }
}

struct Shape {
  int64_t N, K;
};

// "17408x5120:5120x17408" -> its shapes.
std::vector<Shape> parse_chain(const std::string& s) {
  std::vector<Shape> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(':', i);
    if (j == std::string::npos) j = s.size();
    const std::string one = s.substr(i, j - i);
    const size_t x = one.find('x');
    VI_CHECK(x != std::string::npos, "bench_gemv_chain: shape '{}' is not NxK", one);
    out.push_back({std::stoll(one.substr(0, x)), std::stoll(one.substr(x + 1))});
    i = j + 1;
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(sep, i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

// µs per call of launch() over `reps` calls a replay, median of 9 replays: from a captured graph,
// or, where the capture fails (a cooperative launch on an older driver), from direct launches
// between events. *captured says which.
template <class Launch>
float chain_us(cudaStream_t s, int reps, Launch&& launch, bool* captured) {
  try {
    *captured = true;
    return median(vi::benchutil::graph_us_per_call(s, reps, 9, cudaStreamCaptureModeRelaxed,
                                                   [&](int) { launch(); }));
  } catch (const vi::Error&) {
    cudaGetLastError();
    cudaStreamCaptureStatus st;
    if (cudaStreamIsCapturing(s, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
      cudaGraph_t g;
      cudaStreamEndCapture(s, &g);
      if (g) cudaGraphDestroy(g);
    }
    cudaGetLastError();
  }
  *captured = false;
  cudaEvent_t e0, e1;
  VI_CUDA_CHECK(cudaEventCreate(&e0));
  VI_CUDA_CHECK(cudaEventCreate(&e1));
  launch();  // warm-up
  std::vector<float> us;
  for (int r = 0; r < 9; ++r) {
    VI_CUDA_CHECK(cudaEventRecord(e0, s));
    for (int i = 0; i < reps; ++i) launch();
    VI_CUDA_CHECK(cudaEventRecord(e1, s));
    VI_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    VI_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    us.push_back(ms * 1e3f / reps);
  }
  VI_CUDA_CHECK(cudaEventDestroy(e0));
  VI_CUDA_CHECK(cudaEventDestroy(e1));
  return median(us);
}

}  // namespace

int main(int argc, char** argv) {
  std::string chains = "17408x5120:5120x17408,6144x5120:5120x6144", tokens = "1,4";
  int layers = 8, reps = 4;
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc) { std::fprintf(stderr, "option %s needs a value\n", a.c_str()); return 2; }
    if (a == "--chains") chains = argv[i + 1];
    else if (a == "--layers") layers = std::stoi(argv[i + 1]);
    else if (a == "--tokens") tokens = argv[i + 1];
    else if (a == "--reps") reps = std::stoi(argv[i + 1]);
    else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
  }
  cudaStream_t stream;
  VI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop;
  VI_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy_gbs = vi::benchutil::copy_bandwidth();
  std::printf("device: %s, %d SMs; device-to-device copy: %.0f GB/s (read + write)\n", prop.name,
              prop.multiProcessorCount, copy_gbs);
  unsigned* words = nullptr;
  VI_CUDA_CHECK(cudaMalloc(&words, vi::cuda::kQ4ktChainWords * sizeof(unsigned)));
  int faults = 0;
  for (const std::string& chain : split(chains, ',')) {
    const std::vector<Shape> pattern = parse_chain(chain);
    ops::Context ctx;
    ctx.device = vi::Device::CUDA;
    ctx.stream = stream;
    ctx.act = DType::F16;
    ctx.profile = ops::KernelProfile::kNative;
    // The steps' weights (layers x the pattern, each its own copy: the chain streams them from DRAM).
    std::vector<Tensor> ws;
    double wbytes = 0;
    for (int l = 0; l < layers; ++l)
      for (size_t p = 0; p < pattern.size(); ++p) {
        const Shape sh = pattern[p];
        VI_CHECK(p == 0 ? sh.K == pattern.back().N : sh.K == pattern[p - 1].N,
                 "bench_gemv_chain: in '{}' each K must be the N before it (cyclically)", chain);
        Tensor w = ops::empty(ctx, DType::Q4_K, {sh.N, sh.K});
        const size_t blocks = w.nbytes() / 144;
        fill_q4k_centered<<<2048, 256, 0, stream>>>(w.ptr<uint8_t>(), blocks,
                                                    1.0f / (147.0f * std::sqrt(static_cast<float>(sh.K))),
                                                    1234u + static_cast<uint32_t>(ws.size()));
        VI_CUDA_LAUNCH_CHECK();
        ws.push_back(ops::prepare_matmul_weight(ctx, w));
        wbytes += static_cast<double>(ws.back().nbytes());
      }
    VI_CUDA_CHECK(cudaStreamSynchronize(stream));
    const size_t n_steps = ws.size();
    for (const std::string& ts : split(tokens, ',')) {
      const int64_t T = std::stoll(ts);
      Tensor x0 = ops::empty(ctx, DType::F16, {T, pattern[0].K});
      vi::benchutil::fill_tensor(x0, 99);
      std::vector<Tensor> ys;
      for (size_t s = 0; s < n_steps; ++s) ys.push_back(ops::empty(ctx, DType::F16, {T, ws[s].dim(0)}));
      std::vector<vi::cuda::Q4ktChainStep> steps;
      for (size_t s = 0; s < n_steps; ++s) steps.push_back({s == 0 ? &x0 : &ys[s - 1], &ws[s], &ys[s]});
      auto run_kernels = [&] {
        for (size_t s = 0; s < n_steps; ++s) ops::matmul(ctx, *steps[s].x, ws[s], ys[s]);
      };
      // Every step's y, as u16 bits, after one run of `run`.
      auto outputs = [&](auto run) {
        for (Tensor& y : ys) VI_CUDA_CHECK(cudaMemsetAsync(y.data(), 0xFF, y.nbytes(), stream));
        run();
        VI_CUDA_CHECK(cudaStreamSynchronize(stream));
        std::vector<uint16_t> all;
        for (const Tensor& y : ys) {
          const Tensor h = ops::download(ctx, y);
          all.insert(all.end(), h.ptr<uint16_t>(), h.ptr<uint16_t>() + h.numel());
        }
        return all;
      };
      const std::vector<uint16_t> ref = outputs(run_kernels);
      int64_t nonfinite = 0;
      for (uint16_t v : ref) nonfinite += (v & 0x7C00u) == 0x7C00u;
      bool cap = false;
      const float k_us = chain_us(stream, reps, run_kernels, &cap);
      auto report = [&](const std::string& what, float us, bool captured, int64_t diff) {
        const double gbs = wbytes / (us * 1e-6) / 1e9;
        std::printf("%-22s T=%lld %-40s %9.1f us  %6.2f us/GEMV  %7.0f GB/s  %5.1f%% copy  %s  differing: %lld\n",
                    chain.c_str(), (long long)T, what.c_str(), us, us / n_steps, gbs, 100.0 * gbs / copy_gbs,
                    captured ? "graph " : "direct", (long long)diff);
      };
      std::printf("\n%s x %d layers (%zu GEMVs, %.1f MB of weights), T = %lld; last step's non-finite outputs: %lld\n",
                  chain.c_str(), layers, n_steps, wbytes / 1e6, (long long)T, (long long)nonfinite);
      report("kernels (gemv_q4kt, PDL)", k_us, cap, 0);
      for (int bps : {3, 4})
        for (bool pre : {true, false})
          for (bool flag : {false, true}) {
            const std::string what =
                fmt::format("persistent {}/SM{}{}", bps, pre ? ", prefetch" : "", flag ? ", flag" : "");
            if (!vi::cuda::gemv_q4kt_chain_supports(ctx, steps, bps)) {
              std::printf("%-22s T=%lld %-40s not run (the chain does not fit)\n", chain.c_str(), (long long)T,
                          what.c_str());
              continue;
            }
            auto run_chain = [&] { vi::cuda::gemv_q4kt_chain(ctx, steps, bps, pre, flag, words); };
            const std::vector<uint16_t> got = outputs(run_chain);
            int64_t diff = 0;
            for (size_t i = 0; i < got.size(); ++i) diff += got[i] != ref[i];
            faults += diff != 0;
            const float us = chain_us(stream, reps, run_chain, &cap);
            report(what, us, cap, diff);
          }
    }
  }
  VI_CUDA_CHECK(cudaFree(words));
  if (faults) std::printf("\nFAULT: %d persistent runs differ from the kernels' outputs\n", faults);
  return faults ? 1 : 0;
}
