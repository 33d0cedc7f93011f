// The pieces every decoder here ends its layers and its pass with: the SwiGLU MLP with
// its pre-norm and residual add, and the final norm plus output head over the rows the
// batch wants logits for.
#pragma once

#include "core/tensor.h"
#include "models/batch.h"
#include "models/model.h"
#include "ops/registry.h"

namespace vi {

// x += down(silu(gate(rms(x))) * up(rms(x))). x, n, o: [N, d]; g, u: [N, d_ff] (scratch).
// norm_off: the RMSNorm weight offset (1 for Qwen3.5's HF weights, else 0).
void swiglu_mlp_block(ops::Context& ctx, Tensor& x, const Tensor& norm_w, float eps, float norm_off,
                      const Tensor& w_gate, const Tensor& w_up, const Tensor& w_down, Tensor& n, Tensor& g, Tensor& u,
                      Tensor& o);

// logits = head(rms(x rows the plan returns)), [rows, n_vocab] in ctx.act, then moved to
// the host as f32 when `where` asks for it. n: [N, d] scratch.
void output_logits(ops::Context& ctx, const BatchPlan& plan, const Tensor& x, const Tensor& norm_w, float eps,
                   float norm_off, const Tensor& lm_head, int64_t n_vocab, Tensor& n, LogitsOn where, Tensor& logits);

}  // namespace vi
