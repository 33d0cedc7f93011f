// Gated DeltaNet ops (Qwen3.5 linear-attention layers). Math: MODEL_QWEN35 §5.
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// Causal depthwise conv1d with carried state, then optional SiLU.
// x: [T, C]; w: [C, K] f32 (w[:, K-1] multiplies the current token);
// state: [K-1, C] f32 in/out, the previous K-1 inputs oldest first (zeros at start);
// y: [T, C]. After the call state holds the last K-1 inputs (from x and the old state).
void conv1d_causal(Context& ctx, const Tensor& x, const Tensor& w, Tensor& state, bool silu,
                   Tensor& y);
using Conv1dFn = void (*)(Context&, const Tensor& x, const Tensor& w, Tensor& state, bool silu,
                          Tensor& y);
OpTable<Conv1dFn>& conv1d_causal_table();  // keyed by x dtype

// Decay and write-strength gates, per token and value head, fp32:
//   g = neg_exp_A * softplus(a + dt_bias)   (softplus(x) = x for x > 20, as PyTorch)
//   beta = sigmoid(b)
// a, b: [T, Hv]; neg_exp_A = -exp(A_log): [Hv] f32; dt_bias: [Hv] f32; g, beta: [T, Hv] f32.
void gdn_gates(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& neg_exp_A,
               const Tensor& dt_bias, Tensor& g, Tensor& beta);
using GdnGatesFn = void (*)(Context&, const Tensor& a, const Tensor& b, const Tensor& neg_exp_A,
                            const Tensor& dt_bias, Tensor& g, Tensor& beta);
OpTable<GdnGatesFn>& gdn_gates_table();  // keyed by a dtype

// Which q/k head a value head reads: HF checkpoints group (j / (Hv/Hk)), llama.cpp GGUF
// files tile (j % Hk) because the converter reorders the value heads.
enum class GvaLayout : uint8_t { kGrouped, kTiled };
// Recurrent: one step per token (decode). Chunked: chunks of 64 tokens (prefill). Same math.
enum class DeltaRuleForm : uint8_t { kRecurrent, kChunked };

// The gated delta rule with fp32 state, per value head j and token t:
//   S ← exp(g_t)·S;  S ← S + k_t (beta_t (v_t − Sᵀk_t))ᵀ;  o_t = Sᵀ q_t.
// q, k: [T, Hk, dk] (already L2-normalised; q already scaled); v: [T, Hv, dv];
// g, beta: [T, Hv] f32; state: [Hv, dk, dv] f32 in/out; out: [T, Hv, dv].
void gated_delta_rule(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                      const Tensor& g, const Tensor& beta, Tensor& state, GvaLayout layout,
                      DeltaRuleForm form, Tensor& out);
using GatedDeltaRuleFn = void (*)(Context&, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& g, const Tensor& beta, Tensor& state,
                                  GvaLayout layout, DeltaRuleForm form, Tensor& out);
OpTable<GatedDeltaRuleFn>& gated_delta_rule_table();  // keyed by q dtype

}  // namespace vi::ops
