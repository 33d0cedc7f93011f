// Gated DeltaNet op entry points: shape/dtype/device validation, then dispatch through the
// op tables (declarations and math in ops/gdn.h). Kernels live in backends/*/gdn_*.
#include "ops/gdn.h"
#include "ops/profiler.h"

#include <initializer_list>

namespace vi::ops {

namespace {

const char* tensor_label(const Tensor& t) {
  return t.name().empty() ? "tensor" : t.name().c_str();
}

bool is_float_activation(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

}  // namespace

OpTable<Conv1dFn>& conv1d_causal_table() {
  static OpTable<Conv1dFn> table("conv1d_causal");
  return table;
}

OpTable<GdnGatesFn>& gdn_gates_table() {
  static OpTable<GdnGatesFn> table("gdn_gates");
  return table;
}

OpTable<GatedDeltaRuleFn>& gated_delta_rule_table() {
  static OpTable<GatedDeltaRuleFn> table("gated_delta_rule");
  return table;
}

void conv1d_causal(Context& ctx, const Tensor& x, const Tensor& w, Tensor& state, bool silu,
                   Tensor& y) {
  check_same_device("conv1d_causal", ctx, {&x, &w, &state, &y});
  VI_CHECK(x.ndim() == 2, "op 'conv1d_causal': x must be [T, C], got {}", x.shape_str());
  VI_CHECK(is_float_activation(x.dtype()), "op 'conv1d_causal': x dtype {} is not f32/f16/bf16",
           dtype_name(x.dtype()));
  const int64_t T = x.dim(0), C = x.dim(1);
  VI_CHECK(w.ndim() == 2 && w.dim(0) == C && w.dim(1) >= 1,
           "op 'conv1d_causal': w must be [C={}, K>=1], got {} ({})", C, w.shape_str(),
           tensor_label(w));
  VI_CHECK(w.dtype() == DType::F32, "op 'conv1d_causal': w must be f32, got {} ({})",
           dtype_name(w.dtype()), tensor_label(w));
  const int64_t K = w.dim(1);
  VI_CHECK(state.ndim() == 2 && state.dim(0) == K - 1 && state.dim(1) == C,
           "op 'conv1d_causal': state must be [K-1={}, C={}], got {}", K - 1, C, state.shape_str());
  VI_CHECK(state.dtype() == DType::F32, "op 'conv1d_causal': state must be f32, got {}",
           dtype_name(state.dtype()));
  VI_CHECK(y.ndim() == 2 && y.dim(0) == T && y.dim(1) == C,
           "op 'conv1d_causal': y must be [T={}, C={}] like x, got {}", T, C, y.shape_str());
  VI_CHECK(y.dtype() == x.dtype(), "op 'conv1d_causal': y dtype {} differs from x dtype {}",
           dtype_name(y.dtype()), dtype_name(x.dtype()));
  VI_OP_SCOPE(ctx, "conv1d_causal", x.dtype(), x.nbytes() + w.nbytes() + 2 * state.nbytes() + y.nbytes(), "T={} C={} K={}", T, C, K);
  conv1d_causal_table().get(ctx.device, x.dtype())(ctx, x, w, state, silu, y);
}

void gdn_gates(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& neg_exp_A,
               const Tensor& dt_bias, Tensor& g, Tensor& beta) {
  check_same_device("gdn_gates", ctx, {&a, &b, &neg_exp_A, &dt_bias, &g, &beta});
  VI_CHECK(a.ndim() == 2, "op 'gdn_gates': a must be [T, Hv], got {}", a.shape_str());
  VI_CHECK(is_float_activation(a.dtype()), "op 'gdn_gates': a dtype {} is not f32/f16/bf16",
           dtype_name(a.dtype()));
  const int64_t T = a.dim(0), Hv = a.dim(1);
  VI_CHECK(b.shape() == a.shape(), "op 'gdn_gates': b {} must have the shape of a {}", b.shape_str(),
           a.shape_str());
  VI_CHECK(b.dtype() == a.dtype(), "op 'gdn_gates': b dtype {} differs from a dtype {}",
           dtype_name(b.dtype()), dtype_name(a.dtype()));
  for (const Tensor* p : std::initializer_list<const Tensor*>{&neg_exp_A, &dt_bias}) {
    VI_CHECK(p->ndim() == 1 && p->dim(0) == Hv && p->dtype() == DType::F32,
             "op 'gdn_gates': {} must be [Hv={}] f32, got {} {}",
             p == &neg_exp_A ? "neg_exp_A" : "dt_bias", Hv, p->shape_str(),
             dtype_name(p->dtype()));
  }
  for (const Tensor* p : std::initializer_list<const Tensor*>{&g, &beta}) {
    VI_CHECK(p->ndim() == 2 && p->dim(0) == T && p->dim(1) == Hv && p->dtype() == DType::F32,
             "op 'gdn_gates': {} must be [T={}, Hv={}] f32, got {} {}", p == &g ? "g" : "beta", T, Hv,
             p->shape_str(), dtype_name(p->dtype()));
  }
  VI_OP_SCOPE(ctx, "gdn_gates", a.dtype(), a.nbytes() + b.nbytes() + neg_exp_A.nbytes() + dt_bias.nbytes() + g.nbytes() + beta.nbytes(), "T={} Hv={}", T, Hv);
  gdn_gates_table().get(ctx.device, a.dtype())(ctx, a, b, neg_exp_A, dt_bias, g, beta);
}

void gated_delta_rule(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                      const Tensor& g, const Tensor& beta, Tensor& state, GvaLayout layout,
                      DeltaRuleForm form, Tensor& out) {
  check_same_device("gated_delta_rule", ctx, {&q, &k, &v, &g, &beta, &state, &out});
  VI_CHECK(q.ndim() == 3, "op 'gated_delta_rule': q must be [T, Hk, dk], got {}", q.shape_str());
  VI_CHECK(is_float_activation(q.dtype()), "op 'gated_delta_rule': q dtype {} is not f32/f16/bf16",
           dtype_name(q.dtype()));
  const int64_t T = q.dim(0), Hk = q.dim(1), dk = q.dim(2);
  VI_CHECK(Hk >= 1 && dk >= 1, "op 'gated_delta_rule': q {} has an empty head axis", q.shape_str());
  VI_CHECK(k.shape() == q.shape(), "op 'gated_delta_rule': k {} must have the shape of q {}",
           k.shape_str(), q.shape_str());
  VI_CHECK(v.ndim() == 3 && v.dim(0) == T,
           "op 'gated_delta_rule': v must be [T={}, Hv, dv], got {}", T, v.shape_str());
  const int64_t Hv = v.dim(1), dv = v.dim(2);
  VI_CHECK(Hv >= 1 && dv >= 1 && Hv % Hk == 0,
           "op 'gated_delta_rule': value heads Hv={} (v {}) must be a non-zero multiple of key heads "
           "Hk={} (q {})",
           Hv, v.shape_str(), Hk, q.shape_str());
  for (const Tensor* p : std::initializer_list<const Tensor*>{&k, &v, &out}) {
    VI_CHECK(p->dtype() == q.dtype(), "op 'gated_delta_rule': {} dtype {} differs from q dtype {}",
             p == &k ? "k" : p == &v ? "v" : "out", dtype_name(p->dtype()),
             dtype_name(q.dtype()));
  }
  for (const Tensor* p : std::initializer_list<const Tensor*>{&g, &beta}) {
    VI_CHECK(p->ndim() == 2 && p->dim(0) == T && p->dim(1) == Hv && p->dtype() == DType::F32,
             "op 'gated_delta_rule': {} must be [T={}, Hv={}] f32, got {} {}", p == &g ? "g" : "beta",
             T, Hv, p->shape_str(), dtype_name(p->dtype()));
  }
  VI_CHECK(state.ndim() == 3 && state.dim(0) == Hv && state.dim(1) == dk && state.dim(2) == dv &&
               state.dtype() == DType::F32,
           "op 'gated_delta_rule': state must be [Hv={}, dk={}, dv={}] f32, got {} {}", Hv, dk, dv,
           state.shape_str(), dtype_name(state.dtype()));
  VI_CHECK(out.shape() == v.shape(), "op 'gated_delta_rule': out {} must have the shape of v {}",
           out.shape_str(), v.shape_str());
  VI_CHECK(layout == GvaLayout::kGrouped || layout == GvaLayout::kTiled,
           "op 'gated_delta_rule': unknown GVA layout {}", static_cast<int>(layout));
  VI_CHECK(form == DeltaRuleForm::kRecurrent || form == DeltaRuleForm::kChunked,
           "op 'gated_delta_rule': unknown form {}", static_cast<int>(form));
  VI_OP_SCOPE_F(ctx, "gated_delta_rule", q.dtype(), q.nbytes() + k.nbytes() + v.nbytes() + g.nbytes() + beta.nbytes() + 2 * state.nbytes() + out.nbytes(),
                6.0 * T * Hv * dk * dv, "T={} Hv={} dk={} dv={} {}", T, Hv, dk, dv, form == DeltaRuleForm::kChunked ? "chunked" : "recurrent");  // k^T S, update, q^T S
  gated_delta_rule_table().get(ctx.device, q.dtype())(ctx, q, k, v, g, beta, state, layout, form,
                                                      out);
}

}  // namespace vi::ops
