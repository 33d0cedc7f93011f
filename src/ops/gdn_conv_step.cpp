// gdn_conv_step entry point: checks every group's shapes against conv1d_causal's (one T for
// all three) and the heads against l2_norm's, then the (device, x dtype) kernel.
#include "ops/gdn_conv_step.h"

#include "ops/op_checks.h"
#include "ops/profiler.h"

namespace vi::ops {

OpTable<GdnConvStepFn>& gdn_conv_step_table() {
  static OpTable<GdnConvStepFn> table("gdn_conv_step");
  return table;
}

void gdn_conv_step(Context& ctx, const ConvGroup& q, const ConvGroup& k, const ConvGroup& v, int64_t head_dim,
                   float eps, float q_scale) {
  const int64_t K = q.w.ndim() == 2 ? q.w.dim(1) : 0;
  const int64_t T = q.x.ndim() == 2 ? q.x.dim(0) : 0;  // tokens of the sequence
  double bytes = 0;
  for (const auto& [name, gr] : {std::pair<const char*, const ConvGroup*>{"q", &q}, {"k", &k}, {"v", &v}}) {
    check_same_device("gdn_conv_step", ctx, {&gr->x, &gr->w, &gr->state, &gr->y});
    VI_CHECK(gr->x.ndim() == 2 && T >= 1 && gr->x.dim(0) == T && gr->x.dtype() == q.x.dtype(),
             "op 'gdn_conv_step': {} x {} must be [T, C] {} with q's T ({} rows, at least 1)", name, describe(gr->x),
             dtype_name(q.x.dtype()), T);
    const int64_t C = gr->x.dim(1);
    VI_CHECK(same_shape(gr->x, gr->y) && gr->y.dtype() == gr->x.dtype(), "op 'gdn_conv_step': {} y {} must match x {}",
             name, describe(gr->y), describe(gr->x));
    VI_CHECK(K >= 1 && gr->w.dtype() == DType::F32 && gr->w.ndim() == 2 && gr->w.dim(0) == C && gr->w.dim(1) == K,
             "op 'gdn_conv_step': {} w {} must be [{}, {}] f32", name, describe(gr->w), C, K);
    VI_CHECK(gr->state.dtype() == DType::F32 && gr->state.ndim() == 2 && gr->state.dim(0) == K - 1 &&
                 gr->state.dim(1) == C,
             "op 'gdn_conv_step': {} state {} must be [{}, {}] f32", name, describe(gr->state), K - 1, C);
    bytes += static_cast<double>(2 * gr->x.nbytes() + gr->w.nbytes() + 2 * gr->state.nbytes());
    if (gr->after.data() != nullptr) {
      check_same_device("gdn_conv_step", ctx, {&gr->after});
      VI_CHECK(gr->after.dtype() == DType::F32 && gr->after.ndim() == 3 && gr->after.dim(0) >= T - 1 &&
                   gr->after.dim(1) == K - 1 && gr->after.dim(2) == C,
               "op 'gdn_conv_step': {} windows after each token {} must be [>= T - 1 = {}, {}, {}] f32", name,
               describe(gr->after), T - 1, K - 1, C);
      bytes += static_cast<double>(T - 1) * static_cast<double>(gr->state.nbytes());
    }
  }
  VI_CHECK(head_dim > 0 && q.x.dim(1) % head_dim == 0 && k.x.dim(1) % head_dim == 0,
           "op 'gdn_conv_step': q {} and k {} must be whole heads of {}", describe(q.x), describe(k.x), head_dim);
  VI_OP_SCOPE(ctx, "gdn_conv_step", q.x.dtype(), bytes, "T{} q{} k{} v{} K{}", T, q.x.dim(1), k.x.dim(1), v.x.dim(1),
              K);
  gdn_conv_step_table().get(ctx.device, q.x.dtype())(ctx, q, k, v, head_dim, eps, q_scale);
}

}  // namespace vi::ops
