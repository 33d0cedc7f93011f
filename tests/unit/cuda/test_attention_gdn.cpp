// CUDA vs CPU: attention (prefill and decode, grouped KV heads, a query offset into the
// cache, odd head_dim) and the Gated DeltaNet ops (conv1d_causal with its carried state,
// gdn_gates, gated_delta_rule in both forms and both GVA layouts, state in and out), on
// fresh random inputs in both kernel profiles and both activation dtypes. The KV cache is
// in the activation dtype (f16 on the GPU in f16 runs; the CPU kernel reads f16 K/V too).
// Tolerances (relative L2): f32 2e-5; f16 3e-3 (f16 inputs/outputs, fp32 math inside).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cuda_test_util.h"
#include "ops/attention.h"
#include "ops/gdn.h"
#include "ops/paged_attention.h"

namespace vi::cudatest {
namespace {

class Attention : public CudaOpTest {};

TEST_P(Attention, PrefillAndDecode) {
  const int64_t Hq = 6, Hkv = 2;
  for (int64_t D : {80, 128}) {
    for (auto [T, p0] : {std::pair<int64_t, int64_t>{23, 0}, {1, 140}, {5, 19}, {70, 3}}) {
      const int64_t S = p0 + T;
      Tensor q = rand_f32({T, Hq, D}, act(), -2, 2);
      Tensor k = rand_f32({S, Hkv, D}, act(), -2, 2), v = rand_f32({S, Hkv, D}, act(), -2, 2);
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      Tensor ref = Tensor::empty(DType::F32, {T, Hq, D});
      ops::attention(cpu, q, host_as(k, act()), host_as(v, act()), p0, scale, ref);
      Tensor dq = up(q), dk = up(k), dv = up(v), dout = gpu_empty({T, Hq, D});
      ops::attention(g, dq, dk, dv, p0, scale, dout);
      EXPECT_CLOSE(down(dout), ref, tol(2e-5, 3e-3), fmt::format("attention D={} T={} pos0={}", D, T, p0));
    }
  }
}

TEST_P(Attention, PagedThroughAShuffledBlockTable) {
  const int64_t Hq = 4, Hkv = 2, D = 72, bs = 16, n_blocks = 9;
  std::vector<int32_t> perm(n_blocks);
  for (int32_t i = 0; i < n_blocks; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng());
  Tensor table = Tensor::empty(DType::I32, {n_blocks});
  std::copy(perm.begin(), perm.end(), table.ptr<int32_t>());
  Tensor k = rand_f32({n_blocks * bs, Hkv, D}, act(), -2, 2), v = rand_f32({n_blocks * bs, Hkv, D}, act(), -2, 2);
  Tensor dk = up(k), dv = up(v);
  for (auto [T, p0] : {std::pair<int64_t, int64_t>{37, 0}, {1, 100}, {6, 131}}) {
    Tensor q = rand_f32({T, Hq, D}, act(), -2, 2);
    const float scale = 0.11f;
    Tensor ref = Tensor::empty(DType::F32, {T, Hq, D});
    ops::paged_attention(cpu, q, host_as(k, act()), host_as(v, act()), table, bs, p0, scale, ref);
    Tensor dq = up(q), dout = gpu_empty({T, Hq, D});
    ops::paged_attention(g, dq, dk, dv, table, bs, p0, scale, dout);
    EXPECT_CLOSE(down(dout), ref, tol(2e-5, 3e-3), fmt::format("paged_attention T={} pos0={}", T, p0));
  }
}

class Gdn : public CudaOpTest {};

TEST_P(Gdn, Conv1dCarriesState) {
  const int64_t C = 67, K = 4;
  Tensor w = rand_f32({C, K}, DType::F32);
  Tensor state = rand_f32({K - 1, C}, DType::F32);
  Tensor dw = ops::upload(g, w), dstate = ops::upload(g, state);
  for (int64_t T : {9, 1, 2}) {  // consecutive calls: the state carries over
    Tensor x = rand_f32({T, C}, act(), -2, 2);
    Tensor ref = Tensor::empty(DType::F32, {T, C});
    ops::conv1d_causal(cpu, x, w, state, /*silu=*/T != 2, ref);
    Tensor dx = up(x);
    ops::conv1d_causal(g, dx, dw, dstate, T != 2, dx);  // y aliases x
    EXPECT_CLOSE(down(dx), ref, tol(1e-6, 2e-3), fmt::format("conv1d T={}", T));
    EXPECT_CLOSE(down(dstate), state, tol(0.0, 1e-3), fmt::format("conv1d state T={}", T));
  }
}

// Out of place the kernel splits the tokens into runs (16 per thread): runs that start inside
// the chunk, a last partial run, and a call shorter than the state must all match the CPU.
TEST_P(Gdn, Conv1dRunsMatchCpuOutOfPlace) {
  const int64_t C = 131, K = 4;
  Tensor w = rand_f32({C, K}, DType::F32);
  Tensor state = rand_f32({K - 1, C}, DType::F32);
  Tensor dw = ops::upload(g, w), dstate = ops::upload(g, state);
  for (int64_t T : {100, 2, 16, 33, 1, 17}) {
    Tensor x = rand_f32({T, C}, act(), -2, 2);
    Tensor ref = Tensor::empty(DType::F32, {T, C});
    ops::conv1d_causal(cpu, x, w, state, /*silu=*/true, ref);
    Tensor dx = up(x), dy = gpu_empty({T, C});
    ops::conv1d_causal(g, dx, dw, dstate, true, dy);
    EXPECT_CLOSE(down(dy), ref, tol(1e-6, 2e-3), fmt::format("conv1d T={}", T));
    EXPECT_CLOSE(down(dstate), state, tol(0.0, 1e-3), fmt::format("conv1d state T={}", T));
  }
}

TEST_P(Gdn, Gates) {
  const int64_t T = 11, Hv = 7;
  Tensor a = rand_f32({T, Hv}, act(), -8, 30), b = rand_f32({T, Hv}, act(), -6, 6);  // > 20: softplus identity
  Tensor A = rand_f32({Hv}, DType::F32, -2, -0.1f), dt = rand_f32({Hv}, DType::F32);
  Tensor gr = Tensor::empty(DType::F32, {T, Hv}), br = Tensor::empty(DType::F32, {T, Hv});
  ops::gdn_gates(cpu, a, b, A, dt, gr, br);
  Tensor dgo = ops::empty(g, DType::F32, {T, Hv}), dbo = ops::empty(g, DType::F32, {T, Hv});
  Tensor da = up(a), db = up(b), dA = ops::upload(g, A), ddt = ops::upload(g, dt);
  ops::gdn_gates(g, da, db, dA, ddt, dgo, dbo);
  EXPECT_CLOSE(down(dgo), gr, 1e-6, "gdn_gates g");
  EXPECT_CLOSE(down(dbo), br, 1e-6, "gdn_gates beta");
}

TEST_P(Gdn, DeltaRuleBothFormsAndLayouts) {
  const int64_t Hk = 2, Hv = 4;
  for (auto [dk, dv] : {std::pair<int64_t, int64_t>{128, 48}, {40, 33}}) {
    for (auto layout : {ops::GvaLayout::kGrouped, ops::GvaLayout::kTiled}) {
      for (int64_t T : {1, 13, 70}) {
        const auto form = T == 1 ? ops::DeltaRuleForm::kRecurrent : ops::DeltaRuleForm::kChunked;
        Tensor q = unit_rows(rand_f32({T, Hk, dk}, DType::F32), 1.0f / std::sqrt(float(dk)), act());
        Tensor k = unit_rows(rand_f32({T, Hk, dk}, DType::F32), 1.0f, act());
        Tensor v = rand_f32({T, Hv, dv}, act(), -2, 2);
        Tensor gg = rand_f32({T, Hv}, DType::F32, -1.5f, -0.01f), beta = rand_f32({T, Hv}, DType::F32, 0.05f, 0.95f);
        Tensor state = rand_f32({Hv, dk, dv}, DType::F32, -0.5f, 0.5f);
        Tensor dstate = ops::upload(g, state);
        Tensor ref = Tensor::empty(DType::F32, {T, Hv, dv});
        ops::gated_delta_rule(cpu, q, k, v, gg, beta, state, layout, form, ref);
        Tensor dq = up(q), dk_ = up(k), dv_ = up(v), dg = ops::upload(g, gg), db = ops::upload(g, beta);
        Tensor dout = gpu_empty({T, Hv, dv});
        ops::gated_delta_rule(g, dq, dk_, dv_, dg, db, dstate, layout, form, dout);
        const std::string what = fmt::format("delta rule dk={} dv={} {} T={}",
                                             dk, dv, layout == ops::GvaLayout::kTiled ? "tiled" : "grouped", T);
        EXPECT_CLOSE(down(dout), ref, tol(2e-5, 3e-3), what);
        EXPECT_CLOSE(down(dstate), state, tol(2e-5, 3e-3), what + " state");
      }
    }
  }
}

VI_CUDA_INSTANTIATE(Attention);
VI_CUDA_INSTANTIATE(Gdn);

}  // namespace
}  // namespace vi::cudatest
