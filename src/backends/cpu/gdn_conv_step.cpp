// CPU gdn_conv_step: literally the ops it stands for (conv1d_causal with SiLU on q, k and v,
// then l2_norm on the q and k heads), through their CPU kernels, so the reference is the
// unfused path bit for bit.
#include <algorithm>

#include "backends/cpu/cpu_util.h"
#include "core/half.h"
#include "ops/gdn.h"
#include "ops/gdn_conv_step.h"
#include "ops/norm.h"

namespace vi::cpu {
namespace {

// Element i of x (f32, f16 or bf16) as f32, as conv1d_causal loads it.
float x_at(const Tensor& x, int64_t i) {
  switch (x.dtype()) {
    case DType::F16: return fp16_to_fp32(x.ptr<uint16_t>()[i]);
    case DType::BF16: return bf16_to_fp32(x.ptr<uint16_t>()[i]);
    default: return x.ptr<float>()[i];
  }
}

// The window after token t < T - 1: the last K-1 of the old window's rows followed by x's
// rows 0..t as f32 (the state holds the inputs as conv1d_causal keeps them), oldest first.
void write_windows(const ops::ConvGroup& g) {
  const int64_t T = g.x.dim(0), C = g.x.dim(1), H = g.state.dim(0);
  const float* old = g.state.ptr<float>();
  for (int64_t t = 0; t + 1 < T; ++t) {
    float* win = g.after.ptr<float>() + t * H * C;
    for (int64_t i = 0; i < H; ++i) {
      const int64_t src = t + 1 + i;  // row of concat(old window, x)
      if (src < H) {
        std::copy_n(old + src * C, C, win + i * C);
      } else {
        const int64_t r = src - H;
        for (int64_t c = 0; c < C; ++c) win[i * C + c] = x_at(g.x, r * C + c);
      }
    }
  }
}

void gdn_conv_step_cpu(ops::Context& ctx, const ops::ConvGroup& q, const ops::ConvGroup& k, const ops::ConvGroup& v,
                       int64_t head_dim, float eps, float q_scale) {
  const DType t = q.x.dtype();
  // The kernels straight from the tables: the ops' own entry points would time them again
  // under this op's profiler scope.
  const auto conv = ops::conv1d_causal_table().get(Device::CPU, t);
  const auto l2 = ops::l2_norm_table().get(Device::CPU, t);
  for (const ops::ConvGroup* gr : {&q, &k, &v}) {
    Tensor state = gr->state, y = gr->y;
    if (gr->after.data() != nullptr) write_windows(*gr);  // before the conv moves the state on
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
