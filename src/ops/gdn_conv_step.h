// The one-token input path of a Gated DeltaNet layer as one op: causal conv + SiLU of the
// q, k and v channels and the L2 norm of the q and k heads. A decode step runs it once per
// sequence and GDN layer, where conv1d_causal x3 and l2_norm x2 took five launches.
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// One channel group of the causal depthwise conv, as conv1d_causal takes it, for one token.
struct ConvGroup {
  Tensor x;      // [1, C] activations
  Tensor w;      // [C, K] f32 (w[:, K-1] multiplies the current token)
  Tensor state;  // [K-1, C] f32 in/out: the previous K-1 inputs, oldest first
  Tensor y;      // [1, C], x's dtype (may alias x)
};

// For each of q, k and v: y = silu(conv1d_causal(x, w, state)), the state advanced by the
// token; then every head_dim-wide head of q.y and k.y L2-normalised as l2_norm does (eps on
// the sum of squares; q scaled by q_scale, k by 1). Equals conv1d_causal (silu) on each group
// followed by l2_norm on q.y and k.y (the norms read the conv output rounded to x's dtype).
// Every x has one dtype, every w one width K; q's and k's C are multiples of head_dim.
void gdn_conv_step(Context& ctx, const ConvGroup& q, const ConvGroup& k, const ConvGroup& v, int64_t head_dim,
                   float eps, float q_scale);
using GdnConvStepFn = void (*)(Context&, const ConvGroup& q, const ConvGroup& k, const ConvGroup& v,
                               int64_t head_dim, float eps, float q_scale);
OpTable<GdnConvStepFn>& gdn_conv_step_table();  // keyed by x dtype

}  // namespace vi::ops
