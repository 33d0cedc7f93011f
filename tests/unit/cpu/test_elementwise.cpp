// CPU add, swiglu, sigmoid_mul and softmax vs double-precision formulas; swiglu_halves vs
// swiglu on the two halves (bit for bit).
#include <gtest/gtest.h>

#include "ops/elementwise.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(CpuElementwise, BinaryOpsMatchDouble) {
  const unsigned seed = test::test_seed();
  std::mt19937 rng(seed);
  for (int64_t R : {1, 3, 17, 97}) {
    for (int64_t n : {1, 64, 1536, 4099}) {
      Tensor a = test::random_f32(rng, {R, n}, 4.0f);
      Tensor b = test::random_f32(rng, {R, n}, 4.0f);
      Tensor y = Tensor::empty(DType::F32, {R, n});
      Tensor y3 = Tensor::empty(DType::F32, {R, n});
      ThreadPool p1(1), p3(3);
      ops::Context c1{Device::CPU, &p1}, c3{Device::CPU, &p3};
      const float* ap = a.ptr<float>();
      const float* bp = b.ptr<float>();
      const std::string sz = " R=" + std::to_string(R) + " n=" + std::to_string(n);
      std::vector<double> want(static_cast<size_t>(R * n));

      ops::add(c1, a, b, y);
      ops::add(c3, a, b, y3);
      for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<double>(ap[i]) + bp[i];
      test::expect_close(y, want, 6e-8, 0.0, "add" + sz);
      test::expect_bitwise_equal(y, y3, "add");

      ops::swiglu(c1, a, b, y);
      ops::swiglu(c3, a, b, y3);
      for (size_t i = 0; i < want.size(); ++i) want[i] = ap[i] * sigmoid(ap[i]) * bp[i];
      test::expect_close(y, want, 1e-6, 1e-30, "swiglu" + sz);
      test::expect_bitwise_equal(y, y3, "swiglu");

      ops::sigmoid_mul(c1, a, b, y);
      ops::sigmoid_mul(c3, a, b, y3);
      for (size_t i = 0; i < want.size(); ++i) want[i] = ap[i] * sigmoid(bp[i]);
      test::expect_close(y, want, 1e-6, 1e-30, "sigmoid_mul" + sz);
      test::expect_bitwise_equal(y, y3, "sigmoid_mul");
    }
  }
}

TEST(CpuElementwise, SoftmaxMatchesDouble) {
  const unsigned seed = test::test_seed();
  std::mt19937 rng(seed);
  for (int64_t R : {1, 3, 17, 97}) {
    for (int64_t n : {1, 5, 64, 1000}) {
      Tensor x = test::random_f32(rng, {R, n}, 10.0f);
      Tensor y = Tensor::empty(DType::F32, {R, n});
      ThreadPool p3(3);
      ops::Context c3{Device::CPU, &p3};
      ops::softmax(c3, x, y);
      std::vector<double> want;
      for (int64_t r = 0; r < R; ++r) {
        const float* xr = x.row<float>(r);
        double mx = -1e300, sum = 0;
        for (int64_t i = 0; i < n; ++i) mx = std::max<double>(mx, xr[i]);
        for (int64_t i = 0; i < n; ++i) sum += std::exp(xr[i] - mx);
        for (int64_t i = 0; i < n; ++i) want.push_back(std::exp(xr[i] - mx) / sum);
      }
      // fp32 sum over n terms: n/2 ulps worst case relative.
      test::expect_close(y, want, 1e-6 + 6e-8 * n, 1e-12, "softmax n=" + std::to_string(n));
      ops::softmax(c3, x, x);  // in place
      test::expect_bitwise_equal(x, y, "softmax in place");
    }
  }
}

// A stacked [gate | up] row gives what swiglu gives on the gate and up rows apart.
TEST(CpuElementwise, SwigluHalvesEqualsSwigluOfTheHalves) {
  const unsigned seed = test::test_seed();
  std::mt19937 rng(seed);
  ThreadPool p3(3);
  ops::Context c1, c3{Device::CPU, &p3};
  for (int64_t R : {1, 3, 17, 97}) {
    for (int64_t F : {1, 64, 1536, 4099}) {
      const std::string sz = " R=" + std::to_string(R) + " F=" + std::to_string(F);
      Tensor gu = test::random_f32(rng, {R, 2 * F}, 4.0f);
      Tensor gate = Tensor::empty(DType::F32, {R, F}), up = Tensor::empty(DType::F32, {R, F});
      for (int64_t r = 0; r < R; ++r) {
        std::memcpy(gate.row<float>(r), gu.row<float>(r), F * sizeof(float));
        std::memcpy(up.row<float>(r), gu.row<float>(r) + F, F * sizeof(float));
      }
      Tensor want = Tensor::empty(DType::F32, {R, F}), y = Tensor::empty(DType::F32, {R, F});
      ops::swiglu(c1, gate, up, want);
      ops::swiglu_halves(c3, gu, y);
      test::expect_bitwise_equal(y, want, "swiglu_halves" + sz);
    }
  }
}

TEST(CpuElementwise, SwigluHalvesErrors) {
  ops::Context ctx;
  Tensor gu = Tensor::empty(DType::F32, {3, 128});
  Tensor y_bad = Tensor::empty(DType::F32, {3, 65});
  std::string msg = test::error_of([&] { ops::swiglu_halves(ctx, gu, y_bad); });
  EXPECT_NE(msg.find("swiglu_halves"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3, 65]"), std::string::npos) << msg;
  Tensor in_place = gu.reshape({6, 64}).slice_rows(0, 3);  // the first half of gu's storage
  msg = test::error_of([&] { ops::swiglu_halves(ctx, gu, in_place); });
  EXPECT_NE(msg.find("overlaps"), std::string::npos) << msg;
}

TEST(CpuElementwise, Errors) {
  ops::Context ctx;
  Tensor a = Tensor::empty(DType::F32, {3, 64});
  Tensor b = Tensor::empty(DType::F32, {3, 63});
  Tensor y = Tensor::empty(DType::F32, {3, 64});
  std::string msg = test::error_of([&] { ops::swiglu(ctx, a, b, y); });
  EXPECT_NE(msg.find("swiglu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3, 63]"), std::string::npos) << msg;
  Tensor h = Tensor::empty(DType::F16, {3, 64});
  Tensor h2 = Tensor::empty(DType::F16, {3, 64});
  Tensor h3 = Tensor::empty(DType::F16, {3, 64});
  msg = test::error_of([&] { ops::add(ctx, h, h2, h3); });
  EXPECT_NE(msg.find("add"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f16"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vi
