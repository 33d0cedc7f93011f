// gdn_conv_decode_step on the CPU backend: the same outputs, states and conv windows as the two
// ops it stands for (gdn_conv_step on each sequence's rows, then gdn_decode_step), bit for bit,
// over steps in a row (windows and states carry) of T = 1, 4 and 2 tokens per sequence, two
// sequences, f32/f16 storage, both GVA layouts; and the shape errors it adds to theirs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/gdn_conv_decode_step.h"
#include "test_gdn_util.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

using gdn_test::make;
using gdn_test::Rng;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.dtype(), t.shape());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

TEST(GdnConvDecodeStep, EqualsTheTwoOps) {
  const uint64_t seed = gdn_test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  ops::Context ctx;
  const int64_t N = 2, Hk = 2, Hv = 4, dk = 16, dv = 12, K = 4;
  const float eps = 1e-6f, q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (DType t : {DType::F32, DType::F16}) {
    for (auto layout : {ops::GvaLayout::kGrouped, ops::GvaLayout::kTiled}) {
      auto f32 = [&](std::vector<int64_t> shape, double lo, double hi) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        return make(DType::F32, shape, rng.uniforms(n, lo, hi));
      };
      auto act = [&](std::vector<int64_t> shape, double lo, double hi) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        return make(t, shape, gdn_test::rounded(rng.uniforms(n, lo, hi), t));
      };
      const int64_t Cs[3] = {Hk * dk, Hk * dk, Hv * dv};
      Tensor taps[3];
      for (int i = 0; i < 3; ++i) taps[i] = f32({Cs[i], K}, -1, 1);
      Tensor A = f32({Hv}, -2, -0.1), dt = f32({Hv}, -1, 1), nw = f32({dv}, -1.5, 1.5);
      std::vector<Tensor> s_op, s_two;
      std::vector<ops::GdnConvWindows> w_op, w_two;
      for (int64_t n = 0; n < N; ++n) {
        s_op.push_back(f32({Hv, dk, dv}, -0.5, 0.5));
        s_two.push_back(copy_of(s_op.back()));
        ops::GdnConvWindows w{f32({K - 1, Cs[0]}, -2, 2), f32({K - 1, Cs[1]}, -2, 2), f32({K - 1, Cs[2]}, -2, 2)};
        w_two.push_back(ops::GdnConvWindows{copy_of(w.q), copy_of(w.k), copy_of(w.v)});
        w_op.push_back(w);
      }
      for (int64_t T : {1, 4, 2}) {
        const int64_t R = N * T;
        const std::string what = fmt::format("{} {} T={}", dtype_name(t),
                                             layout == ops::GvaLayout::kTiled ? "tiled" : "grouped", T);
        Tensor xq = act({R, Hk, dk}, -3, 3), xk = act({R, Hk, dk}, -3, 3), xv = act({R, Hv, dv}, -3, 3);
        Tensor z = act({R, Hv, dv}, -3, 3), a = act({R, Hv}, -8, 25), b = act({R, Hv}, -6, 6);
        ops::GdnConvIn in{xq, xk, xv, taps[0], taps[1], taps[2], w_op, Tensor::empty(t, {R, Hk, dk}),
                          Tensor::empty(t, {R, Hk, dk}), Tensor::empty(t, {R, Hv, dv}), eps, q_scale};
        Tensor y = Tensor::empty(t, {R, Hv, dv});
        ops::gdn_conv_decode_step(ctx, in, a, b, A, dt, z, nw, eps, s_op, layout, y);

        Tensor cq = Tensor::empty(t, {R, Hk, dk}), ck = Tensor::empty(t, {R, Hk, dk}), cv = Tensor::empty(t, {R, Hv, dv});
        for (int64_t n = 0; n < N; ++n) {
          auto rows = [&](const Tensor& x) { return x.slice_rows(n * T, (n + 1) * T).reshape({T, x.numel() / R}); };
          const ops::GdnConvWindows& w = w_two[static_cast<size_t>(n)];
          ops::gdn_conv_step(ctx, ops::ConvGroup{rows(xq), taps[0], w.q, rows(cq)},
                             ops::ConvGroup{rows(xk), taps[1], w.k, rows(ck)},
                             ops::ConvGroup{rows(xv), taps[2], w.v, rows(cv)}, dk, eps, q_scale);
        }
        Tensor y_two = Tensor::empty(t, {R, Hv, dv});
        ops::gdn_decode_step(ctx, cq, ck, cv, a, b, A, dt, z, nw, eps, s_two, layout, y_two);

        EXPECT_TRUE(same_bits(y, y_two)) << "y " << what;
        for (size_t n = 0; n < static_cast<size_t>(N); ++n) {
          EXPECT_TRUE(same_bits(s_op[n], s_two[n])) << "state " << n << " " << what;
          EXPECT_TRUE(same_bits(w_op[n].q, w_two[n].q) && same_bits(w_op[n].k, w_two[n].k) &&
                      same_bits(w_op[n].v, w_two[n].v))
              << "conv windows " << n << " " << what;
        }
      }
    }
  }
}

TEST(GdnConvDecodeStep, Errors) {
  Rng rng(1);
  ops::Context ctx;
  const int64_t N = 2, Hk = 1, Hv = 2, dk = 8, dv = 8, K = 4;
  auto f32 = [&](std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return make(DType::F32, shape, rng.normals(n));
  };
  Tensor z = f32({N, Hv, dv}), y = f32({N, Hv, dv}), a = f32({N, Hv}), b = f32({N, Hv});
  Tensor A = f32({Hv}), dt = f32({Hv}), w = f32({dv});
  std::vector<Tensor> states = {f32({Hv, dk, dv}), f32({Hv, dk, dv})};
  auto windows = [&] { return ops::GdnConvWindows{f32({K - 1, Hk * dk}), f32({K - 1, Hk * dk}), f32({K - 1, Hv * dv})}; };
  auto valid = [&] {
    return ops::GdnConvIn{f32({N, Hk, dk}), f32({N, Hk, dk}), f32({N, Hv, dv}), f32({Hk * dk, K}), f32({Hk * dk, K}),
                          f32({Hv * dv, K}), {windows(), windows()}, f32({N, Hk, dk}), f32({N, Hk, dk}),
                          f32({N, Hv, dv}), 1e-6f, 1.0f};
  };
  auto call = [&](const ops::GdnConvIn& in) {
    return test::error_of([&] {
      ops::gdn_conv_decode_step(ctx, in, a, b, A, dt, z, w, 1e-6f, states, ops::GvaLayout::kGrouped, y);
    });
  };
  ops::gdn_conv_decode_step(ctx, valid(), a, b, A, dt, z, w, 1e-6f, states, ops::GvaLayout::kGrouped, y);  // valid
  ops::GdnConvIn in = valid();
  in.windows.pop_back();
  std::string msg = call(in);
  EXPECT_NE(msg.find("1 sequences of conv windows for 2 of recurrent states"), std::string::npos) << msg;
  in = valid();
  in.xq = f32({N, Hk * dk});
  msg = call(in);
  EXPECT_NE(msg.find("q x"), std::string::npos) << msg;
  in = valid();
  in.cv = f32({N, Hv, dv + 1});
  msg = call(in);
  EXPECT_NE(msg.find("v x"), std::string::npos) << msg;
  in = valid();
  in.windows[1].k = f32({K, Hk * dk});
  msg = call(in);
  EXPECT_NE(msg.find("k state"), std::string::npos) << msg;
  in = valid();
  in.wv = f32({Hv * dv, K + 1});
  msg = call(in);
  EXPECT_NE(msg.find("v w"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vi
