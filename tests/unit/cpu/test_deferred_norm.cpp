// CPU deferred norm (ops/deferred_norm.h) against the classic ops: matmul_add_deferred_norm's
// residual equals matmul + add_rms_norm's bit for bit, finish_deferred_norm(u, ss) their norm
// within fp32 rounding, and each consumer (matmul, matmul_split, matmul_swiglu) its plain op on
// that norm; shapes the ops refuse name the op.
#include <gtest/gtest.h>

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

TEST(CpuDeferredNorm, RefusesMismatchedShapes) {
  std::mt19937 rng(1);
  ops::Context ctx;
  Tensor a = test::random_f32(rng, {2, 48}), w = test::random_f32(rng, {64, 48}), x = test::random_f32(rng, {2, 64});
  Tensor nw = test::random_f32(rng, {64});
  ops::DeferredNorm dn = ops::deferred_norm_scratch(ctx, 2, 64, 1e-6f);
  dn.ss = Tensor::empty(DType::F32, {2, 3});  // 64 / 8 = 8 parts
  std::string msg = test::error_of([&] { ops::matmul_add_deferred_norm(ctx, a, w, x, nw, 1.0f, dn); });
  EXPECT_NE(msg.find("matmul_add_deferred_norm"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ss"), std::string::npos) << msg;
  std::string msg2 = test::error_of([&] { ops::deferred_norm_scratch(ctx, 2, 60, 1e-6f); });
  EXPECT_NE(msg2.find("multiple of 8"), std::string::npos) << msg2;
  ops::DeferredNorm ok = ops::deferred_norm_scratch(ctx, 2, 64, 1e-6f);
  Tensor w2 = test::random_f32(rng, {32, 64}), y_bad = Tensor::empty(DType::F32, {2, 31});
  std::string msg3 = test::error_of([&] { ops::matmul_deferred(ctx, ok, w2, y_bad); });
  EXPECT_NE(msg3.find("matmul_deferred"), std::string::npos) << msg3;
  Tensor w_bad = test::random_f32(rng, {32, 48}), y = Tensor::empty(DType::F32, {2, 32});
  std::string msg4 = test::error_of([&] { ops::matmul_deferred(ctx, ok, w_bad, y); });
  EXPECT_NE(msg4.find("[N, 64]"), std::string::npos) << msg4;
}

}  // namespace
}  // namespace vi
