// gdn_decode_step on the CPU backend: the same outputs and states as the three ops it stands
// for (gdn_gates, the recurrent gated_delta_rule over each sequence's rows, gated_rms_norm),
// bit for bit, over several steps in a row (the states carry) of T = 1, 2, 4 and 8 tokens per
// sequence (decode and verify steps), several sequences with states of their own,
// f32/f16/bf16 storage, both GVA layouts. Against the model's unfused path for T > 1, whose
// delta rule is the chunked form (the same math in another order): close in f32. And the
// shape errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/gdn.h"
#include "ops/gdn_decode_step.h"
#include "ops/norm.h"
#include "test_gdn_util.h"
#include "unit/gdn_unfused_step.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

using gdn_test::make;
using gdn_test::Rng;
using gdn_test::same_bits;


// Rows of an [N, H, d] f32 value list L2-normalised and scaled (the delta rule's q/k input).
std::vector<float> unit_heads(std::vector<float> x, int64_t d, float scale) {
  for (size_t h = 0; h < x.size(); h += static_cast<size_t>(d)) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(x[h + i]) * x[h + i];
    for (int64_t i = 0; i < d; ++i) x[h + i] = static_cast<float>(x[h + i] * scale / std::sqrt(ss));
  }
  return x;
}

TEST(GdnDecodeStep, EqualsGatesDeltaRuleAndGatedNorm) {
  const uint64_t seed = gdn_test::fresh_seed();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  ops::Context ctx;
  const float eps = 1e-6f;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (auto layout : {ops::GvaLayout::kGrouped, ops::GvaLayout::kTiled}) {
      for (auto [N, Hk, Hv, dk, dv] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{3, 2, 4, 16, 24},
                                       {1, 2, 6, 128, 128}, {4, 1, 3, 5, 7}}) {
        Tensor A = make(DType::F32, {Hv}, rng.uniforms(Hv, -2.0, -0.1));
        Tensor dt = make(DType::F32, {Hv}, rng.normals(Hv));
        Tensor w = make(DType::F32, {dv}, rng.normals(dv, 0.5));
        std::vector<Tensor> fused_states, ref_states;
        for (int64_t n = 0; n < N; ++n) {
          fused_states.push_back(make(DType::F32, {Hv, dk, dv}, rng.normals(Hv * dk * dv, 0.3)));
          ref_states.push_back(test::copy_of(fused_states.back()));
        }
        // The states carry from step to step; T tokens per sequence, changing between steps
        // as decode and verify rounds alternate.
        const int64_t Ts[] = {1, 2, 4, 8, 1};
        for (int step = 0; step < 5; ++step) {
          const int64_t T = Ts[step], R = N * T;  // R rows, sequence n's [n T, (n + 1) T)
          Tensor q = make(t, {R, Hk, dk}, unit_heads(rng.normals(R * Hk * dk), dk, 1.0f / std::sqrt(float(dk))));
          Tensor k = make(t, {R, Hk, dk}, unit_heads(rng.normals(R * Hk * dk), dk, 1.0f));
          Tensor v = make(t, {R, Hv, dv}, rng.normals(R * Hv * dv));
          Tensor z = make(t, {R, Hv, dv}, rng.normals(R * Hv * dv));
          Tensor a = make(t, {R, Hv}, rng.uniforms(R * Hv, -8.0, 25.0));  // > 20: softplus identity
          Tensor b = make(t, {R, Hv}, rng.normals(R * Hv, 2.0));
          Tensor y = make(t, {R, Hv, dv}, std::vector<float>(static_cast<size_t>(R * Hv * dv), 0.0f));
          ops::gdn_decode_step(ctx, q, k, v, a, b, A, dt, z, w, eps, fused_states, layout, y);

          Tensor y_ref = Tensor::empty(t, {R, Hv, dv});
          test::unfused_gdn_decode_step(ctx, q, k, v, a, b, A, dt, z, w, eps, ref_states, layout, y_ref);

          const std::string what = std::string(dtype_name(t)) +
                                   (layout == ops::GvaLayout::kTiled ? " tiled" : " grouped") + " N=" +
                                   std::to_string(N) + " T=" + std::to_string(T) + " Hv=" + std::to_string(Hv) +
                                   " dk=" + std::to_string(dk) + " dv=" + std::to_string(dv) + " step " +
                                   std::to_string(step);
          EXPECT_TRUE(same_bits(y, y_ref)) << "y, " << what;
          for (int64_t n = 0; n < N; ++n)
            EXPECT_TRUE(same_bits(fused_states[n], ref_states[n])) << "state " << n << ", " << what;
        }
      }
    }
  }
}

// The model's unfused path runs the chunked delta rule for T > 1; the fused op runs the
// recurrent one. The same math summed in another order: f32 outputs and states agree to
// rounding (relative 1e-4 of the largest value; observed ~1e-6).
TEST(GdnDecodeStep, CloseToTheChunkedForm) {
  const uint64_t seed = gdn_test::fresh_seed();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  ops::Context ctx;
  const float eps = 1e-6f;
  const int64_t N = 1, Hk = 2, Hv = 4, dk = 32, dv = 48;
  for (int64_t T : {2, 4, 8}) {
    const int64_t R = N * T;
    Tensor A = make(DType::F32, {Hv}, rng.uniforms(Hv, -2.0, -0.1));
    Tensor dt = make(DType::F32, {Hv}, rng.normals(Hv));
    Tensor w = make(DType::F32, {dv}, rng.normals(dv, 0.5));
    std::vector<Tensor> fused_states = {make(DType::F32, {Hv, dk, dv}, rng.normals(Hv * dk * dv, 0.3))};
    std::vector<Tensor> ref_states = {test::copy_of(fused_states[0])};
    Tensor q = make(DType::F32, {R, Hk, dk}, unit_heads(rng.normals(R * Hk * dk), dk, 1.0f / std::sqrt(float(dk))));
    Tensor k = make(DType::F32, {R, Hk, dk}, unit_heads(rng.normals(R * Hk * dk), dk, 1.0f));
    Tensor v = make(DType::F32, {R, Hv, dv}, rng.normals(R * Hv * dv));
    Tensor z = make(DType::F32, {R, Hv, dv}, rng.normals(R * Hv * dv));
    Tensor a = make(DType::F32, {R, Hv}, rng.uniforms(R * Hv, -8.0, 4.0));
    Tensor b = make(DType::F32, {R, Hv}, rng.normals(R * Hv, 2.0));
    Tensor y = Tensor::empty(DType::F32, {R, Hv, dv}), y_ref = Tensor::empty(DType::F32, {R, Hv, dv});
    ops::gdn_decode_step(ctx, q, k, v, a, b, A, dt, z, w, eps, fused_states, ops::GvaLayout::kTiled, y);
    test::unfused_gdn_decode_step(ctx, q, k, v, a, b, A, dt, z, w, eps, ref_states, ops::GvaLayout::kTiled, y_ref,
                                  ops::DeltaRuleForm::kChunked);
    auto max_err = [](const Tensor& x, const Tensor& r) {
      const std::vector<float> xv = gdn_test::values(x), rv = gdn_test::values(r);
      double err = 0, mag = 0;
      for (size_t i = 0; i < xv.size(); ++i) {
        err = std::max(err, std::fabs(double(xv[i]) - rv[i]));
        mag = std::max(mag, std::fabs(double(rv[i])));
      }
      return err / mag;
    };
    EXPECT_LT(max_err(y, y_ref), 1e-4) << "y, T=" << T;
    EXPECT_LT(max_err(fused_states[0], ref_states[0]), 1e-4) << "state, T=" << T;
  }
}

TEST(GdnDecodeStep, Errors) {
  Rng rng(1);
  ops::Context ctx;
  const int64_t N = 2, Hk = 1, Hv = 2, dk = 8, dv = 8;
  auto f32 = [&](std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return make(DType::F32, shape, rng.normals(n));
  };
  Tensor q = f32({N, Hk, dk}), k = f32({N, Hk, dk}), v = f32({N, Hv, dv}), z = f32({N, Hv, dv}), y = f32({N, Hv, dv});
  Tensor a = f32({N, Hv}), b = f32({N, Hv}), A = f32({Hv}), dt = f32({Hv}), w = f32({dv});
  std::vector<Tensor> states = {f32({Hv, dk, dv}), f32({Hv, dk, dv})};
  auto call = [&](const std::vector<Tensor>& s, const Tensor& aa, const Tensor& ww) {
    return test::error_of([&] {
      ops::gdn_decode_step(ctx, q, k, v, aa, b, A, dt, z, ww, 1e-6f, s, ops::GvaLayout::kGrouped, y);
    });
  };
  ops::gdn_decode_step(ctx, q, k, v, a, b, A, dt, z, w, 1e-6f, states, ops::GvaLayout::kGrouped, y);  // valid
  // Two rows and one state are one sequence of two tokens (valid); three states are not.
  ops::gdn_decode_step(ctx, q, k, v, a, b, A, dt, z, w, 1e-6f, {states[0]}, ops::GvaLayout::kGrouped, y);
  std::string msg = call({states[0], states[1], f32({Hv, dk, dv})}, a, w);
  EXPECT_NE(msg.find("has 2 rows, not T rows for each of 3 sequences"), std::string::npos) << msg;
  msg = call({states[0], f32({Hv, dk, dv + 1})}, a, w);
  EXPECT_NE(msg.find("must be [Hv=2, dk=8, dv=8] f32"), std::string::npos) << msg;
  msg = call(states, f32({N + 1, Hv}), w);
  EXPECT_NE(msg.find("gate input"), std::string::npos) << msg;
  msg = call(states, a, f32({dv + 1}));
  EXPECT_NE(msg.find("norm weight"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vi
