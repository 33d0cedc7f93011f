// CPU deferred norm (ops/deferred_norm.h) against the classic ops: matmul_add_deferred_norm's
// residual equals matmul + add_rms_norm's bit for bit, finish_deferred_norm(u, ss) their norm
// within fp32 rounding, and each consumer (matmul, matmul_split, matmul_swiglu) its plain op on
// that norm; the fixed-point sums of squares hold any f32 row to f32 precision, are added to (not
// overwritten) and keep a scratch's sites apart; shapes the ops refuse name the op. The sums16
// layout puts every 16-value group's (hi, lo) pair in its own slot, and the four pairs a lane of
// the Q4_K GEMV reads together are sub-blocks c and 4 + c of one super-block; a producer that
// writes no sums16 (the CPU) leaves sums_written false, and a malformed sums16 is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/deferred_norm.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/norm.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

TEST(CpuDeferredNorm, MatchesAddRmsNormAndItsConsumers) {
  const unsigned seed = test::test_seed();
  std::mt19937 rng(seed);
  ops::Context ctx;
  const int64_t d = 64, K = 48, N2 = 32;
  const float eps = 1e-6f;
  for (int64_t T : {1, 3, 8}) {
    for (float off : {0.0f, 1.0f}) {
      Tensor a = test::random_f32(rng, {T, K}), w = test::random_f32(rng, {d, K}, 0.2f);
      Tensor x = test::random_f32(rng, {T, d}, 3.0f), nw = test::random_f32(rng, {d}, 0.5f);
      Tensor w2 = test::random_f32(rng, {N2, d}, 0.2f);
      // Classic: o = a·wᵀ, x += o, n = norm(x).
      Tensor x1 = test::copy_of(x), o = Tensor::empty(DType::F32, {T, d}), n1 = Tensor::empty(DType::F32, {T, d});
      ops::matmul(ctx, a, w, o);
      ops::add_rms_norm(ctx, x1, o, nw, eps, off, n1);
      // Deferred.
      Tensor x2 = test::copy_of(x);
      ops::DeferredNorm dn = ops::deferred_norm_scratch(ctx, T, d, eps);
      ops::matmul_add_deferred_norm(ctx, a, w, x2, nw, off, dn);
      test::expect_bitwise_equal(x2, x1, "residual");
      Tensor n2 = Tensor::empty(DType::F32, {T, d});
      ops::finish_deferred_norm(ctx, dn, n2);
      std::vector<double> want(n1.ptr<float>(), n1.ptr<float>() + n1.numel());
      test::expect_close(n2, want, 1e-5, 1e-6, "finished norm");
      // Consumers against their plain ops on the classic norm.
      Tensor y1 = Tensor::empty(DType::F32, {T, N2}), y2 = Tensor::empty(DType::F32, {T, N2});
      ops::matmul(ctx, n1, w2, y1);
      ops::matmul_deferred(ctx, dn, w2, y2);
      test::expect_close(y2, std::vector<double>(y1.ptr<float>(), y1.ptr<float>() + y1.numel()), 1e-4, 1e-5,
                         "matmul_deferred");
      Tensor all = Tensor::empty(DType::F32, {T, N2}), p0 = Tensor::empty(DType::F32, {T, 16}),
             p1 = Tensor::empty(DType::F32, {T, 16});
      ops::matmul_split_deferred(ctx, dn, w2, all, {&p0, &p1});
      std::vector<double> w0, w1;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < N2; ++c) (c < 16 ? w0 : w1).push_back(y1.row<float>(t)[c]);
      test::expect_close(p0, w0, 1e-4, 1e-5, "matmul_split_deferred part 0");
      test::expect_close(p1, w1, 1e-4, 1e-5, "matmul_split_deferred part 1");
      Tensor gu = Tensor::empty(DType::F32, {T, N2}), h1 = Tensor::empty(DType::F32, {T, N2 / 2}),
             h2 = Tensor::empty(DType::F32, {T, N2 / 2});
      ops::matmul_swiglu(ctx, n1, w2, gu, h1);
      ops::matmul_swiglu_deferred(ctx, dn, w2, gu, h2);
      test::expect_close(h2, std::vector<double>(h1.ptr<float>(), h1.ptr<float>() + h1.numel()), 1e-4, 1e-5,
                         "matmul_swiglu_deferred");
    }
  }
}

// Rows whose squares span the fine and the coarse words (1e-6 .. 6e4, f16's range), against
// a double sum. The fine words' rounding is 2^-33 a value, the coarse words' 2^-21 relative.
TEST(CpuDeferredNorm, FixedPointSumsOfSquares) {
  const unsigned seed = test::test_seed();
  std::mt19937 rng(seed);
  ops::Context ctx;
  const int64_t T = 4, d = 5120;
  Tensor x = Tensor::empty(DType::F32, {T, d}), zero_o = Tensor::empty(DType::F32, {T, d});
  Tensor nw = test::random_f32(rng, {d}, 0.5f);
  std::uniform_real_distribution<float> mag(-6.0f, 4.8f);  // |x| = 10^mag
  std::bernoulli_distribution neg(0.5);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < d; ++i) {
      // Row 0 all tiny (its norm is eps-dominated), row 1 all large, rows 2, 3 mixed.
      const float m = t == 0 ? mag(rng) - 3.0f : t == 1 ? 3.0f + 0.3f * mag(rng) : mag(rng);
      x.row<float>(t)[i] = (neg(rng) ? -1.0f : 1.0f) * std::pow(10.0f, m);
      zero_o.row<float>(t)[i] = 0.0f;
    }
  ops::DeferredNorm all = ops::deferred_norm_scratch(ctx, T, d, 1e-6f, 3);
  for (int64_t site = 0; site < 3; ++site) {
    ops::DeferredNorm dn = ops::deferred_norm_site(all, site);
    for (int64_t t = 0; t < T; ++t) ASSERT_EQ(ops::deferred_norm_total(dn.ss, t), 0.0f) << "site " << site;
  }
  ops::DeferredNorm dn = ops::deferred_norm_site(all, 1);
  ops::add_deferred_norm(ctx, x, zero_o, nw, 1.0f, dn);
  for (int64_t t = 0; t < T; ++t) {
    double want = 0.0;
    for (int64_t i = 0; i < d; ++i) want += double(x.row<float>(t)[i]) * x.row<float>(t)[i];
    const double got = ops::deferred_norm_total(dn.ss, t);
    EXPECT_NEAR(got, want, 2e-7 * want + d * std::ldexp(1.0, -33)) << "row " << t << " seed " << seed;
    EXPECT_EQ(ops::deferred_norm_total(ops::deferred_norm_site(all, 0).ss, t), 0.0f) << "site 0 untouched";
    EXPECT_EQ(ops::deferred_norm_total(ops::deferred_norm_site(all, 2).ss, t), 0.0f) << "site 2 untouched";
  }
  // A second producer into the same set adds: the total doubles (exactly: integer words).
  const float once = ops::deferred_norm_total(dn.ss, 2);
  Tensor x_same = test::copy_of(x);
  ops::add_deferred_norm(ctx, x_same, zero_o, nw, 1.0f, dn);
  EXPECT_EQ(ops::deferred_norm_total(dn.ss, 2), 2.0f * once);
  // A non-finite residual value is clamped in the sums (finite, no wrap) and reaches u.
  ops::DeferredNorm bad = ops::deferred_norm_scratch(ctx, 1, 16, 1e-6f);
  Tensor xb = Tensor::empty(DType::F32, {1, 16}), ob = Tensor::empty(DType::F32, {1, 16}), nb = test::random_f32(rng, {16});
  for (int i = 0; i < 16; ++i) {
    xb.row<float>(0)[i] = 1.0f;
    ob.row<float>(0)[i] = 0.0f;
  }
  xb.row<float>(0)[3] = std::numeric_limits<float>::quiet_NaN();
  xb.row<float>(0)[7] = std::numeric_limits<float>::infinity();
  ops::add_deferred_norm(ctx, xb, ob, nb, 1.0f, bad);
  EXPECT_EQ(ops::deferred_norm_total(bad.ss, 0), 14.0f + 2.0f * ops::kDeferredNormClamp);
  EXPECT_TRUE(std::isnan(bad.u.row<float>(0)[3]));
  EXPECT_TRUE(std::isinf(bad.u.row<float>(0)[7]));
}

TEST(CpuDeferredNorm, RefusesMismatchedShapes) {
  std::mt19937 rng(1);
  ops::Context ctx;
  Tensor a = test::random_f32(rng, {2, 48}), w = test::random_f32(rng, {64, 48}), x = test::random_f32(rng, {2, 64});
  Tensor nw = test::random_f32(rng, {64});
  ops::DeferredNorm dn = ops::deferred_norm_scratch(ctx, 2, 64, 1e-6f);
  dn.ss = Tensor::empty(DType::F32, {2, 4});  // the sums are i64 words
  std::string msg = test::error_of([&] { ops::matmul_add_deferred_norm(ctx, a, w, x, nw, 1.0f, dn); });
  EXPECT_NE(msg.find("matmul_add_deferred_norm"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ss"), std::string::npos) << msg;
  std::string msg2 = test::error_of([&] { ops::deferred_norm_scratch(ctx, 2, 65537, 1e-6f); });
  EXPECT_NE(msg2.find("at most 65536"), std::string::npos) << msg2;
  ops::DeferredNorm two = ops::deferred_norm_scratch(ctx, 2, 64, 1e-6f, 2);
  std::string msg5 = test::error_of([&] { ops::deferred_norm_site(two, 2); });
  EXPECT_NE(msg5.find("site 2"), std::string::npos) << msg5;
  ops::DeferredNorm ok = ops::deferred_norm_scratch(ctx, 2, 64, 1e-6f);
  Tensor w2 = test::random_f32(rng, {32, 64}), y_bad = Tensor::empty(DType::F32, {2, 31});
  std::string msg3 = test::error_of([&] { ops::matmul_deferred(ctx, ok, w2, y_bad); });
  EXPECT_NE(msg3.find("matmul_deferred"), std::string::npos) << msg3;
  Tensor w_bad = test::random_f32(rng, {32, 48}), y = Tensor::empty(DType::F32, {2, 32});
  std::string msg4 = test::error_of([&] { ops::matmul_deferred(ctx, ok, w_bad, y); });
  EXPECT_NE(msg4.find("[N, 64]"), std::string::npos) << msg4;
}

TEST(CpuDeferredNorm, SumsLayoutAndFlag) {
  // 3 super-blocks of 256 values: 48 groups of 16 in 3 x 32 halves.
  std::vector<int> seen(96, 0);
  for (int64_t i = 0; i < 48; ++i) {
    const int64_t at = ops::deferred_norm_sums_index(i);
    ASSERT_GE(at, 0);
    ASSERT_LT(at + 1, 96);
    EXPECT_EQ(at % 2, 0) << "group " << i << ": hi at an odd half";
    ++seen[at];
    ++seen[at + 1];
    // The 16-byte run of lane c of super-block s holds (sub-block c, halves 0 and 1), then
    // (sub-block 4 + c, halves 0 and 1).
    const int64_t s = i / 16, j = (i % 16) / 2, half = i % 2, c = j % 4;
    EXPECT_EQ(at, 32 * s + 8 * c + 4 * (j / 4) + 2 * half) << "group " << i;
  }
  for (int k = 0; k < 96; ++k) EXPECT_EQ(seen[k], 1) << "half " << k;

  std::mt19937 rng(2);
  ops::Context ctx;
  const int64_t d = 256;
  Tensor a = test::random_f32(rng, {2, 48}), w = test::random_f32(rng, {d, 48}), x = test::random_f32(rng, {2, d});
  Tensor nw = test::random_f32(rng, {d});
  ops::DeferredNorm dn = ops::deferred_norm_scratch(ctx, 2, d, 1e-6f);
  ASSERT_EQ(dn.sums16.dtype(), DType::F16);
  ASSERT_EQ(dn.sums16.cols(), d / 8);
  dn.sums_written = true;  // a stale flag: the op clears it, the CPU writes no sums
  ops::matmul_add_deferred_norm(ctx, a, w, x, nw, 1.0f, dn);
  EXPECT_FALSE(dn.sums_written);
  EXPECT_EQ(ops::deferred_norm_scratch(ctx, 2, 64, 1e-6f).sums16.data(), nullptr) << "d % 256 != 0: no sums16";
  dn.sums16 = Tensor::empty(DType::F16, {2, d / 16});
  const std::string msg = test::error_of([&] { ops::matmul_add_deferred_norm(ctx, a, w, x, nw, 1.0f, dn); });
  EXPECT_NE(msg.find("sums16"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vi
