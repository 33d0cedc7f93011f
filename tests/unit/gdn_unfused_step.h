// What gdn_decode_step stands for, as the separate ops on ctx's device: gdn_gates on every
// token, gated_delta_rule (recurrent by default) over each sequence's T rows, gated_rms_norm
// per token and head. The reference the CPU and CUDA tests of the fused op compare it with.
#pragma once

#include <vector>

#include "ops/gdn.h"
#include "ops/memory.h"
#include "ops/norm.h"

namespace vi::test {

// q, k: [R, Hk, dk]; v, z, y: [R, Hv, dv] (q's dtype); a, b: [R, Hv]; neg_exp_A, dt_bias: [Hv]
// f32; norm_w: [dv] f32; states: N tensors [Hv, dk, dv] f32, updated; R = N x T, sequence n's
// rows [n T, (n + 1) T). form: the delta rule's form (kChunked: what the model's unfused path
// runs for T > 1).
inline void unfused_gdn_decode_step(ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& a, const Tensor& b, const Tensor& neg_exp_A, const Tensor& dt_bias,
                                    const Tensor& z, const Tensor& norm_w, float eps, std::vector<Tensor>& states,
                                    ops::GvaLayout layout, Tensor& y,
                                    ops::DeltaRuleForm form = ops::DeltaRuleForm::kRecurrent) {
  const int64_t R = q.dim(0), N = static_cast<int64_t>(states.size()), T = R / N, Hv = v.dim(1), dv = v.dim(2);
  Tensor g = ops::empty(ctx, DType::F32, {R, Hv}), beta = ops::empty(ctx, DType::F32, {R, Hv});
  Tensor core = ops::empty(ctx, q.dtype(), {R, Hv, dv});
  ops::gdn_gates(ctx, a, b, neg_exp_A, dt_bias, g, beta);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t r0 = n * T, r1 = r0 + T;
    Tensor core_n = core.slice_rows(r0, r1);
    ops::gated_delta_rule(ctx, q.slice_rows(r0, r1), k.slice_rows(r0, r1), v.slice_rows(r0, r1),
                          g.slice_rows(r0, r1), beta.slice_rows(r0, r1), states[static_cast<size_t>(n)], layout, form,
                          core_n);
  }
  Tensor yr = y.reshape({R * Hv, dv});
  ops::gated_rms_norm(ctx, core.reshape({R * Hv, dv}), z.reshape({R * Hv, dv}), norm_w, eps, yr);
}

}  // namespace vi::test
