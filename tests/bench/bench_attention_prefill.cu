// Prefill-attention micro-benchmark: the tensor-core flash kernel (attention_prefill.cuh)
// against today's path through ops::paged_attention (CUDA-core attention_kernel for f16
// pools, the split-KV decode kernel in chunks of 8 queries for i8 pools), on one layer of
// the 27B-shaped Qwen3.5 (24 query heads, 4 KV heads, head dim 256, blocks of 16 tokens
// through a shuffled block table), f16 queries, a whole prompt of T tokens at q_pos0 = 0.
// Each figure: the median over N timed calls (CUDA events) after one warm-up call. Work =
// 4 * T * T / 2 * Hq * D flops (Q·Kᵀ and P·V over the causal half). Both paths' outputs are
// compared (relative L2, the old path as reference) so a fast wrong kernel shows.
//
//   bench_attention_prefill [--tokens 2048,8192] [--reps 10] [--old-reps 3] [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/attention_prefill.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "core/half.h"
#include "core/tensor.h"
#include "ops/memory.h"
#include "ops/paged_attention.h"
#include "bench_cuda_util.cuh"

namespace {

using vi::DType;
using vi::Tensor;
namespace ops = vi::ops;

using vi::benchutil::event_ms;
using vi::benchutil::fill_tensor;
using vi::benchutil::parse_list;

double rel_l2_f16(ops::Context& g, const Tensor& got, const Tensor& ref) {
  Tensor a = ops::download(g, got), b = ops::download(g, ref);
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = vi::fp16_to_fp32(a.ptr<uint16_t>()[i]), y = vi::fp16_to_fp32(b.ptr<uint16_t>()[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::sqrt(num / den);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> tokens = {2048, 8192};
  int reps = 10, old_reps = 3;
  std::string json_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokens") tokens = parse_list(argv[i + 1]);
    else if (a == "--reps") reps = std::stoi(argv[i + 1]);
    else if (a == "--old-reps") old_reps = std::stoi(argv[i + 1]);
    else if (a == "--json") json_path = argv[i + 1];
  }
  FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
  const int64_t Hq = 24, Hkv = 4, D = 256, bs = 16;
  const float scale = 0.0625f;
  cudaDeviceProp prop{};
  VI_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d SMs, CUDA runtime of this build\n", prop.name, prop.multiProcessorCount);
  std::printf("# one layer: Hq=%lld Hkv=%lld D=%lld, block size %lld, f16 queries, q_pos0 = 0, causal\n",
              (long long)Hq, (long long)Hkv, (long long)D, (long long)bs);
  std::printf("| KV | T | new ms | new TFLOP/s | old ms | old TFLOP/s | speed-up | rel L2 new vs old |\n"
              "|---|---|---|---|---|---|---|---|\n");
  cudaStream_t stream;
  VI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ops::Context g;
  g.device = vi::Device::CUDA;
  g.act = DType::F16;
  g.profile = vi::cuda::parse_profile("native");
  g.stream = stream;
  std::mt19937 rng(1234);
  for (int64_t T : tokens) {
    const int64_t n_blocks = (T + bs - 1) / bs, rows = n_blocks * bs;
    std::vector<int32_t> perm(static_cast<size_t>(n_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    Tensor htable = Tensor::empty(DType::I32, {n_blocks});
    std::copy(perm.begin(), perm.end(), htable.ptr<int32_t>());
    Tensor table = ops::upload(g, htable);
    Tensor hpos = Tensor::empty(DType::I32, {1});
    hpos.ptr<int32_t>()[0] = 0;
    Tensor pos = ops::upload(g, hpos);
    Tensor q = ops::empty(g, DType::F16, {T, Hq, D});
    Tensor out_new = ops::empty(g, DType::F16, {T, Hq, D}), out_old = ops::empty(g, DType::F16, {T, Hq, D});
    fill_tensor(q, 3);
    for (DType kv : {DType::F16, DType::I8}) {
      ops::KvRows k{ops::empty(g, kv, {rows, Hkv, D}), {}}, v{ops::empty(g, kv, {rows, Hkv, D}), {}};
      fill_tensor(k.data, 11);
      fill_tensor(v.data, 97);
      if (kv == DType::I8) {
        k.scale = ops::empty(g, DType::F32, {rows, Hkv});
        v.scale = ops::empty(g, DType::F32, {rows, Hkv});
        fill_tensor(k.scale, 5, true);
        fill_tensor(v.scale, 7, true);
      }
      vi::cuda::PrefillArgs a;
      a.q = q.data();
      a.q_dtype = DType::F16;
      a.k = k.data.data();
      a.v = v.data.data();
      a.k_dtype = a.v_dtype = kv;
      a.k_scale = kv == DType::I8 ? k.scale.ptr<float>() : nullptr;
      a.v_scale = kv == DType::I8 ? v.scale.ptr<float>() : nullptr;
      a.table = table.ptr<int32_t>();
      a.block_size = bs;
      a.q_pos = pos.ptr<int32_t>();
      a.kv_bound = T;
      a.T = T;
      a.Hq = Hq;
      a.Hkv = Hkv;
      a.D = D;
      a.scale = scale;
      a.out = out_new.data();
      const float ms_new = event_ms(stream, 1, reps, [&] { vi::cuda::prefill_attention(g, a); });
      const float ms_old = event_ms(stream, 1, old_reps, [&] {
        ops::paged_attention(g, q, k, v, table, bs, 0, scale, out_old);
      });
      VI_CUDA_CHECK(cudaStreamSynchronize(stream));
      const double rel = rel_l2_f16(g, out_new, out_old);
      const double flops = 4.0 * double(T) * double(T) / 2.0 * Hq * D;
      const double tf_new = flops / (ms_new * 1e-3) / 1e12, tf_old = flops / (ms_old * 1e-3) / 1e12;
      std::printf("| %s | %lld | %.3f | %.1f | %.3f | %.1f | %.1fx | %.1e |\n", vi::dtype_name(kv), (long long)T,
                  ms_new, tf_new, ms_old, tf_old, ms_old / ms_new, rel);
      std::fflush(stdout);
      if (json)
        std::fprintf(json,
                     "{\"kv\":\"%s\",\"T\":%lld,\"ms_new\":%.4f,\"tflops_new\":%.2f,\"ms_old\":%.4f,"
                     "\"tflops_old\":%.2f,\"rel_l2\":%.3e}\n",
                     vi::dtype_name(kv), (long long)T, ms_new, tf_new, ms_old, tf_old, rel);
    }
  }
  if (json) std::fclose(json);
  return 0;
}
