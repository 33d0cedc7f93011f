// A decode or verify round's whole Gated DeltaNet step after the input projection as one op:
// gdn_conv_step (causal conv + SiLU of q, k and v, L2 norm of the q and k heads) on each
// sequence's rows, then gdn_decode_step (gates, recurrent delta rule, gated output norm) on all
// of them. Where the device has a fused kernel for the call (CUDA, sm_90, the Qwen3.5 head shape,
// one token per sequence) the conv outputs never go through memory and one launch replaces two;
// everywhere else the op runs as those two ops.
#pragma once

#include <vector>

#include "ops/gdn_conv_step.h"
#include "ops/gdn_decode_step.h"

namespace vi::ops {

// One sequence's conv windows of a GDN layer: [K-1, C] f32 each, in/out (ConvGroup::state).
struct GdnConvWindows {
  Tensor q, k, v;
};

// The conv half of the step. x*: the raw input projections as heads, rows as gdn_decode_step's
// (sequence n's T tokens at rows [n T, (n + 1) T)); w*: the taps [C, K] f32 of the flattened
// channels (w[:, K-1] the current token's); windows: one per sequence, in the order of the
// decode step's states; c*: scratch shaped and typed as x*, where the op runs as its two ops
// the conv outputs, contents unspecified afterwards; l2_eps, q_scale: gdn_conv_step's eps and
// q scale.
struct GdnConvIn {
  Tensor xq, xk, xv;  // [R, Hk, dk], [R, Hk, dk], [R, Hv, dv]
  Tensor wq, wk, wv;  // [Hk dk, K], [Hk dk, K], [Hv dv, K] f32
  std::vector<GdnConvWindows> windows;
  Tensor cq, ck, cv;  // scratch, shaped as xq, xk, xv
  float l2_eps = 1e-6f;
  float q_scale = 1.0f;
};

// Equals, for each sequence n: gdn_conv_step(ConvGroup{xq's rows of n as [T, Hk dk], wq,
// windows[n].q, cq's rows of n}, .. k .., .. v .., dk, l2_eps, q_scale), then gdn_decode_step(cq,
// ck, cv, a, b, neg_exp_A, dt_bias, z, norm_w, eps, states, layout, y): the same math, up to
// rounding where a fused kernel adds or fuses in another order than the two ops' kernels (the
// CUDA one keeps their orders; its results are within ~1e-7 of theirs in f32). Arguments as those
// ops take them; y may alias z.
void gdn_conv_decode_step(Context& ctx, const GdnConvIn& in, const Tensor& a, const Tensor& b,
                          const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z, const Tensor& norm_w,
                          float eps, const std::vector<Tensor>& states, GvaLayout layout, Tensor& y);

// A device's fused kernel: run = false asks whether it takes this call (no work, no memory
// touched), run = true runs it (only after a true answer). Keyed by x dtype; optional (a
// device without one, or one that declines, runs the two ops).
using GdnConvDecodeStepFn = bool (*)(Context&, const GdnConvIn& in, const Tensor& a, const Tensor& b,
                                     const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z,
                                     const Tensor& norm_w, float eps, const std::vector<Tensor>& states,
                                     GvaLayout layout, Tensor& y, bool run);
OpTable<GdnConvDecodeStepFn>& gdn_conv_decode_step_table();

}  // namespace vi::ops
