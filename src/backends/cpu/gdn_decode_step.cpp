// CPU gdn_decode_step: literally the ops it stands for (gdn_gates on all tokens, the
// recurrent gated_delta_rule over each sequence's T rows, gated_rms_norm per token and head),
// through their CPU kernels, so the reference is that composition bit for bit.
#include <cstring>

#include "backends/cpu/cpu_util.h"
#include "ops/gdn.h"
#include "ops/gdn_decode_step.h"
#include "ops/norm.h"

namespace vi::cpu {
namespace {

void gdn_decode_step_cpu(ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                         const Tensor& b, const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z,
                         const Tensor& norm_w, float eps, const std::vector<Tensor>& states, ops::GvaLayout layout,
                         Tensor& y, const std::vector<Tensor>& checkpoints) {
  const DType t = q.dtype();
  // R rows: N sequences (states) of T tokens each, sequence n's rows [n T, (n + 1) T).
  const int64_t R = q.dim(0), N = static_cast<int64_t>(states.size()), T = R / N, Hv = v.dim(1), dv = v.dim(2);
  // The kernels straight from the tables: the ops' own entry points would time them again
  // under this op's profiler scope.
  const auto gates = ops::gdn_gates_table().get(Device::CPU, t);
  const auto delta = ops::gated_delta_rule_table().get(Device::CPU, t);
  const auto norm = ops::gated_rms_norm_table().get(Device::CPU, t);
  Tensor g = Tensor::empty(DType::F32, {R, Hv}), beta = Tensor::empty(DType::F32, {R, Hv});  // [R, Hv] f32
  Tensor core = Tensor::empty(t, {R, Hv, dv});  // [R, Hv, dv], the activation dtype as gated_delta_rule stores it
  gates(ctx, a, b, neg_exp_A, dt_bias, g, beta);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t r0 = n * T, r1 = r0 + T;
    Tensor state = states[static_cast<size_t>(n)], core_n = core.slice_rows(r0, r1);
    const Tensor* ck = checkpoints.empty() ? nullptr : &checkpoints[static_cast<size_t>(n)];
    if (ck == nullptr || ck->data() == nullptr) {
      delta(ctx, q.slice_rows(r0, r1), k.slice_rows(r0, r1), v.slice_rows(r0, r1), g.slice_rows(r0, r1),
            beta.slice_rows(r0, r1), state, layout, ops::DeltaRuleForm::kRecurrent, core_n);
      continue;
    }
    // Token by token (the recurrent form's own order, so the same bits), the state copied
    // aside after each but the last.
    for (int64_t r = r0; r < r1; ++r) {
      Tensor core_r = core.slice_rows(r, r + 1);
      delta(ctx, q.slice_rows(r, r + 1), k.slice_rows(r, r + 1), v.slice_rows(r, r + 1), g.slice_rows(r, r + 1),
            beta.slice_rows(r, r + 1), state, layout, ops::DeltaRuleForm::kRecurrent, core_r);
      if (r + 1 < r1) std::memcpy(ck->slice_rows(r - r0, r - r0 + 1).data(), state.data(), state.nbytes());
    }
  }
  Tensor yr = y.reshape({R * Hv, dv});
  norm(ctx, core.reshape({R * Hv, dv}), z.reshape({R * Hv, dv}), norm_w, eps, yr);
}

const bool registered = [] {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) ops::gdn_decode_step_table().add(Device::CPU, t, gdn_decode_step_cpu);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
