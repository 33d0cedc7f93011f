// What gdn_decode_step stands for, as the separate ops on ctx's device: gdn_gates on every
// token, the recurrent gated_delta_rule per sequence, gated_rms_norm per head. The reference
// the CPU and CUDA tests of the fused op compare it with.
#pragma once

#include <vector>

#include "ops/gdn.h"
#include "ops/memory.h"
#include "ops/norm.h"

namespace vi::test {

// q, k: [N, Hk, dk]; v, z, y: [N, Hv, dv] (q's dtype); a, b: [N, Hv]; neg_exp_A, dt_bias: [Hv]
// f32; norm_w: [dv] f32; states: N tensors [Hv, dk, dv] f32, updated.
inline void unfused_gdn_decode_step(ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& a, const Tensor& b, const Tensor& neg_exp_A, const Tensor& dt_bias,
                                    const Tensor& z, const Tensor& norm_w, float eps, std::vector<Tensor>& states,
                                    ops::GvaLayout layout, Tensor& y) {
  const int64_t N = q.dim(0), Hv = v.dim(1), dv = v.dim(2);
  Tensor g = ops::empty(ctx, DType::F32, {N, Hv}), beta = ops::empty(ctx, DType::F32, {N, Hv});
  Tensor core = ops::empty(ctx, q.dtype(), {N, Hv, dv});
  ops::gdn_gates(ctx, a, b, neg_exp_A, dt_bias, g, beta);
  for (int64_t n = 0; n < N; ++n) {
    Tensor core_n = core.slice_rows(n, n + 1);
    ops::gated_delta_rule(ctx, q.slice_rows(n, n + 1), k.slice_rows(n, n + 1), v.slice_rows(n, n + 1),
                          g.slice_rows(n, n + 1), beta.slice_rows(n, n + 1), states[static_cast<size_t>(n)], layout,
                          ops::DeltaRuleForm::kRecurrent, core_n);
  }
  Tensor yr = y.reshape({N * Hv, dv});
  ops::gated_rms_norm(ctx, core.reshape({N * Hv, dv}), z.reshape({N * Hv, dv}), norm_w, eps, yr);
}

}  // namespace vi::test
