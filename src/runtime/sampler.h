// Token sampling policy per sequence: the parameters, the seeded generator and the
// penalties over the recent history. The chain itself is ops::sample (llama.cpp's default
// order: penalties -> top-k -> top-p -> min-p -> temperature -> draw; temperature <= 0 is
// greedy), which runs on the device holding the logits: on a GPU only token ids come back.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "ops/sample.h"

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
  // Row `row` of logits [R, V] on ctx's device (f32 or the activation dtype).
  SampleResult sample(ops::Context& ctx, const Tensor& logits, int64_t row, std::span<const int32_t> history);
  void reseed(uint64_t seed) { rng_.seed(seed); }

  // The op's view of the next draw for one row: parameters (drawing the random number
  // now) and the penalties of `history` for that row.
  ops::SampleParams next_params();
  void add_penalties(int32_t row, std::span<const int32_t> history, int64_t n_vocab,
                     std::vector<ops::LogitPenalty>& out) const;

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

// Samples rows of device (or host) logits in one op call: samplers[i] and histories[i]
// belong to logits row i. Rows the device cannot sample (see ops::sample_supported) are
// sampled on the host from a downloaded copy.
std::vector<SampleResult> sample_rows(ops::Context& ctx, const Tensor& logits, std::span<Sampler* const> samplers,
                                      std::span<const std::span<const int32_t>> histories);

}  // namespace vi
