// Shared helpers for the CPU op tests: seeded random tensors (the seed is printed so a
// failure can be replayed with VI_TEST_SEED=<n>), double-precision comparisons, and
// a way to run one op on pools of different sizes.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/registry.h"

namespace vi::test {

// Fresh seed per run unless VI_TEST_SEED is set; printed and attached to failures.
inline unsigned test_seed() {
  const char* env = std::getenv("VI_TEST_SEED");
  const unsigned seed = env ? static_cast<unsigned>(std::strtoul(env, nullptr, 10)) : std::random_device{}();
  std::printf("[ seed     ] %u (replay: VI_TEST_SEED=%u)\n", seed, seed);
  return seed;
}

inline Tensor random_f32(std::mt19937& rng, std::vector<int64_t> shape, float scale = 1.0f) {
  Tensor t = Tensor::empty(DType::F32, shape);
  std::normal_distribution<float> nd(0.0f, scale);
  float* p = t.ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = nd(rng);
  return t;
}

inline Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.dtype(), t.shape());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

// Expects |got - want| <= atol + rtol * |want| everywhere; reports the first few misses.
inline void expect_close(const Tensor& got, const std::vector<double>& want, double rtol, double atol,
                         const std::string& what) {
  ASSERT_EQ(got.dtype(), DType::F32);
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  const float* g = got.ptr<float>();
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(g[i] - want[i]);
    const double tol = atol + rtol * std::fabs(want[i]);
    worst = std::max(worst, err / tol);
    if (!(err <= tol) && bad++ < 8) ADD_FAILURE() << what << " element " << i << ": got " << g[i] << " want " << want[i] << " (err " << err << ", tol " << tol << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " elements off; worst err/tol " << worst;
}

inline void expect_bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.nbytes(), b.nbytes());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << what << ": results differ between thread counts";
}

// Message of the vi::Error thrown by fn (fails the test if nothing is thrown).
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a vi::Error";
  return "";
}

}  // namespace vi::test
