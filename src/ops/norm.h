// Normalisation ops. Every one works on the rows of its input (the innermost dimension),
// so per-head norms are the same op on a [T * heads, head_dim] view.
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// y = x * rsqrt(mean(x²) + eps) * (w + w_offset), fp32 math.
// w_offset is 0 for Llama-style weights and 1 for Qwen3.5's zero-centred (1 + w) norm
// when the weights come unfolded from safetensors. x, y: [R, n]; w: [n] f32.
void rms_norm(Context& ctx, const Tensor& x, const Tensor& w, float eps, float w_offset, Tensor& y);
using RmsNormFn = void (*)(Context&, const Tensor& x, const Tensor& w, float eps, float w_offset,
                           Tensor& y);
OpTable<RmsNormFn>& rms_norm_table();  // keyed by x dtype

// y = x * rsqrt(sum(x²) + eps) * scale  (the Gated DeltaNet q/k norm; eps on the SUM).
void l2_norm(Context& ctx, const Tensor& x, float eps, float scale, Tensor& y);
using L2NormFn = void (*)(Context&, const Tensor& x, float eps, float scale, Tensor& y);
OpTable<L2NormFn>& l2_norm_table();  // keyed by x dtype

// y = w * (x * rsqrt(mean(x²) + eps)) * silu(z)  (Qwen3.5 GDN output norm; w used directly).
// x, z, y: [R, n]; w: [n] f32.
void gated_rms_norm(Context& ctx, const Tensor& x, const Tensor& z, const Tensor& w, float eps,
                    Tensor& y);
using GatedRmsNormFn = void (*)(Context&, const Tensor& x, const Tensor& z, const Tensor& w,
                                float eps, Tensor& y);
OpTable<GatedRmsNormFn>& gated_rms_norm_table();  // keyed by x dtype

}  // namespace vi::ops
