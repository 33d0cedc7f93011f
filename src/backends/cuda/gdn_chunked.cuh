// The chunked (WY/UT) gated delta rule on tensor cores, for prefill with f16 activations
// (ops::DeltaRuleForm::kChunked): MODEL_QWEN35 §5.4, the same math as the CPU kernel in
// backends/cpu/gdn_delta_rule.cpp. The token-sequential kernel in gdn.cu runs decode, f32
// activations and head dims above kChunkedMaxDk.
#pragma once

#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

constexpr int kChunkedMaxDk = 128;  // key head dim bound (Qwen3.5: 128)

// q, k: [T, Hk, dk] f16; v, out: [T, Hv, dv] f16; g, beta: [T, Hv] f32;
// state: [Hv, dk, dv] f32 in/out. dk <= kChunkedMaxDk; any T, dv, Hv multiple of Hk.
void delta_rule_chunked_f16(const ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& g, const Tensor& beta, Tensor& state, bool tiled, Tensor& out);

}  // namespace vi::cuda
