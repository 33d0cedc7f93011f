// CPU rms_norm vs a double-precision loop, with and without the (1 + w) offset; add_rms_norm
// vs ops::add then ops::rms_norm (bit for bit).
#include <gtest/gtest.h>

#include "ops/elementwise.h"
#include "ops/norm.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

TEST(CpuRmsNorm, MatchesDoubleReference) {
  const unsigned seed = test::test_seed();
  std::mt19937 rng(seed);
  for (int64_t R : {1, 3, 17, 97}) {
    for (int64_t n : {1, 64, 80, 576, 1001}) {
      for (float off : {0.0f, 1.0f}) {
        const float eps = 1e-6f;
        Tensor x = test::random_f32(rng, {R, n}, 3.0f);
        Tensor w = test::random_f32(rng, {n}, 0.5f);
        Tensor y1 = Tensor::empty(DType::F32, {R, n});
        Tensor y3 = Tensor::empty(DType::F32, {R, n});
        ThreadPool p1(1), p3(3);
        ops::Context c1{Device::CPU, &p1}, c3{Device::CPU, &p3};
        ops::rms_norm(c1, x, w, eps, off, y1);
        ops::rms_norm(c3, x, w, eps, off, y3);
        std::vector<double> want;
        for (int64_t r = 0; r < R; ++r) {
          const float* xr = x.row<float>(r);
          double ss = 0;
          for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
          const double inv = 1.0 / std::sqrt(ss / n + eps);
          for (int64_t i = 0; i < n; ++i) want.push_back(xr[i] * inv * (w.ptr<float>()[i] + off));
        }
        // fp32: sum of squares (~n ulps worst case) and three roundings per element.
        test::expect_close(y1, want, 2e-6 + 1e-7 * n / 10, 1e-7,
                           "rms_norm R=" + std::to_string(R) + " n=" + std::to_string(n));
        test::expect_bitwise_equal(y1, y3, "rms_norm");
      }
    }
  }
}

TEST(CpuRmsNorm, InPlaceAndErrors) {
  const unsigned seed = test::test_seed();
  std::mt19937 rng(seed);
  ops::Context ctx;
  Tensor x = test::random_f32(rng, {3, 64});
  Tensor w = test::random_f32(rng, {64});
  Tensor y = Tensor::empty(DType::F32, {3, 64});
  ops::rms_norm(ctx, x, w, 1e-5f, 0.0f, y);
  ops::rms_norm(ctx, x, w, 1e-5f, 0.0f, x);  // y aliases x
  test::expect_bitwise_equal(x, y, "in place");

  Tensor wbad = Tensor::empty(DType::F32, {63});
  std::string msg = test::error_of([&] { ops::rms_norm(ctx, x, wbad, 1e-5f, 0.0f, y); });
  EXPECT_NE(msg.find("rms_norm"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[63]"), std::string::npos) << msg;
  Tensor xh = Tensor::empty(DType::BF16, {3, 64});
  Tensor yh = Tensor::empty(DType::BF16, {3, 64});
  msg = test::error_of([&] { ops::rms_norm(ctx, xh, w, 1e-5f, 0.0f, yh); });
  EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;
}

// The fused op must leave exactly what add-then-norm leaves: x = x + o and y = rms_norm(x),
// bit for bit, on any pool size; y may alias o.
TEST(CpuAddRmsNorm, EqualsAddThenRmsNorm) {
  const unsigned seed = test::test_seed();
  std::mt19937 rng(seed);
  ThreadPool p1(1), p3(3);
  ops::Context c1{Device::CPU, &p1}, c3{Device::CPU, &p3};
  for (int64_t R : {1, 3, 17, 97}) {
    for (int64_t n : {1, 64, 80, 576, 1001}) {
      for (float off : {0.0f, 1.0f}) {
        const std::string sz = " R=" + std::to_string(R) + " n=" + std::to_string(n) + " off=" + std::to_string(off);
        Tensor x = test::random_f32(rng, {R, n}, 3.0f), o = test::random_f32(rng, {R, n}, 3.0f);
        Tensor w = test::random_f32(rng, {n}, 0.5f);
        Tensor x_ref = test::copy_of(x), y_ref = Tensor::empty(DType::F32, {R, n});
        ops::add(c1, x_ref, o, x_ref);
        ops::rms_norm(c1, x_ref, w, 1e-6f, off, y_ref);

        Tensor x1 = test::copy_of(x), y1 = Tensor::empty(DType::F32, {R, n});
        ops::add_rms_norm(c1, x1, o, w, 1e-6f, off, y1);
        test::expect_bitwise_equal(x1, x_ref, "residual" + sz);
        test::expect_bitwise_equal(y1, y_ref, "norm" + sz);

        Tensor x3 = test::copy_of(x), o3 = test::copy_of(o);
        ops::add_rms_norm(c3, x3, o3, w, 1e-6f, off, o3);  // y aliases o, 3 threads
        test::expect_bitwise_equal(x3, x_ref, "residual, y = o, 3 threads" + sz);
        test::expect_bitwise_equal(o3, y_ref, "norm, y = o, 3 threads" + sz);
      }
    }
  }
}

TEST(CpuAddRmsNorm, Errors) {
  const unsigned seed = test::test_seed();
  std::mt19937 rng(seed);
  ops::Context ctx;
  Tensor x = test::random_f32(rng, {3, 64}), o = test::random_f32(rng, {3, 64}), w = test::random_f32(rng, {64});
  Tensor y = Tensor::empty(DType::F32, {3, 64});
  std::string msg = test::error_of([&] { ops::add_rms_norm(ctx, x, o, w, 1e-6f, 0.0f, x); });
  EXPECT_NE(msg.find("alias"), std::string::npos) << msg;
  Tensor o_bad = Tensor::empty(DType::F32, {3, 63});
  msg = test::error_of([&] { ops::add_rms_norm(ctx, x, o_bad, w, 1e-6f, 0.0f, y); });
  EXPECT_NE(msg.find("[3, 63]"), std::string::npos) << msg;
  Tensor w_bad = Tensor::empty(DType::F32, {63});
  msg = test::error_of([&] { ops::add_rms_norm(ctx, x, o, w_bad, 1e-6f, 0.0f, y); });
  EXPECT_NE(msg.find("[63]"), std::string::npos) << msg;
  Tensor y_bad = Tensor::empty(DType::F32, {64, 3});
  msg = test::error_of([&] { ops::add_rms_norm(ctx, x, o, w, 1e-6f, 0.0f, y_bad); });
  EXPECT_NE(msg.find("[64, 3]"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vi
