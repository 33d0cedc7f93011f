// The sampler against direct computations of each rule on random logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "runtime/sampler.h"

namespace vi {
namespace {

std::vector<float> random_logits(int n, uint32_t seed, float scale = 3.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<double> softmax(const std::vector<float>& l, double temp = 1.0) {
  double mx = *std::max_element(l.begin(), l.end()), sum = 0;
  std::vector<double> p(l.size());
  for (size_t i = 0; i < l.size(); ++i) sum += p[i] = std::exp((l[i] - mx) / temp);
  for (double& x : p) x /= sum;
  return p;
}

TEST(Sampler, GreedyIsArgmaxWithLogprob) {
  for (uint32_t seed = 1; seed < 20; ++seed) {
    auto l = random_logits(1001, seed);
    Sampler s(SamplingParams{.temperature = 0});
    SampleResult r = s.sample(l, {});
    int best = static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin());
    EXPECT_EQ(r.token, best);
    EXPECT_NEAR(r.logprob, std::log(softmax(l)[best]), 1e-5);
  }
}

TEST(Sampler, TopKOnlyDrawsFromTheKLargest) {
  auto l = random_logits(500, 3);
  std::vector<int> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  std::set<int> top(order.begin(), order.begin() + 5);
  Sampler s(SamplingParams{.temperature = 5.0f, .top_k = 5, .top_p = 1.0f, .min_p = 0.0f, .seed = 9});
  for (int i = 0; i < 2000; ++i) EXPECT_TRUE(top.count(s.sample(l, {}).token));
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  auto l = random_logits(300, 4);
  auto p = softmax(l);
  std::vector<int> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  const double top_p = 0.6;
  std::set<int> allowed;
  double cum = 0;
  for (int id : order) {
    allowed.insert(id);
    cum += p[id];
    if (cum >= top_p) break;
  }
  Sampler s(SamplingParams{.temperature = 3.0f, .top_k = 0, .top_p = 0.6f, .min_p = 0.0f, .seed = 5});
  std::set<int> seen;
  for (int i = 0; i < 5000; ++i) {
    int t = s.sample(l, {}).token;
    EXPECT_TRUE(allowed.count(t)) << t;
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), allowed.size());  // high temperature: every allowed token shows up
}

TEST(Sampler, MinPDropsTokensBelowTheFraction) {
  auto l = random_logits(200, 6);
  auto p = softmax(l);
  double pmax = *std::max_element(p.begin(), p.end());
  Sampler s(SamplingParams{.temperature = 2.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.2f, .seed = 1});
  for (int i = 0; i < 3000; ++i) EXPECT_GE(p[s.sample(l, {}).token], 0.2 * pmax - 1e-12);
}

TEST(Sampler, TemperatureSamplingFollowsTheSoftmax) {
  // Chi-square goodness of fit over a small vocabulary.
  auto l = random_logits(8, 7, 1.0f);
  const double temp = 0.7;
  auto p = softmax(l, temp);
  Sampler s(SamplingParams{.temperature = 0.7f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 11});
  const int n = 40000;
  std::vector<int> counts(8);
  for (int i = 0; i < n; ++i) counts[s.sample(l, {}).token]++;
  double chi2 = 0;
  for (int i = 0; i < 8; ++i) chi2 += std::pow(counts[i] - n * p[i], 2) / (n * p[i]);
  EXPECT_LT(chi2, 24.3);  // 7 degrees of freedom, p = 0.001
}

TEST(Sampler, SameSeedSameTokensOtherSeedOthers) {
  auto l = random_logits(1000, 8, 1.0f);
  SamplingParams prm{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 123};
  Sampler a(prm), b(prm);
  prm.seed = 124;
  Sampler c(prm);
  int same_ac = 0;
  for (int i = 0; i < 200; ++i) {
    int ta = a.sample(l, {}).token, tb = b.sample(l, {}).token, tc = c.sample(l, {}).token;
    EXPECT_EQ(ta, tb);
    same_ac += ta == tc;
  }
  EXPECT_LT(same_ac, 50);
}

TEST(Sampler, RepetitionPresenceAndFrequencyPenalties) {
  std::vector<float> l = {2.0f, -1.0f, 1.5f, 0.5f};
  std::vector<int32_t> hist = {0, 1, 0, 3};
  // Greedy after penalties: token 0 (2.0 / 2 = 1.0) loses to token 2 (1.5).
  Sampler rp(SamplingParams{.temperature = 0, .repeat_penalty = 2.0f});
  EXPECT_EQ(rp.sample(l, hist).token, 2);
  // Presence 0.3 + frequency 0.4 * count: token 0 -> 2.0 - 0.3 - 0.8 = 0.9 < 1.5.
  Sampler pf(SamplingParams{.temperature = 0, .presence_penalty = 0.3f, .frequency_penalty = 0.4f});
  EXPECT_EQ(pf.sample(l, hist).token, 2);
  // Only the last N tokens count: with repeat_last_n = 1 only token 3 is penalised.
  Sampler last(SamplingParams{.temperature = 0, .repeat_penalty = 100.0f, .repeat_last_n = 1});
  EXPECT_EQ(last.sample(l, hist).token, 0);
  // A negative logit is multiplied, pushing it further down.
  std::vector<float> neg = {-0.5f, -0.6f};
  Sampler m(SamplingParams{.temperature = 0, .repeat_penalty = 1.5f});
  EXPECT_EQ(m.sample(neg, std::vector<int32_t>{0}).token, 1);  // -0.75 < -0.6
}

TEST(Sampler, RejectsInvalidParameters) {
  EXPECT_THROW(Sampler(SamplingParams{.top_p = 0.0f}), std::exception);
  EXPECT_THROW(Sampler(SamplingParams{.min_p = 1.5f}), std::exception);
  EXPECT_THROW(Sampler(SamplingParams{.repeat_penalty = 0.0f}), std::exception);
}

}  // namespace
}  // namespace vi
