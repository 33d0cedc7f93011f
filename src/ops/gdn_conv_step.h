// The few-token input path of a Gated DeltaNet layer as one op: causal conv + SiLU of the
// q, k and v channels and the L2 norm of the q and k heads. A decode step (one token) or a
// verify step (a few draft tokens) runs it once per sequence and GDN layer, where
// conv1d_causal x3 and l2_norm x2 took five launches.
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// Tokens per sequence the fused GDN step ops are built for (gdn_conv_step, gdn_decode_step):
// a decode token or a verify round's draft tokens. Larger T is correct but runs in passes
// of this many tokens on CUDA; the model routes steps whose sequences have more rows to the
// unfused ops.
constexpr int64_t kMaxFusedGdnRows = 8;

// One channel group of the causal depthwise conv, as conv1d_causal takes it, for the T
// tokens of one sequence.
struct ConvGroup {
  Tensor x;      // [T, C] activations, tokens in order
  Tensor w;      // [C, K] f32 (w[:, K-1] multiplies the current token)
  Tensor state;  // [K-1, C] f32 in/out: the previous K-1 inputs, oldest first
  Tensor y;      // [T, C], x's dtype (may alias x)
  // Optional (speculative decoding's verify pass): [>= T - 1, K-1, C] f32 receives the window
  // after each token but the last (row t: after token t), i.e. what state would hold after a
  // step of the first t + 1 tokens alone. Empty (no data): none.
  Tensor after = {};
};

// For each of q, k and v: y = silu(conv1d_causal(x, w, state)) over the T tokens in order,
// the state advanced by all of them; then every head_dim-wide head of every token of q.y and
// k.y L2-normalised as l2_norm does (eps on the sum of squares; q scaled by q_scale, k by 1).
// Equals conv1d_causal (silu) on each group followed by l2_norm on q.y and k.y reshaped to
// [T * heads, head_dim] (the norms read the conv output rounded to x's dtype).
// Every x has one dtype and the same T >= 1, every w one width K; q's and k's C are
// multiples of head_dim. Meant for small T (decode and verify steps: the CUDA kernel holds a
// channel's T outputs in registers up to kMaxFusedGdnRows and runs longer inputs in
// several passes); prefill chunks take conv1d_causal.
void gdn_conv_step(Context& ctx, const ConvGroup& q, const ConvGroup& k, const ConvGroup& v, int64_t head_dim,
                   float eps, float q_scale);
using GdnConvStepFn = void (*)(Context&, const ConvGroup& q, const ConvGroup& k, const ConvGroup& v,
                               int64_t head_dim, float eps, float q_scale);
OpTable<GdnConvStepFn>& gdn_conv_step_table();  // keyed by x dtype

}  // namespace vi::ops
