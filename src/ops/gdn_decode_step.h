// A decode or verify round's Gated DeltaNet core as one op: the gates, the recurrent delta
// rule and the gated output norm of a few tokens per sequence. A decode step ran gdn_gates,
// gated_delta_rule (once per sequence) and gated_rms_norm per GDN layer; this op does the
// same math in one launch, keeps g, beta and the delta rule's output out of memory, and
// (on CUDA) reads and writes each state once per step however many tokens it takes.
#pragma once

#include <vector>

#include "ops/gdn.h"
#include "ops/gdn_conv_step.h"  // kMaxFusedGdnRows

namespace vi::ops {

// R = N * T rows: N sequences of T tokens each, row r = n * T + t is token t of sequence n
// (T = R / N, N = states.size(); a decode round has T = 1, a verify round of one sequence
// N = 1). For every sequence n, value head j and token t in order:
//   g, beta  = gdn_gates(a[r], b[r], neg_exp_A, dt_bias)
//   core     = gated_delta_rule(q[r], k[r], v[r], g, beta, states[n], layout, kRecurrent)
//   y[r]     = gated_rms_norm(core, z[r], norm_w, eps)   (per head of dv)
// with core rounded to the activation dtype before the norm reads it, as the stored output
// of gated_delta_rule would be; states[n] advances by the T tokens. That is gdn_gates +
// gated_delta_rule(kRecurrent) over each sequence's T rows + gated_rms_norm; the unfused
// model path runs kChunked for T > 1, which is the same math in another order (rounding).
// q, k: [R, Hk, dk] (L2-normalised, q scaled); v, z, y: [R, Hv, dv]; a, b: [R, Hv];
// all of one activation dtype. neg_exp_A, dt_bias: [Hv] f32; norm_w: [dv] f32;
// states: N >= 1 tensors [Hv, dk, dv] f32, in/out, one per sequence; R a multiple of N.
// y may alias z. Meant for T <= kMaxFusedGdnRows (ops/gdn_conv_step.h); larger T is correct
// and runs in passes of that many tokens on CUDA.
// checkpoints (speculative decoding's verify pass, which may have to go back): empty, or one
// tensor per sequence, [>= T - 1, Hv, dk, dv] f32, that receives the state after each of its
// tokens but the last (row t: after token t; the state after the last is states[n]); a
// sequence whose tensor is empty (no data) keeps none. The same values as the state would
// have after a step of the first t + 1 tokens alone.
void gdn_decode_step(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                     const Tensor& b, const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z,
                     const Tensor& norm_w, float eps, const std::vector<Tensor>& states, GvaLayout layout, Tensor& y,
                     const std::vector<Tensor>& checkpoints = {});
using GdnDecodeStepFn = void (*)(Context&, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                                 const Tensor& b, const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z,
                                 const Tensor& norm_w, float eps, const std::vector<Tensor>& states, GvaLayout layout,
                                 Tensor& y, const std::vector<Tensor>& checkpoints);
OpTable<GdnDecodeStepFn>& gdn_decode_step_table();  // keyed by q dtype

}  // namespace vi::ops
