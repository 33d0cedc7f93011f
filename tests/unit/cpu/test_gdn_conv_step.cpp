// gdn_conv_step on the CPU backend: the same outputs and states as the five ops it stands
// for (conv1d_causal with SiLU on q, k and v, l2_norm on the q and k heads), bit for bit,
// over several steps in a row (the state carries) of T = 1, 2, 4 and 8 tokens (decode and
// verify steps; T > K-1 and T < K-1 both), f32/f16/bf16 storage, conv widths with and
// without history; a double-precision check of one token and of three; and the shape errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ops/gdn.h"
#include "ops/gdn_conv_step.h"
#include "ops/norm.h"
#include "test_gdn_util.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

using gdn_test::make;
using gdn_test::Rng;
using gdn_test::same_bits;
using gdn_test::values;

struct Groups {
  ops::ConvGroup q, k, v;
};

// Random inputs, weights and states for Hk heads of dk (q, k) and Cv value channels.
Groups random_groups(Rng& rng, DType t, int64_t Hk, int64_t dk, int64_t Cv, int64_t K) {
  auto group = [&](int64_t C) {
    ops::ConvGroup g;
    g.x = make(t, {1, C}, rng.normals(C));
    g.w = make(DType::F32, {C, K}, rng.normals(C * K, 0.5));
    g.state = make(DType::F32, {K - 1, C}, rng.normals((K - 1) * C));
    g.y = make(t, {1, C}, std::vector<float>(static_cast<size_t>(C), 0.0f));
    return g;
  };
  return Groups{group(Hk * dk), group(Hk * dk), group(Cv)};
}

Tensor copy_of(const Tensor& t) { return test::copy_of(t); }

Groups deep_copy(const Groups& g) {
  auto c = [](const ops::ConvGroup& a) { return ops::ConvGroup{copy_of(a.x), copy_of(a.w), copy_of(a.state), copy_of(a.y)}; };
  return Groups{c(g.q), c(g.k), c(g.v)};
}


TEST(GdnConvStep, EqualsConvThenL2Norm) {
  const uint64_t seed = gdn_test::fresh_seed();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  ops::Context ctx;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t K : {1, 2, 4}) {
      for (auto [Hk, dk, Cv] : {std::tuple<int64_t, int64_t, int64_t>{2, 16, 96}, {3, 128, 6 * 128}, {1, 5, 7}}) {
        Groups fused = random_groups(rng, t, Hk, dk, Cv, K), ref = deep_copy(fused);
        const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
        // The states carry from step to step; each step brings T tokens (T changes between
        // steps, as decode and verify rounds alternate).
        const int64_t Ts[] = {1, 2, 4, 8, 1, 3};
        for (int step = 0; step < 6; ++step) {
          const int64_t T = Ts[step];
          // New tokens for both: the same values.
          for (auto [a, b] : {std::pair{&fused.q, &ref.q}, {&fused.k, &ref.k}, {&fused.v, &ref.v}}) {
            const int64_t C = a->x.dim(1);
            a->x = make(t, {T, C}, rng.normals(T * C));
            a->y = make(t, {T, C}, std::vector<float>(static_cast<size_t>(T * C), 0.0f));
            b->x = copy_of(a->x);
            b->y = copy_of(a->y);
          }
          ops::gdn_conv_step(ctx, fused.q, fused.k, fused.v, dk, 1e-6f, q_scale);
          for (ops::ConvGroup* g : {&ref.q, &ref.k, &ref.v}) ops::conv1d_causal(ctx, g->x, g->w, g->state, true, g->y);
          Tensor qn = ref.q.y.reshape({T * Hk, dk}), kn = ref.k.y.reshape({T * Hk, dk});
          ops::l2_norm(ctx, qn, 1e-6f, q_scale, qn);
          ops::l2_norm(ctx, kn, 1e-6f, 1.0f, kn);
          const std::string what = std::string(dtype_name(t)) + " K=" + std::to_string(K) + " Hk=" +
                                   std::to_string(Hk) + " dk=" + std::to_string(dk) + " T=" + std::to_string(T) +
                                   " step " + std::to_string(step);
          for (auto [name, a, b] : {std::tuple{"q", &fused.q, &ref.q}, {"k", &fused.k, &ref.k}, {"v", &fused.v, &ref.v}}) {
            EXPECT_TRUE(same_bits(a->y, b->y)) << name << " y, " << what;
            EXPECT_TRUE(same_bits(a->state, b->state)) << name << " state, " << what;
          }
        }
      }
    }
  }
}

// f32 against double precision, one token and three (the window slides over the earlier
// tokens of the step): conv over (state, x[0..t]), SiLU, per-head L2 norm of every token.
TEST(GdnConvStep, MatchesDoubleFormula) {
  const uint64_t seed = gdn_test::fresh_seed();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  ops::Context ctx;
  const int64_t Hk = 2, dk = 32, Cv = 80, K = 4;
  for (int64_t T : {1, 3}) {
    Groups g = random_groups(rng, DType::F32, Hk, dk, Cv, K);
    for (ops::ConvGroup* gr : {&g.q, &g.k, &g.v}) {
      const int64_t C = gr->x.dim(1);
      gr->x = make(DType::F32, {T, C}, rng.normals(T * C));
      gr->y = make(DType::F32, {T, C}, std::vector<float>(static_cast<size_t>(T * C), 0.0f));
    }
    Groups before = deep_copy(g);
    const float q_scale = 0.25f;
    ops::gdn_conv_step(ctx, g.q, g.k, g.v, dk, 1e-6f, q_scale);
    for (auto [name, out, in, scale, heads] :
         {std::tuple{"q", &g.q, &before.q, double(q_scale), Hk}, {"k", &g.k, &before.k, 1.0, Hk},
          {"v", &g.v, &before.v, 0.0, int64_t{0}}}) {
      const int64_t C = in->x.dim(1);
      const float* x = in->x.ptr<float>();
      const float* w = in->w.ptr<float>();
      const float* s = in->state.ptr<float>();
      // The inputs in time order: the K-1 state rows, then the T tokens.
      auto input = [&](int64_t i, int64_t c) {
        return i < K - 1 ? double(s[i * C + c]) : double(x[(i - (K - 1)) * C + c]);
      };
      std::vector<double> y(static_cast<size_t>(T * C));
      for (int64_t t = 0; t < T; ++t) {
        double* yt = y.data() + t * C;
        for (int64_t c = 0; c < C; ++c) {
          double acc = 0;
          for (int64_t i = 0; i < K; ++i) acc += double(w[c * K + i]) * input(t + i, c);
          yt[c] = acc / (1.0 + std::exp(-acc));
        }
        for (int64_t h = 0; h < heads; ++h) {
          double ss = 0;
          for (int64_t i = 0; i < dk; ++i) ss += yt[h * dk + i] * yt[h * dk + i];
          for (int64_t i = 0; i < dk; ++i) yt[h * dk + i] *= scale / std::sqrt(ss + 1e-6);
        }
      }
      EXPECT_LT(gdn_test::max_rel_err(values(out->y), y), 2e-6) << name << " T=" << T;
      // The state: the last K-1 inputs, oldest first.
      const std::vector<float> st = values(out->state);
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < K - 1; ++i)
          EXPECT_EQ(double(st[i * C + c]), input(T + i, c)) << name << " state T=" << T;
    }
  }
}

TEST(GdnConvStep, Errors) {
  Rng rng(1);
  ops::Context ctx;
  Groups g = random_groups(rng, DType::F32, 2, 16, 48, 4);
  std::string msg = test::error_of([&] { ops::gdn_conv_step(ctx, g.q, g.k, g.v, 12, 1e-6f, 1.0f); });
  EXPECT_NE(msg.find("whole heads of 12"), std::string::npos) << msg;
  Groups two = g;  // v with two tokens, q and k with one
  two.v.x = Tensor::empty(DType::F32, {2, 48});
  two.v.y = Tensor::empty(DType::F32, {2, 48});
  msg = test::error_of([&] { ops::gdn_conv_step(ctx, two.q, two.k, two.v, 16, 1e-6f, 1.0f); });
  EXPECT_NE(msg.find("v x [2, 48] f32 must be [T, C] f32 with q's T (1 rows"), std::string::npos) << msg;
  Groups ymis = g;  // y with another token count than x
  ymis.k.y = Tensor::empty(DType::F32, {2, 32});
  msg = test::error_of([&] { ops::gdn_conv_step(ctx, ymis.q, ymis.k, ymis.v, 16, 1e-6f, 1.0f); });
  EXPECT_NE(msg.find("k y [2, 32] f32 must match x [1, 32] f32"), std::string::npos) << msg;
  Groups wide = g;
  wide.k.w = Tensor::empty(DType::F32, {32, 3});
  msg = test::error_of([&] { ops::gdn_conv_step(ctx, wide.q, wide.k, wide.v, 16, 1e-6f, 1.0f); });
  EXPECT_NE(msg.find("[32, 4] f32"), std::string::npos) << msg;
  Groups stale = g;
  stale.q.state = Tensor::empty(DType::F32, {3, 31});
  msg = test::error_of([&] { ops::gdn_conv_step(ctx, stale.q, stale.k, stale.v, 16, 1e-6f, 1.0f); });
  EXPECT_NE(msg.find("state"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vi
