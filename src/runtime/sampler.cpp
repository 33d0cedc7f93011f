#include "runtime/sampler.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "ops/memory.h"

namespace vi {

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  VI_CHECK(params.top_p > 0.0f, "top_p must be > 0 (got {})", params.top_p);
  VI_CHECK(params.min_p >= 0.0f && params.min_p <= 1.0f, "min_p must be in [0, 1] (got {})", params.min_p);
  VI_CHECK(params.repeat_penalty > 0.0f, "repeat_penalty must be > 0 (got {})", params.repeat_penalty);
}

ops::SampleParams Sampler::next_params() {
  ops::SampleParams p;
  p.temperature = params_.temperature;
  p.top_k = params_.top_k;
  p.top_p = params_.top_p;
  p.min_p = params_.min_p;
  if (p.temperature > 0.0f) {  // greedy draws nothing, so a seed's stream is not consumed
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    p.uniform = uni(rng_);
  }
  return p;
}

void Sampler::add_penalties(int32_t row, std::span<const int32_t> history, int64_t n_vocab,
                            std::vector<ops::LogitPenalty>& out) const {
  const bool penalize = params_.repeat_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                        params_.frequency_penalty != 0.0f;
  if (!penalize || history.empty()) return;
  const size_t last = params_.repeat_last_n < 0 ? history.size()
                                                 : std::min<size_t>(history.size(), params_.repeat_last_n);
  std::unordered_map<int32_t, int> counts;
  for (size_t i = history.size() - last; i < history.size(); ++i) counts[history[i]]++;
  for (auto [id, c] : counts) {
    if (id < 0 || id >= n_vocab) continue;
    out.push_back({row, id, params_.repeat_penalty,
                   params_.presence_penalty + params_.frequency_penalty * static_cast<float>(c)});
  }
}

SampleResult Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  VI_CHECK(!logits.empty(), "sampling from an empty distribution");
  const int64_t V = static_cast<int64_t>(logits.size());
  Tensor t = Tensor::view(DType::F32, {1, V}, const_cast<float*>(logits.data()), nullptr);
  ops::Context cpu;
  return sample(cpu, t, 0, history);
}

SampleResult Sampler::sample(ops::Context& ctx, const Tensor& logits, int64_t row, std::span<const int32_t> history) {
  Sampler* self = this;
  Tensor one = logits.slice_rows(row, row + 1);
  return sample_rows(ctx, one, {&self, 1}, {&history, 1})[0];
}

std::vector<SampleResult> sample_rows(ops::Context& ctx, const Tensor& logits, std::span<Sampler* const> samplers,
                                      std::span<const std::span<const int32_t>> histories) {
  const int64_t R = logits.rows(), V = logits.cols();
  VI_CHECK(static_cast<int64_t>(samplers.size()) == R && static_cast<int64_t>(histories.size()) == R,
           "sample_rows: {} rows of logits for {} samplers and {} histories", R, samplers.size(), histories.size());
  std::vector<ops::SampleParams> params(static_cast<size_t>(R));
  std::vector<ops::LogitPenalty> penalties;
  for (int64_t r = 0; r < R; ++r) {
    params[r] = samplers[r]->next_params();
    samplers[r]->add_penalties(static_cast<int32_t>(r), histories[r], V, penalties);
  }
  std::vector<ops::SampledToken> got(static_cast<size_t>(R));
  if (ops::sample_supported(ctx, V, params)) {
    ops::sample(ctx, logits, params, penalties, got);
  } else {  // e.g. top_k disabled while sampling on a GPU: the whole vocabulary is sorted on the host
    ops::Context cpu;
    Tensor host = logits.device() == Device::CPU ? logits : ops::download(ctx, logits);
    ops::sample(cpu, host, params, penalties, got);
  }
  std::vector<SampleResult> out(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) out[r] = {got[r].token, got[r].logprob};
  return out;
}

}  // namespace vi
