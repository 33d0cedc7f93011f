// gdn_decode_step entry point: the shape checks of gdn_gates, gated_delta_rule and
// gated_rms_norm for T tokens per sequence (rows = sequences x T), then the (device, q dtype)
// kernel.
#include "ops/gdn_decode_step.h"

#include <initializer_list>

#include "ops/op_checks.h"
#include "ops/profiler.h"

namespace vi::ops {

OpTable<GdnDecodeStepFn>& gdn_decode_step_table() {
  static OpTable<GdnDecodeStepFn> table("gdn_decode_step");
  return table;
}

void gdn_decode_step(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                     const Tensor& b, const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z,
                     const Tensor& norm_w, float eps, const std::vector<Tensor>& states, GvaLayout layout, Tensor& y,
                     const std::vector<Tensor>& checkpoints) {
  check_same_device("gdn_decode_step", ctx, {&q, &k, &v, &a, &b, &neg_exp_A, &dt_bias, &z, &norm_w, &y});
  const DType t = q.dtype();
  VI_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16,
           "op 'gdn_decode_step': q dtype {} is not f32/f16/bf16", dtype_name(t));
  VI_CHECK(q.ndim() == 3 && q.dim(1) >= 1 && q.dim(2) >= 1, "op 'gdn_decode_step': q {} must be [R, Hk, dk]",
           describe(q));
  const int64_t R = q.dim(0), Hk = q.dim(1), dk = q.dim(2);  // R: rows (sequences x tokens)
  const int64_t n_seq = static_cast<int64_t>(states.size());
  VI_CHECK(n_seq >= 1 && R % n_seq == 0,
           "op 'gdn_decode_step': q {} has {} rows, not T rows for each of {} sequences (states)", describe(q), R,
           n_seq);
  VI_CHECK(same_shape(k, q), "op 'gdn_decode_step': k {} must have the shape of q {}", describe(k), describe(q));
  VI_CHECK(v.ndim() == 3 && v.dim(0) == R && v.dim(1) >= 1 && v.dim(2) >= 1 && v.dim(1) % Hk == 0,
           "op 'gdn_decode_step': v {} must be [R={}, Hv, dv] with Hv a multiple of Hk={}", describe(v), R, Hk);
  const int64_t Hv = v.dim(1), dv = v.dim(2);
  VI_CHECK(same_shape(z, v) && same_shape(y, v), "op 'gdn_decode_step': z {} and y {} must have the shape of v {}",
           describe(z), describe(y), describe(v));
  for (const Tensor* p : std::initializer_list<const Tensor*>{&k, &v, &z, &y})
    VI_CHECK(p->dtype() == t, "op 'gdn_decode_step': {} must have q's dtype {}", describe(*p), dtype_name(t));
  for (const Tensor* p : {&a, &b})
    VI_CHECK(p->ndim() == 2 && p->dim(0) == R && p->dim(1) == Hv && p->dtype() == t,
             "op 'gdn_decode_step': gate input {} must be [R={}, Hv={}] {}", describe(*p), R, Hv, dtype_name(t));
  for (const Tensor* p : {&neg_exp_A, &dt_bias})
    VI_CHECK(p->ndim() == 1 && p->dim(0) == Hv && p->dtype() == DType::F32,
             "op 'gdn_decode_step': {} must be [Hv={}] f32", describe(*p), Hv);
  VI_CHECK(norm_w.ndim() == 1 && norm_w.dim(0) == dv && norm_w.dtype() == DType::F32,
           "op 'gdn_decode_step': norm weight {} must be [dv={}] f32", describe(norm_w), dv);
  VI_CHECK(eps > 0.0f, "op 'gdn_decode_step': eps {} must be > 0", eps);
  for (const Tensor& s : states) {
    check_same_device("gdn_decode_step", ctx, {&s});
    VI_CHECK(s.dtype() == DType::F32 && s.ndim() == 3 && s.dim(0) == Hv && s.dim(1) == dk && s.dim(2) == dv,
             "op 'gdn_decode_step': state {} must be [Hv={}, dk={}, dv={}] f32", describe(s), Hv, dk, dv);
  }
  VI_CHECK(checkpoints.empty() || checkpoints.size() == states.size(),
           "op 'gdn_decode_step': {} checkpoint tensors for {} sequences (one each, or none)", checkpoints.size(),
           states.size());
  double ckpt_bytes = 0;
  for (const Tensor& c : checkpoints) {
    if (c.data() == nullptr) continue;
    check_same_device("gdn_decode_step", ctx, {&c});
    VI_CHECK(c.dtype() == DType::F32 && c.ndim() == 4 && c.dim(0) >= R / n_seq - 1 && c.dim(1) == Hv &&
                 c.dim(2) == dk && c.dim(3) == dv,
             "op 'gdn_decode_step': checkpoints {} must be [>= T - 1 = {}, Hv={}, dk={}, dv={}] f32", describe(c),
             R / n_seq - 1, Hv, dk, dv);
    ckpt_bytes += static_cast<double>(R / n_seq - 1) * Hv * dk * dv * 4;
  }
  VI_CHECK(layout == GvaLayout::kGrouped || layout == GvaLayout::kTiled,
           "op 'gdn_decode_step': unknown GVA layout {}", static_cast<int>(layout));
  // The states are read and written once per step (CUDA) however many tokens it takes.
  const double state_bytes = static_cast<double>(n_seq) * Hv * dk * dv * 4;
  VI_OP_SCOPE_F(ctx, "gdn_decode_step", t,
                q.nbytes() + k.nbytes() + v.nbytes() + a.nbytes() + b.nbytes() + z.nbytes() + y.nbytes() +
                    2 * state_bytes + ckpt_bytes,
                6.0 * R * Hv * dk * dv,  // k^T S, update, q^T S per row
                "N={} T={} Hv={} dk={} dv={}", n_seq, R / n_seq, Hv, dk, dv);
  gdn_decode_step_table().get(ctx.device, t)(ctx, q, k, v, a, b, neg_exp_A, dt_bias, z, norm_w, eps, states, layout,
                                             y, checkpoints);
}

}  // namespace vi::ops
