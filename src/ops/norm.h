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

// x += o, then y = rms_norm(x, w, eps, w_offset): a block's residual add and the norm that
// reads the stream next, in one pass (one kernel instead of two on a GPU). The sum is
// rounded to x's dtype exactly as ops::add rounds it before the norm reads it, so the
// results equal add-then-rms_norm. x, o, y: [R, n] one dtype; w: [n] f32. y may alias o
// (each element is read before it is written), never x (x keeps the residual stream).
// On CUDA y may instead be Q8_KX [R, n] (f16 x, n % 256 == 0): the f16 result as int8 blocks,
// for a matmul whose ops::matmul_input_dtype is Q8_KX.
void add_rms_norm(Context& ctx, Tensor& x, const Tensor& o, const Tensor& w, float eps, float w_offset, Tensor& y);
using AddRmsNormFn = void (*)(Context&, Tensor& x, const Tensor& o, const Tensor& w, float eps, float w_offset,
                              Tensor& y);
OpTable<AddRmsNormFn>& add_rms_norm_table();  // keyed by x dtype

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
