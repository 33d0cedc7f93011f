// The GPU tests' fast uniform fill (tests/unit/fast_uniform.h): its f16 rounding is round_fp16's
// bit for bit, and its values cover [lo, hi) uniformly and follow the seed.
#include "unit/fast_uniform.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace vi::testutil {
namespace {

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}
float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof(x));
  return x;
}

void expect_same_round(float x) {
  const float want = round_fp16(x), got = FastUniform::round_f16(x);
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << "x bits " << std::hex << bits_of(x);
  } else {
    EXPECT_EQ(bits_of(got), bits_of(want)) << "x bits " << std::hex << bits_of(x);
  }
}

TEST(FastUniform, RoundF16IsRoundFp16) {
  // Edges: zeros, the subnormal / normal boundary, ties, the largest half, overflow, inf, NaN.
  for (float x : {0.0f, -0.0f, 0x1p-25f, 0x1p-24f, 0x1p-15f, 0x1p-14f, -0x1p-14f, 1.0f, 1.0f + 0x1p-11f,
                  1.0f + 0x1p-11f + 0x1p-23f, 1.0f + 0x3p-11f, 2047.5f, 2048.5f, 65504.0f, 65519.0f, 65520.0f,
                  -65520.0f, 1e9f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    expect_same_round(x);
  // Every exponent, random mantissas and signs.
  std::mt19937 g(7);
  for (int i = 0; i < 200000; ++i) expect_same_round(from_bits(static_cast<uint32_t>(g())));
  // Halfway cases (the 13 dropped bits 0x1000) in the normal range, both mantissa parities.
  for (uint32_t e = 113; e < 143; ++e)
    for (uint32_t m : {0x1000u, 0x3000u, 0x7ff000u, 0x5000u}) expect_same_round(from_bits((e << 23) | m));
}

TEST(FastUniform, FillCoversTheRangeUniformly) {
  for (const bool f16 : {false, true}) {
    FastUniform u(12345);
    const int64_t n = 1000001;  // odd: the last value comes from a draw of its own
    std::vector<float> v(n, std::numeric_limits<float>::quiet_NaN());
    const float lo = -2.0f, hi = 2.0f;
    u.fill(v.data(), n, lo, hi, f16);
    double sum = 0, sum2 = 0;
    int64_t neg = 0, low_bin = 0, high_bin = 0;
    for (float x : v) {
      ASSERT_FALSE(std::isnan(x));
      ASSERT_GE(x, lo);
      ASSERT_LE(x, hi);  // an f16 round may reach hi itself
      if (f16) {
        ASSERT_EQ(bits_of(round_fp16(x)), bits_of(x));
      } else {
        ASSERT_LT(x, hi);
      }
      sum += x, sum2 += double(x) * x;
      neg += x < 0;
      low_bin += x < lo + 0.04f;
      high_bin += x >= hi - 0.04f;
    }
    const double mean = sum / n, var = sum2 / n - mean * mean;
    EXPECT_NEAR(mean, 0.0, 0.01) << "f16 " << f16;
    EXPECT_NEAR(var, 16.0 / 12.0, 0.01) << "f16 " << f16;
    EXPECT_NEAR(double(neg) / n, 0.5, 0.005) << "f16 " << f16;
    // 1% of the range at each end holds ~1% of the values.
    EXPECT_NEAR(double(low_bin) / n, 0.01, 0.001) << "f16 " << f16;
    EXPECT_NEAR(double(high_bin) / n, 0.01, 0.001) << "f16 " << f16;
  }
}

TEST(FastUniform, TheSeedDecidesTheValues) {
  std::vector<float> a(1001), b(1001), c(1001);
  FastUniform(99).fill(a.data(), 1001, 0.5f, 1.5f, false);
  FastUniform(99).fill(b.data(), 1001, 0.5f, 1.5f, false);
  FastUniform(100).fill(c.data(), 1001, 0.5f, 1.5f, false);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
  EXPECT_LT(same, 5);
}

}  // namespace
}  // namespace vi::testutil
