// Token sampling over rows of logits, on the device that holds them, so a GPU decode step
// returns token ids instead of a [rows, vocab] download. The chain is llama.cpp's default
// order (its users' settings mean the same here): penalties -> top-k -> top-p -> min-p ->
// temperature -> draw. The random draw comes in as a number (SampleParams::uniform) from
// the caller's generator, so a seed gives the same tokens on every device.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/registry.h"

namespace vi::ops {

struct SampleParams {
  float temperature = 0.0f;  // <= 0: greedy (argmax after penalties)
  int32_t top_k = 0;         // <= 0: disabled (all tokens)
  float top_p = 1.0f;        // >= 1: disabled
  float min_p = 0.0f;        // <= 0: disabled
  double uniform = 0.0;      // the draw, in [0, 1); unused when greedy
};

// One token's penalty in one row: logit -> (logit > 0 ? logit / repeat : logit * repeat) - subtract.
// Each (row, token) appears at most once.
struct LogitPenalty {
  int32_t row = 0;
  int32_t token = 0;
  float repeat = 1.0f;
  float subtract = 0.0f;
};

struct SampledToken {
  int32_t token = -1;
  // log-probability of the token: greedy, under the softmax of all (penalized) logits;
  // otherwise under the final distribution the token was drawn from.
  float logprob = 0.0f;
};

// logits: [R, V] (f32, or the device's activation dtype); params: R entries; out: R entries
// (host memory). Ties between equal logits go to the lower token id.
void sample(Context& ctx, const Tensor& logits, const std::vector<SampleParams>& params,
            const std::vector<LogitPenalty>& penalties, std::vector<SampledToken>& out);
using SampleFn = void (*)(Context&, const Tensor& logits, const std::vector<SampleParams>& params,
                          const std::vector<LogitPenalty>& penalties, std::vector<SampledToken>& out);
OpTable<SampleFn>& sample_table();  // keyed by logits dtype

// Largest top_k (<= V) the device's kernel takes for rows of V logits; rows asking for
// more (or for top_k disabled while sampling) must be sampled where this allows it (the CPU).
int64_t sample_max_top_k(Context& ctx, int64_t V);
using SampleMaxTopKFn = int64_t (*)(int64_t V);
OpTable<SampleMaxTopKFn>& sample_max_top_k_table();  // keyed by logits dtype (any entry of the device)

// True when every row of `params` can be sampled on ctx's device for rows of V logits.
bool sample_supported(Context& ctx, int64_t V, const std::vector<SampleParams>& params);

}  // namespace vi::ops
