// Google Benchmark for the CPU reference ops that decide CPU decode speed: matmul per
// weight dtype on SmolLM2-135M's shapes at T = 1 (decode) and T = 64 (prefill), the
// embedding-as-lm_head matmul, and a whole decode step's matmuls (30 layers + lm_head)
// with separate weights per layer so they stream from memory as in a real forward pass.
// Counters: FLOP/s (2·T·N·K) and weight bytes/s (what decode is bound by).
//   [VI_THREADS=2] build/tests/bench_cpu_ops --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "core/quant.h"
#include "core/thread_pool.h"
#include "ops/matmul.h"

namespace vi {
namespace {

Tensor random_weight(DType t, int64_t N, int64_t K, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> row(K);
  Tensor w = Tensor::empty(t, {N, K});
  for (int64_t n = 0; n < N; ++n) {
    for (float& v : row) v = nd(rng);
    quantize_row(t, row.data(), w.row(n), K);
  }
  return w;
}

Tensor random_act(int64_t T, int64_t K) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tensor x = Tensor::empty(DType::F32, {T, K});
  for (int64_t i = 0; i < x.numel(); ++i) x.ptr<float>()[i] = nd(rng);
  return x;
}

void set_counters(benchmark::State& state, double flops, double bytes) {
  using C = benchmark::Counter;
  state.counters["FLOP/s"] = C(flops, C::kIsIterationInvariantRate, C::kIs1000);
  state.counters["Wbytes/s"] = C(bytes, C::kIsIterationInvariantRate, C::kIs1000);
}

// Args: dtype id, T, N, K, threads (0: ThreadPool::global(), one per core).
// With threads = 1 the CPU column is the kernel's own cost even on a busy machine.
void BM_matmul(benchmark::State& state) {
  const auto t = static_cast<DType>(state.range(0));
  const int64_t T = state.range(1), N = state.range(2), K = state.range(3);
  const int threads = static_cast<int>(state.range(4));
  ThreadPool local(threads > 0 ? threads : 1);
  ThreadPool& tp = threads > 0 ? local : ThreadPool::global();
  Tensor w = random_weight(t, N, K, 1);
  Tensor x = random_act(T, K);
  Tensor y = Tensor::empty(DType::F32, {T, N});
  ops::Context ctx{Device::CPU, &tp};
  for (auto _ : state) {
    ops::matmul(ctx, x, w, y);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(dtype_name(t)) + " threads=" + std::to_string(tp.size()));
  set_counters(state, 2.0 * T * N * K, static_cast<double>(w.nbytes()));
}

void matmul_args(benchmark::internal::Benchmark* b, int64_t th) {
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0,
                         DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  for (int64_t T : {1, 64}) {
    // gate / up; K-quants need whole 256-value super-blocks: K = 768 stands in for 576
    for (DType t : types)
      b->Args({static_cast<int64_t>(t), T, 1536, dtype_info(t).block_elems == kQKK ? 768 : 576, th});
    b->Args({static_cast<int64_t>(DType::Q4_1), T, 576, 1536, th});   // down
    b->Args({static_cast<int64_t>(DType::Q4_1), T, 576, 576, th});    // q / o
    b->Args({static_cast<int64_t>(DType::Q8_0), T, 49152, 576, th});  // tied lm_head
  }
}

// threads = 0 (the global pool) is timed by the wall clock: what a forward pass sees.
// threads = 1 is timed by CPU time, so its rates are the kernel's per-core throughput
// even while other processes share the cores.
BENCHMARK(BM_matmul)
    ->Apply([](benchmark::internal::Benchmark* b) {
      b->ArgNames({"dtype", "T", "N", "K", "threads"});
      matmul_args(b, 0);
    })
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_matmul)
    ->Apply([](benchmark::internal::Benchmark* b) {
      b->ArgNames({"dtype", "T", "N", "K", "threads"});
      matmul_args(b, 1);
    })
    ->Unit(benchmark::kMicrosecond);

// All matmuls of one SmolLM2-135M decode step (30 layers: q, k, v, o, gate, up, down;
// then the tied Q8_0 lm_head). Args: layer weight dtype, threads (as BM_matmul).
// Items/s = the tokens/s ceiling that the matmuls alone allow.
void BM_smollm2_decode_matmuls(benchmark::State& state) {
  const auto t = static_cast<DType>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  ThreadPool local(threads > 0 ? threads : 1);
  ThreadPool& tp = threads > 0 ? local : ThreadPool::global();
  const int64_t d = 576, ff = 1536, kv = 192, vocab = 49152;
  struct Lin { Tensor w; int64_t n, k; };
  std::vector<Lin> lins;
  unsigned seed = 1;
  for (int l = 0; l < 30; ++l) {
    for (auto [n, k] : {std::pair{d, d}, {kv, d}, {kv, d}, {d, d}, {ff, d}, {ff, d}, {d, ff}})
      lins.push_back({random_weight(t, n, k, seed++), n, k});
  }
  lins.push_back({random_weight(DType::Q8_0, vocab, d, seed++), vocab, d});
  Tensor xd = random_act(1, d), xf = random_act(1, ff);
  Tensor y = Tensor::empty(DType::F32, {1, vocab});
  double flops = 0, bytes = 0;
  for (const Lin& l : lins) {
    flops += 2.0 * l.n * l.k;
    bytes += static_cast<double>(l.w.nbytes());
  }
  ops::Context ctx{Device::CPU, &tp};
  for (auto _ : state) {
    for (const Lin& l : lins) {
      Tensor yo = y.reshape({vocab}).slice_rows(0, l.n).reshape({1, l.n});
      ops::matmul(ctx, l.k == d ? xd : xf, l.w, yo);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(std::string("layers ") + dtype_name(t) + ", lm_head q8_0, " +
                 std::to_string(static_cast<int>(bytes / 1e6)) + " MB/token, threads=" + std::to_string(tp.size()));
  set_counters(state, flops, bytes);
}
BENCHMARK(BM_smollm2_decode_matmuls)
    ->ArgNames({"dtype", "threads"})
    ->Args({static_cast<int64_t>(DType::Q4_1), 0})
    ->Args({static_cast<int64_t>(DType::Q8_0), 0})
    ->Args({static_cast<int64_t>(DType::Q4_1), 1})
    ->Args({static_cast<int64_t>(DType::Q8_0), 1})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace vi

// VI_THREADS=<n> sizes the global pool (default: one thread per hardware thread).
int main(int argc, char** argv) {
  if (const char* env = std::getenv("VI_THREADS")) vi::ThreadPool::set_default_threads(std::atoi(env));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
