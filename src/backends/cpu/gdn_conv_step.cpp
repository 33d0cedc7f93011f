// CPU gdn_conv_step: literally the ops it stands for (conv1d_causal with SiLU on q, k and v,
// then l2_norm on the q and k heads), through their CPU kernels, so the reference is the
// unfused path bit for bit.
#include "backends/cpu/cpu_util.h"
#include "ops/gdn.h"
#include "ops/gdn_conv_step.h"
#include "ops/norm.h"

namespace vi::cpu {
namespace {

void gdn_conv_step_cpu(ops::Context& ctx, const ops::ConvGroup& q, const ops::ConvGroup& k, const ops::ConvGroup& v,
                       int64_t head_dim, float eps, float q_scale) {
  const DType t = q.x.dtype();
  // The kernels straight from the tables: the ops' own entry points would time them again
  // under this op's profiler scope.
  const auto conv = ops::conv1d_causal_table().get(Device::CPU, t);
  const auto l2 = ops::l2_norm_table().get(Device::CPU, t);
  for (const ops::ConvGroup* gr : {&q, &k, &v}) {
    Tensor state = gr->state, y = gr->y;
    conv(ctx, gr->x, gr->w, state, /*silu=*/true, y);
  }
  Tensor qn = q.y.reshape({q.y.numel() / head_dim, head_dim}), kn = k.y.reshape({k.y.numel() / head_dim, head_dim});
  l2(ctx, qn, eps, q_scale, qn);
  l2(ctx, kn, eps, 1.0f, kn);
}

const bool registered = [] {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) ops::gdn_conv_step_table().add(Device::CPU, t, gdn_conv_step_cpu);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
