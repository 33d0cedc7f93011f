// fp16/bf16 conversions against exhaustive and hand-picked values.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/half.h"

namespace vi {
namespace {

TEST(Half, Fp16RoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(fp32_to_fp16(f), h) << "bits " << h;
  }
}

TEST(Half, Fp16KnownValues) {
  EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);      // rounds up to inf
  EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
}

TEST(Half, Fp16RoundingMatchesDoubleNearest) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-70000.0f, 70000.0f);
  for (int i = 0; i < 200000; ++i) {
    float f = dist(rng) * (i % 3 == 0 ? 1e-5f : 1.0f);
    uint16_t h = fp32_to_fp16(f);
    double got = fp16_to_fp32(h);
    if (std::isinf(got)) {
      EXPECT_GE(std::fabs(f), 65504.0f);
      continue;
    }
    // No other half value may be strictly closer.
    double lo = fp16_to_fp32(static_cast<uint16_t>(h - 1));
    double hi = fp16_to_fp32(static_cast<uint16_t>(h + 1));
    double err = std::fabs(got - f);
    if ((h & 0x7fff) != 0) { EXPECT_LE(err, std::fabs(lo - f)) << f; }
    if ((h & 0x7fff) != 0x7bff) { EXPECT_LE(err, std::fabs(hi - f)) << f; }
  }
}

TEST(Half, Bf16) {
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(round_bf16(1.00390625f), 1.0f);      // exactly half an ulp: ties to even
  EXPECT_EQ(round_bf16(1.01171875f), 1.015625f);  // 1.5 ulp: ties to even (up)
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::nanf("")))));
}

}  // namespace
}  // namespace vi
