// The chunked (WY/UT) gated delta rule on tensor cores, for prefill with f16 activations
// (ops::DeltaRuleForm::kChunked): MODEL_QWEN35 §5.4, the same math as the CPU kernel in
// backends/cpu/gdn_delta_rule.cpp. The token-sequential kernel in gdn.cu runs decode, f32
// activations and head dims above kChunkedMaxDk.
#pragma once

#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

constexpr int kChunkedMaxDk = 128;  // key head dim bound (Qwen3.5: 128)
// Fewer tokens run the token-sequential kernel: on the H200 (27B layer) it costs ~2.1 µs per
// token and the chunked one ~21 µs per chunk of up to 64, so they break even near 10 tokens
// (computed from the T = 8192 times, not timed at small T). Keeps speculative-decode verify
// batches (1 + k tokens) off the chunked kernel.
constexpr int64_t kChunkedMinTokens = 12;

// Whether the current device gives a block the kernel's 91 KB of shared memory (sm_70 and
// sm_80+ do; sm_75 stops at 64 KB, and there the token-sequential kernel runs).
bool delta_rule_chunked_fits();

// q, k: [T, Hk, dk] f16; v, out: [T, Hv, dv] f16; g, beta: [T, Hv] f32;
// state: [Hv, dk, dv] f32 in/out. dk <= kChunkedMaxDk; any T, dv, Hv multiple of Hk.
void delta_rule_chunked_f16(const ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& g, const Tensor& beta, Tensor& state, bool tiled, Tensor& out);

}  // namespace vi::cuda
