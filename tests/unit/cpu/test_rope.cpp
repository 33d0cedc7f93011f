// CPU rope (NeoX half-split, partial rot_dim) vs a double-precision rotation whose angle
// uses HF's fp32 inv_freq (the op's contract): the rotation itself is checked in double.
#include <gtest/gtest.h>

#include "ops/rope.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

TEST(CpuRope, MatchesDoubleReference) {
  const unsigned seed = test::test_seed();
  std::mt19937 rng(seed);
  struct Case { int64_t T, H, D; int rot; float theta; };
  for (Case c : {Case{1, 9, 64, 64, 10000.0f}, Case{3, 3, 64, 64, 100000.0f}, Case{17, 4, 80, 80, 1e6f},
                 Case{5, 2, 256, 64, 1e7f}, Case{97, 1, 80, 32, 10000.0f}, Case{2, 3, 6, 2, 10.0f}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.T << " H=" << c.H << " D=" << c.D << " rot=" << c.rot);
    Tensor x = test::random_f32(rng, {c.T, c.H, c.D});
    Tensor x0 = test::copy_of(x);
    Tensor x3 = test::copy_of(x);
    Tensor pos = Tensor::empty(DType::I32, {c.T});
    std::uniform_int_distribution<int32_t> pd(0, 40000);
    for (int64_t t = 0; t < c.T; ++t) pos.ptr<int32_t>()[t] = t == 0 ? 0 : pd(rng);
    ThreadPool p1(1), p3(3);
    ops::Context c1{Device::CPU, &p1}, c3{Device::CPU, &p3};
    ops::rope(c1, x, pos, c.rot, c.theta);
    ops::rope(c3, x3, pos, c.rot, c.theta);
    test::expect_bitwise_equal(x, x3, "rope");

    const int half = c.rot / 2;
    std::vector<double> want;
    for (int64_t t = 0; t < c.T; ++t) {
      for (int64_t h = 0; h < c.H; ++h) {
        const float* in = x0.ptr<float>() + (t * c.H + h) * c.D;
        for (int64_t i = 0; i < c.D; ++i) {
          if (i >= c.rot) {
            want.push_back(in[i]);  // pass-through dims of partial rope
            continue;
          }
          const int j = static_cast<int>(i % half);
          // HF: inv_freq = 1.0 / theta ** (arange(0, rot, 2).float() / rot), fp32.
          const float inv = 1.0f / std::pow(c.theta, static_cast<float>(2 * j) / static_cast<float>(c.rot));
          const float ang = static_cast<float>(pos.ptr<int32_t>()[t]) * inv;
          const double cs = std::cos(static_cast<double>(ang)), sn = std::sin(static_cast<double>(ang));
          const double a = in[j], b = in[j + half];
          want.push_back(i < half ? a * cs - b * sn : b * cs + a * sn);
        }
      }
    }
    // fp32 cos/sin of arguments up to 4e4 rad are good to ~1 ulp of the argument's
    // magnitude relative to 1 only: ~4e4 * 6e-8 = 2.4e-3 absolute in the worst case, but
    // the argument itself is the same fp32 value here, so cos/sin add ~1e-7.
    test::expect_close(x, want, 1e-6, 2e-6, "rope");
  }
}

TEST(CpuRope, PositionZeroIsIdentityAndErrors) {
  const unsigned seed = test::test_seed();
  std::mt19937 rng(seed);
  Tensor x = test::random_f32(rng, {2, 3, 64});
  Tensor x0 = test::copy_of(x);
  Tensor pos = Tensor::empty(DType::I32, {2});
  pos.ptr<int32_t>()[0] = pos.ptr<int32_t>()[1] = 0;
  ops::Context ctx;
  ops::rope(ctx, x, pos, 64, 10000.0f);
  test::expect_bitwise_equal(x, x0, "rope at position 0");

  std::string msg = test::error_of([&] { ops::rope(ctx, x, pos, 65, 10000.0f); });
  EXPECT_NE(msg.find("rot_dim"), std::string::npos) << msg;
  msg = test::error_of([&] { ops::rope(ctx, x, pos, 128, 10000.0f); });
  EXPECT_NE(msg.find("128"), std::string::npos) << msg;
  Tensor pos3 = Tensor::empty(DType::I32, {3});
  msg = test::error_of([&] { ops::rope(ctx, x, pos3, 64, 10000.0f); });
  EXPECT_NE(msg.find("[3]"), std::string::npos) << msg;
  Tensor xh = Tensor::empty(DType::F16, {2, 3, 64});
  msg = test::error_of([&] { ops::rope(ctx, xh, pos, 64, 10000.0f); });
  EXPECT_NE(msg.find("f16"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vi
