// CUDA vs CPU: the chunked gated delta rule (prefill form) over several chunks of 64, with
// T not a multiple of the chunk, the fp32 state carried in and out across consecutive
// calls, both GVA layouts, a full Qwen3.5 head shape (dk = dv = 128, Hv = 3·Hk) and odd
// ones (dk 72, dv 50: padded to the tensor-core tile inside). With f16 activations this
// runs the tensor-core kernel (gdn_chunked.cu) from kChunkedMinTokens tokens on; with f32
// the token-sequential one.
// Tolerances (relative L2 against the fp32 CPU chunked op): f32 2e-5; f16 4e-3 — the
// tensor-core operands (state, decayed q, V_new plain and decayed, masked q·kᵀ) are rounded to f16
// (2^-11 relative each), accumulation and the carried state stay fp32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cuda_test_util.h"
#include "ops/gdn.h"

namespace vi::cudatest {
namespace {

class GdnChunked : public CudaOpTest {};

// A host tensor of 1e4 everywhere: an output element the kernel forgets stays far off.
Tensor poison(const std::vector<int64_t>& shape) {
  Tensor t = Tensor::empty(DType::F32, shape);
  std::fill_n(t.ptr<float>(), t.numel(), 1e4f);
  return t;
}

struct Case {
  int64_t Hk, Hv, dk, dv;
};

TEST_P(GdnChunked, ManyChunksStateCarriedAcrossCalls) {
  for (const Case& c : {Case{2, 6, 128, 128}, Case{1, 3, 72, 50}}) {
    for (auto layout : {ops::GvaLayout::kGrouped, ops::GvaLayout::kTiled}) {
      Tensor state = rand_f32({c.Hv, c.dk, c.dv}, DType::F32, -0.5f, 0.5f);
      Tensor dstate = ops::upload(g, state);
      // Consecutive calls on one state; T = 7 is below kChunkedMinTokens, so the state also
      // passes through the token-sequential kernel between tensor-core calls.
      for (int64_t T : {150, 64, 12, 7, 333}) {
        Tensor q = unit_rows(rand_f32({T, c.Hk, c.dk}, DType::F32), 1.0f / std::sqrt(float(c.dk)), act());
        Tensor k = unit_rows(rand_f32({T, c.Hk, c.dk}, DType::F32), 1.0f, act());
        Tensor v = rand_f32({T, c.Hv, c.dv}, act(), -2, 2);
        // Decays from near 1 to e^-4 per token: long chunks see exp(Γr − Γs) far below f16's range.
        Tensor gg = rand_f32({T, c.Hv}, DType::F32, -4.0f, -0.001f);
        Tensor beta = rand_f32({T, c.Hv}, DType::F32, 0.05f, 0.99f);
        Tensor ref = Tensor::empty(DType::F32, {T, c.Hv, c.dv});
        ops::gated_delta_rule(cpu, q, k, v, gg, beta, state, layout, ops::DeltaRuleForm::kChunked, ref);
        Tensor dq = up(q), dk = up(k), dv = up(v), dg = ops::upload(g, gg), db = ops::upload(g, beta);
        Tensor dout = up(poison({T, c.Hv, c.dv}));  // every output must be written
        ops::gated_delta_rule(g, dq, dk, dv, dg, db, dstate, layout, ops::DeltaRuleForm::kChunked, dout);
        const std::string what = fmt::format("chunked delta rule Hk={} Hv={} dk={} dv={} {} T={}", c.Hk, c.Hv, c.dk,
                                             c.dv, layout == ops::GvaLayout::kTiled ? "tiled" : "grouped", T);
        EXPECT_CLOSE(down(dout), ref, tol(2e-5, 4e-3), what);
        EXPECT_CLOSE(down(dstate), state, tol(2e-5, 4e-3), what + " state");
      }
    }
  }
}

// The tensor-core kernel and the token-sequential one compute the same function: a
// prefill in the chunked form continued by decode steps in the recurrent form.
TEST_P(GdnChunked, ChunkedPrefillThenRecurrentDecode) {
  const Case c{2, 6, 128, 128};
  Tensor state = rand_f32({c.Hv, c.dk, c.dv}, DType::F32, -0.5f, 0.5f);
  Tensor dstate = ops::upload(g, state);
  for (int64_t T : {97, 1, 1}) {
    const auto form = T == 1 ? ops::DeltaRuleForm::kRecurrent : ops::DeltaRuleForm::kChunked;
    Tensor q = unit_rows(rand_f32({T, c.Hk, c.dk}, DType::F32), 1.0f / std::sqrt(float(c.dk)), act());
    Tensor k = unit_rows(rand_f32({T, c.Hk, c.dk}, DType::F32), 1.0f, act());
    Tensor v = rand_f32({T, c.Hv, c.dv}, act(), -2, 2);
    Tensor gg = rand_f32({T, c.Hv}, DType::F32, -1.0f, -0.01f), beta = rand_f32({T, c.Hv}, DType::F32, 0.1f, 0.9f);
    Tensor ref = Tensor::empty(DType::F32, {T, c.Hv, c.dv});
    ops::gated_delta_rule(cpu, q, k, v, gg, beta, state, ops::GvaLayout::kGrouped, form, ref);
    Tensor dout = gpu_empty({T, c.Hv, c.dv});
    ops::gated_delta_rule(g, up(q), up(k), up(v), ops::upload(g, gg), ops::upload(g, beta), dstate,
                          ops::GvaLayout::kGrouped, form, dout);
    EXPECT_CLOSE(down(dout), ref, tol(2e-5, 4e-3), fmt::format("prefill/decode T={}", T));
    EXPECT_CLOSE(down(dstate), state, tol(2e-5, 4e-3), fmt::format("prefill/decode state T={}", T));
  }
}

VI_CUDA_INSTANTIATE(GdnChunked);

}  // namespace
}  // namespace vi::cudatest
