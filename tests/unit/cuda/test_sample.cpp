// CUDA sampling vs the CPU op on fresh random logits: greedy, top-k / top-p / min-p /
// temperature chains and penalties, vocabularies from one slice to Qwen3.5's 248K, in f32
// and f16 logits (the CPU reads the same f16 values). Tokens must be identical: both sides
// sort the same floats and do the cuts and the draw in fp64 in the same order. Log-probs
// agree to 1e-3 (greedy sums exp in fp32 per slice on the GPU, in fp64 on the CPU).
#include <gtest/gtest.h>

#include <set>

#include "cuda_test_util.h"
#include "ops/sample.h"

namespace vi::cudatest {
namespace {

class Sample : public CudaOpTest {};

std::vector<ops::SampleParams> random_params(int64_t R, int64_t max_k, std::mt19937& r) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<ops::SampleParams> ps(static_cast<size_t>(R));
  for (int64_t i = 0; i < R; ++i) {
    ops::SampleParams& p = ps[i];
    switch (i % 5) {
      case 0: p.temperature = 0.0f; break;  // greedy
      case 1: p = {0.8f, 40, 0.95f, 0.05f, 0}; break;  // llama.cpp's defaults
      case 2: p = {1.3f, static_cast<int32_t>(max_k), 1.0f, 0.0f, 0}; break;  // the largest top_k the GPU takes
      case 3: p = {0.5f, 1, 1.0f, 0.0f, 0}; break;  // top_k 1: greedy by another road
      default: p = {2.0f, 25, 0.6f, 0.2f, 0}; break;
    }
    p.top_k = static_cast<int32_t>(std::min<int64_t>(p.top_k, max_k));
    p.uniform = u(r);
  }
  return ps;
}

TEST_P(Sample, MatchesCpu) {
  auto& r = rng();
  for (int64_t V : {1000, 4096, 4097, 32003, 151936, 248320}) {
    const int64_t R = 11;
    // Logits with ties (rounded to 1/8) so the id order of equal logits is exercised.
    Tensor l = rand_f32({R, V}, act(), -12, 12);
    for (int64_t i = 0; i < l.numel(); i += 7) l.ptr<float>()[i] = std::round(l.ptr<float>()[i] * 8) / 8;
    const int64_t max_k = ops::sample_max_top_k(g, V);
    ASSERT_GE(max_k, std::min<int64_t>(V, 40)) << "V " << V;
    auto ps = random_params(R, max_k, r);
    std::vector<ops::LogitPenalty> pen;
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
    for (int32_t row = 0; row < R; row += 2) {
      std::set<int32_t> seen;
      for (int j = 0; j < 30; ++j) {
        const int32_t t = tok(r);
        if (seen.insert(t).second) pen.push_back({row, t, 1.3f, 0.25f * (j % 3)});
      }
    }
    Tensor host = host_as(l, act());  // what the GPU gets, on the host for the reference
    std::vector<ops::SampledToken> ref(R), got(R);
    ops::sample(cpu, host, ps, pen, ref);
    Tensor dl = up(l);
    ops::sample(g, dl, ps, pen, got);
    for (int64_t i = 0; i < R; ++i) {
      EXPECT_EQ(got[i].token, ref[i].token) << "V " << V << " row " << i << " T " << ps[i].temperature << " k "
                                            << ps[i].top_k;
      EXPECT_NEAR(got[i].logprob, ref[i].logprob, 1e-3) << "V " << V << " row " << i;
    }
  }
}

TEST_P(Sample, UnsupportedTopKFailsLoudly) {
  const int64_t V = 248320;
  Tensor dl = up(rand_f32({1, V}, act()));
  std::vector<ops::SampleParams> ps{{0.8f, 0, 1.0f, 0.0f, 0.5}};  // top_k disabled: the whole vocabulary
  EXPECT_FALSE(ops::sample_supported(g, V, ps));
  std::vector<ops::SampledToken> out(1);
  EXPECT_THROW(ops::sample(g, dl, ps, {}, out), Error);
  ps[0].temperature = 0.0f;  // greedy needs no top-k
  EXPECT_TRUE(ops::sample_supported(g, V, ps));
}

VI_CUDA_INSTANTIATE(Sample);

}  // namespace
}  // namespace vi::cudatest
