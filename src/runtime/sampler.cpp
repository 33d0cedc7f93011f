#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/error.h"

namespace vi {

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  VI_CHECK(params.top_p > 0.0f, "top_p must be > 0 (got {})", params.top_p);
  VI_CHECK(params.min_p >= 0.0f && params.min_p <= 1.0f, "min_p must be in [0, 1] (got {})", params.min_p);
  VI_CHECK(params.repeat_penalty > 0.0f, "repeat_penalty must be > 0 (got {})", params.repeat_penalty);
}

SampleResult Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  const int64_t n = static_cast<int64_t>(logits.size());
  VI_CHECK(n > 0, "sampling from an empty distribution");
  work_.assign(logits.begin(), logits.end());

  // Penalties over the recent history.
  const bool penalize = params_.repeat_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                        params_.frequency_penalty != 0.0f;
  if (penalize && !history.empty()) {
    size_t last = params_.repeat_last_n < 0 ? history.size()
                                             : std::min<size_t>(history.size(), params_.repeat_last_n);
    std::unordered_map<int32_t, int> counts;
    for (size_t i = history.size() - last; i < history.size(); ++i) counts[history[i]]++;
    for (auto [id, c] : counts) {
      if (id < 0 || id >= n) continue;
      float& l = work_[id];
      if (params_.repeat_penalty != 1.0f) l = l > 0 ? l / params_.repeat_penalty : l * params_.repeat_penalty;
      l -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(c);
    }
  }

  if (params_.temperature <= 0.0f) {
    int32_t best = static_cast<int32_t>(std::max_element(work_.begin(), work_.end()) - work_.begin());
    // log-softmax of the winner, for logprobs.
    double mx = work_[best], sum = 0;
    for (float l : work_) sum += std::exp(static_cast<double>(l) - mx);
    return {best, static_cast<float>(-std::log(sum))};
  }

  cands_.resize(n);
  for (int64_t i = 0; i < n; ++i) cands_[i] = {static_cast<int32_t>(i), work_[i]};
  auto by_logit = [](const Cand& a, const Cand& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
  size_t keep = cands_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = params_.top_k;
    std::partial_sort(cands_.begin(), cands_.begin() + keep, cands_.end(), by_logit);
    cands_.resize(keep);
  } else {
    std::sort(cands_.begin(), cands_.end(), by_logit);
  }

  // Probabilities of the survivors at temperature 1 for the top-p and min-p cuts.
  auto softmax = [&](float temp, std::vector<double>& p) {
    p.resize(cands_.size());
    double mx = cands_[0].logit, sum = 0;
    for (size_t i = 0; i < cands_.size(); ++i) sum += p[i] = std::exp((cands_[i].logit - mx) / temp);
    for (double& v : p) v /= sum;
  };
  std::vector<double> p;
  softmax(1.0f, p);
  if (params_.top_p < 1.0f) {
    double cum = 0;
    size_t k = 0;
    while (k < p.size()) {
      cum += p[k++];
      if (cum >= params_.top_p) break;
    }
    cands_.resize(std::max<size_t>(k, 1));
    p.resize(cands_.size());
  }
  if (params_.min_p > 0.0f) {
    double floor = p[0] * params_.min_p;
    size_t k = 1;
    while (k < p.size() && p[k] >= floor) ++k;
    cands_.resize(k);
  }
  softmax(params_.temperature, p);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  double r = uni(rng_), cum = 0;
  size_t pick = p.size() - 1;
  for (size_t i = 0; i < p.size(); ++i) {
    cum += p[i];
    if (r < cum) {
      pick = i;
      break;
    }
  }
  return {cands_[pick].id, static_cast<float>(std::log(p[pick]))};
}

}  // namespace vi
