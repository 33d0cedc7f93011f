// Google Benchmark for the n-gram drafter's index (runtime/ngram_index.h), as speculative decoding
// with --spec ngram uses it: a history indexed from its start (a new request; ns a token, and the
// heap it holds a token, from glibc's mallinfo2 before and after), and one round at a long
// history (the index follows the history by one token, then looks up a suffix). The tokens are
// Zipf-distributed over a 151936-token vocabulary (Qwen's), with spans copied from earlier in
// the history as code and chat repeat themselves, so suffixes recur as in real text.
//   build/tests/bench_ngram_index --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/ngram_index.h"

namespace vi {
namespace {

constexpr int kNgramMin = 2, kNgramMax = 4, kDrafts = 3;  // EngineOptions' defaults

std::vector<int32_t> text_like_tokens(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  constexpr int kVocab = 151936;
  std::vector<double> w(kVocab);
  for (int i = 0; i < kVocab; ++i) w[i] = 1.0 / std::pow(i + 1.0, 1.1);
  std::discrete_distribution<int32_t> zipf(w.begin(), w.end());
  std::bernoulli_distribution copy(0.02);
  std::uniform_int_distribution<int> span(4, 64);
  std::vector<int32_t> t;
  t.reserve(static_cast<size_t>(n));
  while (static_cast<int64_t>(t.size()) < n) {
    if (t.size() > 1024 && copy(rng)) {  // a span repeated from earlier
      std::uniform_int_distribution<size_t> from(0, t.size() - 65);
      const size_t f = from(rng);
      const int len = span(rng);
      for (int j = 0; j < len && static_cast<int64_t>(t.size()) < n; ++j) t.push_back(t[f + j]);
    } else {
      t.push_back(zipf(rng));
    }
  }
  return t;
}

size_t heap_in_use() { return mallinfo2().uordblks; }

void BM_index_history(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<int32_t> t = text_like_tokens(n + 1, 1);
  const std::span<const int32_t> hist(t.data(), static_cast<size_t>(n));
  double bytes = 0.0;
  for (auto _ : state) {
    const size_t before = heap_in_use();
    NgramIndex idx(kNgramMin, kNgramMax);
    benchmark::DoNotOptimize(idx.propose(hist, t[static_cast<size_t>(n)], kDrafts));
    bytes = static_cast<double>(heap_in_use() - before);
  }
  state.counters["ns/token"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate |
                                                     benchmark::Counter::kInvert);
  state.counters["heap B/token"] = bytes / static_cast<double>(n);
  state.counters["heap MB"] = bytes / 1e6;
}
BENCHMARK(BM_index_history)->Arg(4096)->Arg(32768)->Arg(262144)->Unit(benchmark::kMillisecond);

void BM_round_at_history(benchmark::State& state) {
  const int64_t n = state.range(0), rounds = 4096;
  const std::vector<int32_t> t = text_like_tokens(n + rounds + 1, 2);
  NgramIndex idx(kNgramMin, kNgramMax);
  idx.propose(std::span<const int32_t>(t.data(), static_cast<size_t>(n)), t[static_cast<size_t>(n)], kDrafts);
  int64_t h = n, found = 0, calls = 0;
  for (auto _ : state) {
    if (h >= n + rounds) {  // start over from the indexed prefix (not timed)
      state.PauseTiming();
      idx = NgramIndex(kNgramMin, kNgramMax);
      idx.propose(std::span<const int32_t>(t.data(), static_cast<size_t>(n)), t[static_cast<size_t>(n)], kDrafts);
      h = n;
      state.ResumeTiming();
    }
    ++h;  // the round accepted one token
    const auto d = idx.propose(std::span<const int32_t>(t.data(), static_cast<size_t>(h)), t[static_cast<size_t>(h)],
                               kDrafts);
    found += d.empty() ? 0 : 1;
    ++calls;
  }
  state.counters["drafted"] = calls ? static_cast<double>(found) / static_cast<double>(calls) : 0.0;
}
BENCHMARK(BM_round_at_history)->Arg(4096)->Arg(262144)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace vi

BENCHMARK_MAIN();
