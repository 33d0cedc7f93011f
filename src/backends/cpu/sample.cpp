// CPU sampling: the reference for the GPU kernel, and what runs for host logits. Works in
// fp64 after the penalties, so the top-p / min-p cuts and the draw do not depend on the
// summation order of a device.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/half.h"
#include "ops/sample.h"

namespace vi::cpu {
namespace {

struct Cand {
  int32_t id;
  float logit;
};

ops::SampledToken sample_row(std::vector<float>& work, const ops::SampleParams& sp) {
  const int64_t n = static_cast<int64_t>(work.size());
  if (sp.temperature <= 0.0f) {
    const int32_t best = static_cast<int32_t>(std::max_element(work.begin(), work.end()) - work.begin());
    double mx = work[best], sum = 0;
    for (float l : work) sum += std::exp(static_cast<double>(l) - mx);
    return {best, static_cast<float>(-std::log(sum))};
  }
  static thread_local std::vector<Cand> cands;
  cands.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) cands[i] = {static_cast<int32_t>(i), work[i]};
  auto by_logit = [](const Cand& a, const Cand& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
  const size_t keep = sp.top_k > 0 ? std::min<size_t>(sp.top_k, cands.size()) : cands.size();
  std::partial_sort(cands.begin(), cands.begin() + keep, cands.end(), by_logit);
  cands.resize(keep);

  // Probabilities of the survivors at temperature 1 for the top-p and min-p cuts.
  std::vector<double> p(cands.size());
  auto softmax = [&](double temp) {
    p.resize(cands.size());
    double mx = cands[0].logit, sum = 0;
    for (size_t i = 0; i < cands.size(); ++i) sum += p[i] = std::exp((cands[i].logit - mx) / temp);
    for (double& v : p) v /= sum;
  };
  softmax(1.0);
  if (sp.top_p < 1.0f) {
    double cum = 0;
    size_t k = 0;
    while (k < p.size()) {
      cum += p[k++];
      if (cum >= sp.top_p) break;
    }
    cands.resize(std::max<size_t>(k, 1));
    p.resize(cands.size());
  }
  if (sp.min_p > 0.0f) {
    const double floor = p[0] * sp.min_p;
    size_t k = 1;
    while (k < p.size() && p[k] >= floor) ++k;
    cands.resize(k);
  }
  softmax(sp.temperature);
  double cum = 0;
  size_t pick = p.size() - 1;
  for (size_t i = 0; i < p.size(); ++i) {
    cum += p[i];
    if (sp.uniform < cum) {
      pick = i;
      break;
    }
  }
  return {cands[pick].id, static_cast<float>(std::log(p[pick]))};
}

void sample_cpu(ops::Context&, const Tensor& logits, const std::vector<ops::SampleParams>& params,
                const std::vector<ops::LogitPenalty>& penalties, std::vector<ops::SampledToken>& out) {
  const int64_t V = logits.cols();
  std::vector<float> work(static_cast<size_t>(V));
  for (int64_t r = 0; r < logits.rows(); ++r) {
    if (logits.dtype() == DType::F32) {
      std::copy_n(logits.row<float>(r), V, work.begin());
    } else {
      const uint16_t* h = logits.row<uint16_t>(r);
      for (int64_t i = 0; i < V; ++i) work[i] = fp16_to_fp32(h[i]);
    }
    for (const ops::LogitPenalty& q : penalties) {
      if (q.row != r) continue;
      float& l = work[q.token];
      if (q.repeat != 1.0f) l = l > 0 ? l / q.repeat : l * q.repeat;
      l -= q.subtract;
    }
    out[r] = sample_row(work, params[r]);
  }
}

int64_t unlimited(int64_t V) { return V; }

const bool registered = [] {
  ops::sample_table().add(Device::CPU, DType::F32, sample_cpu);
  ops::sample_table().add(Device::CPU, DType::F16, sample_cpu);
  ops::sample_max_top_k_table().add(Device::CPU, DType::F32, unlimited);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
