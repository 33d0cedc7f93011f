// core/quant: dequantize_row against the PyPI gguf package's numpy dequantizers
// (fixtures from tests/data/quant/make_fixtures.py), quantize_row against gguf's
// bit-exact quantizers where it has them, and quantize->dequantize error bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"

namespace vi {
namespace {

std::vector<uint8_t> read_bytes(const std::string& name) {
  const std::string path = std::string(VI_TEST_DATA_DIR) + "/quant/" + name;
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing fixture " << path << " (run tests/data/quant/make_fixtures.py)";
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<float> read_floats(const std::string& name) {
  std::vector<uint8_t> b = read_bytes(name);
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}

const DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                              DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

class DequantFixture : public ::testing::TestWithParam<DType> {};

// The fixtures' scales and (for F16/BF16) values are exact fp16/bf16 numbers and gguf
// computes in float32 with separately rounded operations, like quant.cpp: bit-exact.
TEST_P(DequantFixture, MatchesGgufPackage) {
  const DType t = GetParam();
  const std::string name = dtype_name(t);
  std::vector<uint8_t> raw = read_bytes(name + ".raw");
  std::vector<float> want = read_floats(name + ".deq");
  ASSERT_FALSE(want.empty());
  ASSERT_EQ(raw.size(), dtype_row_bytes(t, static_cast<int64_t>(want.size())));
  std::vector<float> got(want.size(), std::nanf(""));
  dequantize_row(t, raw.data(), got.data(), static_cast<int64_t>(want.size()));
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i] && bad++ < 10) ADD_FAILURE() << name << " value " << i << ": got " << got[i] << " want " << want[i];
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Quant, DequantFixture,
                         ::testing::Values(DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0,
                                           DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

class QuantizeFixture : public ::testing::TestWithParam<DType> {};

TEST_P(QuantizeFixture, BitExactWithGgufPackage) {
  const DType t = GetParam();
  const std::string name = dtype_name(t);
  std::vector<float> src = read_floats(name + ".src");
  std::vector<uint8_t> want = read_bytes(name + ".q");
  ASSERT_EQ(want.size(), dtype_row_bytes(t, static_cast<int64_t>(src.size())));
  std::vector<uint8_t> got(want.size(), 0xAB);
  quantize_row(t, src.data(), got.data(), static_cast<int64_t>(src.size()));
  const int be = dtype_info(t).block_elems, bb = dtype_info(t).block_bytes;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << name << " byte " << i << " (block " << i / bb << ", values from "
                               << (i / bb) * be << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Quant, QuantizeFixture,
                         ::testing::Values(DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Round trip: every value must land within the format's step of the input. Bounds per
// block are derived from the block's own range, independent of the quantizer's choices:
//   Q8_0: amax/127 * 0.5 (+ fp16 rounding of d: 127 steps * 2^-11 relative)
//   Q4_0: amax/8 (half a step of amax/8, and one step at the clamped +8 end)
//   Q4_1: (max-min)/15 * 0.5 + fp16 rounding of d and m
//   Q4_K/Q5_K: half a sub-block step + the 6-bit rounding of scale and min
//   Q6_K: half a group step + the 8-bit rounding of the group scale
double bound_for(DType t, const float* x, int i, int64_t n) {
  auto range = [&](int64_t begin, int64_t len, double& mn, double& mx, double& amax) {
    mn = 0, mx = 0, amax = 0;
    mn = mx = x[begin];
    for (int64_t k = begin; k < begin + len; ++k) {
      mn = std::min<double>(mn, x[k]);
      mx = std::max<double>(mx, x[k]);
      amax = std::max<double>(amax, std::fabs(x[k]));
    }
  };
  double mn, mx, amax;
  switch (t) {
    case DType::F32: return 0.0;
    case DType::F16: return std::max(std::fabs(x[i]) * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
    case DType::BF16: return std::fabs(x[i]) * std::ldexp(1.0, -8);
    case DType::Q8_0:
      range(i / 32 * 32, 32, mn, mx, amax);
      // Half a step, plus 127 times the f16 rounding of the scale d = amax / 127: relative
      // 2^-11, but absolute 2^-25 once d is an f16 subnormal (amax below ~7.8e-3).
      return amax / 127 * 0.5 + amax * std::ldexp(1.0, -10) + 127 * std::ldexp(1.0, -25) + 1e-7;
    case DType::Q4_0:
      range(i / 32 * 32, 32, mn, mx, amax);
      return amax / 8 * 1.01 + 1e-7;
    case DType::Q4_1:
      range(i / 32 * 32, 32, mn, mx, amax);
      return (mx - mn) / 15 * 0.5 + amax * std::ldexp(1.0, -9) + 1e-7;
    case DType::Q4_K:
    case DType::Q5_K: {
      const double nmax = t == DType::Q4_K ? 15 : 31;
      range(i / 32 * 32, 32, mn, mx, amax);
      const double sub = (std::max(mx, 0.0) - std::min(mn, 0.0)) / nmax;
      double max_scale = 0, max_min = 0;
      for (int j = 0; j < 8; ++j) {
        double a, b, c;
        range(i / 256 * 256 + 32 * j, 32, a, b, c);
        max_scale = std::max(max_scale, (std::max(b, 0.0) - std::min(a, 0.0)) / nmax);
        max_min = std::max(max_min, -std::min(a, 0.0));
      }
      return 0.5 * (sub + max_scale / 63) * 1.002 + 0.5 * max_min / 63 * 1.002 + amax * 1e-3 + 1e-7;
    }
    case DType::Q6_K: {
      range(i / 16 * 16, 16, mn, mx, amax);
      double max_scale = 0;
      for (int g = 0; g < 16; ++g) {
        double a, b, c;
        range(i / 256 * 256 + 16 * g, 16, a, b, c);
        max_scale = std::max(max_scale, c / 31);
      }
      return 0.5 * (amax / 31 + max_scale / 127) * 1.002 + amax * 1e-3 + 1e-7;
    }
    default: return 0.0;
  }
}

class RoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(RoundTrip, ErrorWithinFormatStep) {
  const DType t = GetParam();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  const int64_t n = 256 * 5;
  std::vector<float> x(n);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t blk = i / 256;  // vary the character block by block
    if (blk == 0) x[i] = nd(rng) * 0.02f;
    else if (blk == 1) x[i] = ud(rng) + 0.5f;        // all positive: min > 0
    else if (blk == 2) x[i] = -ud(rng) * 3.0f;       // all negative
    else if (blk == 3) x[i] = nd(rng) * (i % 64 < 32 ? 5.0f : 0.001f);  // mixed scales
    else x[i] = (i % 7 == 0) ? 0.0f : nd(rng);
  }
  std::vector<uint8_t> q(dtype_row_bytes(t, n));
  std::vector<float> y(n);
  quantize_row(t, x.data(), q.data(), n);
  dequantize_row(t, q.data(), y.data(), n);
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double err = std::fabs(static_cast<double>(y[i]) - x[i]);
    const double b = bound_for(t, x.data(), static_cast<int>(i), n);
    if (!(err <= b) && bad++ < 10) ADD_FAILURE() << dtype_name(t) << " value " << i << " = " << x[i] << " -> " << y[i] << " err " << err << " > bound " << b;
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Quant, RoundTrip, ::testing::ValuesIn(kWeightTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Quant, RejectsBadDtypeAndLength) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> q(256);
  try {
    quantize_row(DType::I32, x.data(), q.data(), 64);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("i32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dequantize_row(DType::Q4_K, q.data(), x.data(), 64), Error);   // not 256-aligned
  EXPECT_THROW(quantize_row(DType::Q8_0, x.data(), q.data(), 33), Error);
}


// Q8_KX (int8 activations for the Q4_KI GEMV, core/dtype.h): d = max|x| / 127 per 256 values,
// q = round-to-nearest-even(x · 127 / max|x|), stored where the GEMV's lanes read them, with each
// 32-value sub-block's sum in two exact fp16 parts. Checked against a direct computation of
// those rules, not against the code's own helpers.
TEST(Quant, Q8KXActivationBlocks) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> x(768);
  for (float& v : x) v = u(rng);
  x[5] = 40.0f;                                      // block 0: one large value sets its scale
  for (int i = 256; i < 512; ++i) x[i] = 0.0f;       // block 1: all zero (scale 0)
  std::vector<uint8_t> q(dtype_row_bytes(DType::Q8_KX, 768));
  ASSERT_EQ(q.size(), 3u * sizeof(BlockQ8_KX));
  quantize_row(DType::Q8_KX, x.data(), q.data(), 768);
  std::vector<float> back(768);
  dequantize_row(DType::Q8_KX, q.data(), back.data(), 768);
  for (int b = 0; b < 3; ++b) {
    const auto& blk = reinterpret_cast<const BlockQ8_KX*>(q.data())[b];
    float amax = 0;
    for (int i = 0; i < 256; ++i) amax = std::max(amax, std::fabs(x[256 * b + i]));
    EXPECT_EQ(blk.d, amax / 127.0f) << b;
    for (uint8_t p : blk.pad) EXPECT_EQ(p, 0);
    for (int s = 0; s < 8; ++s) {
      int sum = 0;
      for (int v = 0; v < 32; ++v) {
        const int k = 256 * b + 32 * s + v;
        const int want = amax > 0 ? static_cast<int>(std::nearbyint(x[k] * (127.0f / amax))) : 0;
        // Where the GEMV's lane c (4c .. 4c + 3 and 16 + 4c ..) reads value v of sub-block s.
        const int pos = 64 * ((v % 16) / 4) + 16 * (s % 4) + 4 * (2 * (s / 4) + v / 16) + v % 4;
        EXPECT_EQ(blk.qs[pos], want) << "block " << b << " sub-block " << s << " value " << v;
        EXPECT_EQ(back[k], static_cast<float>(want) * blk.d);
        sum += want;
      }
      const float hi = fp16_to_fp32(blk.s[4 * (s / 2) + s % 2]), lo = fp16_to_fp32(blk.s[4 * (s / 2) + 2 + s % 2]);
      EXPECT_EQ(hi + lo, static_cast<float>(sum)) << "block " << b << " sub-block " << s;
      EXPECT_EQ(std::fmod(hi, 32.0f), 0.0f);
      EXPECT_TRUE(lo >= 0.0f && lo < 32.0f) << lo;
    }
  }
  EXPECT_FALSE(quant_supported(DType::Q8_KX));  // activations, not a weight dtype
  EXPECT_THROW(quantize_row(DType::Q8_KX, x.data(), q.data(), 100), Error);
}

}  // namespace
}  // namespace vi
