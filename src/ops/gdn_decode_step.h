// A decode round's Gated DeltaNet core as one op: the gates, the recurrent delta rule and
// the gated output norm of one token per sequence. A decode step ran gdn_gates,
// gated_delta_rule (recurrent, once per sequence) and gated_rms_norm per GDN layer; this op
// does the same math in one launch and keeps g, beta and the delta rule's output out of memory.
#pragma once

#include <vector>

#include "ops/gdn.h"

namespace vi::ops {

// For every sequence n (one token each) and value head j:
//   g, beta  = gdn_gates(a[n], b[n], neg_exp_A, dt_bias)
//   core     = gated_delta_rule(q[n], k[n], v[n], g, beta, states[n], layout, kRecurrent)
//   y[n]     = gated_rms_norm(core, z[n], norm_w, eps)   (per head of dv)
// with core rounded to the activation dtype before the norm reads it, as the stored output
// of gated_delta_rule would be; states[n] advances by the token.
// q, k: [N, Hk, dk] (L2-normalised, q scaled); v, z, y: [N, Hv, dv]; a, b: [N, Hv];
// all of one activation dtype. neg_exp_A, dt_bias: [Hv] f32; norm_w: [dv] f32;
// states: N tensors [Hv, dk, dv] f32, in/out, one per sequence. y may alias z.
void gdn_decode_step(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                     const Tensor& b, const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z,
                     const Tensor& norm_w, float eps, const std::vector<Tensor>& states, GvaLayout layout, Tensor& y);
using GdnDecodeStepFn = void (*)(Context&, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                                 const Tensor& b, const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z,
                                 const Tensor& norm_w, float eps, const std::vector<Tensor>& states, GvaLayout layout,
                                 Tensor& y);
OpTable<GdnDecodeStepFn>& gdn_decode_step_table();  // keyed by q dtype

}  // namespace vi::ops
