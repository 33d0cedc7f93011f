// gdn_decode_step on the CPU backend: the same outputs and states as the three ops it stands
// for (gdn_gates, the recurrent gated_delta_rule per sequence, gated_rms_norm), bit for bit,
// over several decode steps in a row (the states carry), several sequences with states of
// their own, f32/f16/bf16 storage, both GVA layouts; and the shape errors.
#include <gtest/gtest.h>

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

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

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
        for (int step = 0; step < 3; ++step) {  // the states carry from token to token
          Tensor q = make(t, {N, Hk, dk}, unit_heads(rng.normals(N * Hk * dk), dk, 1.0f / std::sqrt(float(dk))));
          Tensor k = make(t, {N, Hk, dk}, unit_heads(rng.normals(N * Hk * dk), dk, 1.0f));
          Tensor v = make(t, {N, Hv, dv}, rng.normals(N * Hv * dv));
          Tensor z = make(t, {N, Hv, dv}, rng.normals(N * Hv * dv));
          Tensor a = make(t, {N, Hv}, rng.uniforms(N * Hv, -8.0, 25.0));  // > 20: softplus identity
          Tensor b = make(t, {N, Hv}, rng.normals(N * Hv, 2.0));
          Tensor y = make(t, {N, Hv, dv}, std::vector<float>(static_cast<size_t>(N * Hv * dv), 0.0f));
          ops::gdn_decode_step(ctx, q, k, v, a, b, A, dt, z, w, eps, fused_states, layout, y);

          Tensor y_ref = Tensor::empty(t, {N, Hv, dv});
          test::unfused_gdn_decode_step(ctx, q, k, v, a, b, A, dt, z, w, eps, ref_states, layout, y_ref);

          const std::string what = std::string(dtype_name(t)) +
                                   (layout == ops::GvaLayout::kTiled ? " tiled" : " grouped") + " N=" +
                                   std::to_string(N) + " Hv=" + std::to_string(Hv) + " dk=" + std::to_string(dk) +
                                   " dv=" + std::to_string(dv) + " step " + std::to_string(step);
          EXPECT_TRUE(same_bits(y, y_ref)) << "y, " << what;
          for (int64_t n = 0; n < N; ++n)
            EXPECT_TRUE(same_bits(fused_states[n], ref_states[n])) << "state " << n << ", " << what;
        }
      }
    }
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
  std::string msg = call({states[0]}, a, w);
  EXPECT_NE(msg.find("1 states for 2 sequences"), std::string::npos) << msg;
  msg = call({states[0], f32({Hv, dk, dv + 1})}, a, w);
  EXPECT_NE(msg.find("must be [Hv=2, dk=8, dv=8] f32"), std::string::npos) << msg;
  msg = call(states, f32({N + 1, Hv}), w);
  EXPECT_NE(msg.find("gate input"), std::string::npos) << msg;
  msg = call(states, a, f32({dv + 1}));
  EXPECT_NE(msg.find("norm weight"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vi
