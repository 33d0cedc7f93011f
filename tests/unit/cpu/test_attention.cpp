// CPU causal GQA attention vs a double-precision reference: prefill (q_pos0 = 0), decode
// and chunked prefill against a longer KV (q_pos0 > 0), f32 and f16 K/V.
#include <gtest/gtest.h>

#include "core/half.h"
#include "ops/attention.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

struct Case {
  int64_t T, S, Hq, Hkv, D, q_pos0;
};

void check(const Case& c, DType kv, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << "T=" << c.T << " S=" << c.S << " Hq=" << c.Hq << " Hkv=" << c.Hkv
                                    << " D=" << c.D << " q_pos0=" << c.q_pos0 << " kv " << dtype_name(kv));
  Tensor q = test::random_f32(rng, {c.T, c.Hq, c.D});
  Tensor kf = test::random_f32(rng, {c.S, c.Hkv, c.D});
  Tensor vf = test::random_f32(rng, {c.S, c.Hkv, c.D});
  Tensor k = kf, v = vf;
  if (kv == DType::F16) {  // round to f16 and use the rounded values in the reference too
    k = Tensor::empty(DType::F16, {c.S, c.Hkv, c.D});
    v = Tensor::empty(DType::F16, {c.S, c.Hkv, c.D});
    for (int64_t i = 0; i < kf.numel(); ++i) {
      k.ptr<uint16_t>()[i] = fp32_to_fp16(kf.ptr<float>()[i]);
      v.ptr<uint16_t>()[i] = fp32_to_fp16(vf.ptr<float>()[i]);
      kf.ptr<float>()[i] = fp16_to_fp32(k.ptr<uint16_t>()[i]);
      vf.ptr<float>()[i] = fp16_to_fp32(v.ptr<uint16_t>()[i]);
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  Tensor o1 = Tensor::empty(DType::F32, {c.T, c.Hq, c.D});
  Tensor o3 = Tensor::empty(DType::F32, {c.T, c.Hq, c.D});
  ThreadPool p1(1), p3(3);
  ops::Context c1{Device::CPU, &p1}, c3{Device::CPU, &p3};
  ops::attention(c1, q, k, v, c.q_pos0, scale, o1);
  ops::attention(c3, q, k, v, c.q_pos0, scale, o3);
  test::expect_bitwise_equal(o1, o3, "attention");

  std::vector<double> want;
  const int64_t group = c.Hq / c.Hkv;
  for (int64_t t = 0; t < c.T; ++t) {
    for (int64_t h = 0; h < c.Hq; ++h) {
      const float* qr = q.ptr<float>() + (t * c.Hq + h) * c.D;
      const int64_t hk = h / group, n = c.q_pos0 + t + 1;
      std::vector<double> s(n);
      double mx = -1e300;
      for (int64_t j = 0; j < n; ++j) {
        const float* kr = kf.ptr<float>() + (j * c.Hkv + hk) * c.D;
        double d = 0;
        for (int64_t i = 0; i < c.D; ++i) d += static_cast<double>(qr[i]) * kr[i];
        s[j] = d * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t i = 0; i < c.D; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += s[j] * vf.ptr<float>()[(j * c.Hkv + hk) * c.D + i];
        want.push_back(acc / sum);
      }
    }
  }
  // Scores ~N(0,1) with |q·k| errors ~D ulps; outputs are convex mixes of |v| <~ 4.
  test::expect_close(o1, want, 1e-5, 1e-5, "attention");
}

TEST(CpuAttention, MatchesDoubleReference) {
  const unsigned seed = test::test_seed();
  std::mt19937 rng(seed);
  for (DType kv : {DType::F32, DType::F16}) {
    check({1, 1, 4, 1, 64, 0}, kv, rng);      // a single token
    check({17, 17, 9, 3, 64, 0}, kv, rng);    // prefill, SmolLM2 head layout
    check({3, 40, 4, 1, 80, 37}, kv, rng);    // chunk at the end of a longer KV
    check({1, 97, 9, 3, 64, 96}, kv, rng);    // decode
    check({5, 30, 8, 8, 80, 11}, kv, rng);    // MHA, KV longer than needed (S > q_pos0 + T)
  }
}

TEST(CpuAttention, Errors) {
  ops::Context ctx;
  Tensor q = Tensor::empty(DType::F32, {3, 9, 64});
  Tensor k = Tensor::empty(DType::F32, {4, 3, 64});
  Tensor v = Tensor::empty(DType::F32, {4, 3, 64});
  Tensor o = Tensor::empty(DType::F32, {3, 9, 64});
  std::string msg = test::error_of([&] { ops::attention(ctx, q, k, v, 2, 0.125f, o); });
  EXPECT_NE(msg.find("attention"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 3, 64]"), std::string::npos) << msg;
  Tensor k4 = Tensor::empty(DType::F32, {4, 4, 64});
  Tensor v4 = Tensor::empty(DType::F32, {4, 4, 64});
  msg = test::error_of([&] { ops::attention(ctx, q, k4, v4, 0, 0.125f, o); });
  EXPECT_NE(msg.find("multiple"), std::string::npos) << msg;
  Tensor kq = Tensor::empty(DType::Q8_0, {4, 3, 64});
  Tensor vq = Tensor::empty(DType::Q8_0, {4, 3, 64});
  msg = test::error_of([&] { ops::attention(ctx, q, kq, vq, 0, 0.125f, o); });
  EXPECT_NE(msg.find("q8_0"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vi
