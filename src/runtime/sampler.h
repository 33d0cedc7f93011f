// Token sampling on host logits. The chain follows llama.cpp's default order, so that
// its users' settings mean the same here: penalties -> top-k -> top-p -> min-p ->
// temperature -> draw. temperature <= 0 means greedy (argmax after penalties).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace vi {

struct SamplingParams {
  float temperature = 0.8f;
  int top_k = 40;          // <= 0: disabled
  float top_p = 0.95f;     // >= 1: disabled
  float min_p = 0.05f;     // <= 0: disabled
  float repeat_penalty = 1.0f;  // 1: disabled; divides positive / multiplies negative logits
  int repeat_last_n = 64;       // how many recent tokens the penalties look at (-1: all)
  float presence_penalty = 0.0f;   // subtracted once from every token seen
  float frequency_penalty = 0.0f;  // subtracted per occurrence
  uint64_t seed = 0xC0FFEE;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;  // log-probability of the token under the final distribution
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  const SamplingParams& params() const { return params_; }

  // history: tokens already in the sequence (prompt and generated), for the penalties.
  SampleResult sample(std::span<const float> logits, std::span<const int32_t> history);
  void reseed(uint64_t seed) { rng_.seed(seed); }

 private:
  struct Cand {
    int32_t id;
    float logit;
  };
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<Cand> cands_;
  std::vector<float> work_;
};

}  // namespace vi
