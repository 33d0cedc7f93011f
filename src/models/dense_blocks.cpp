#include "models/dense_blocks.h"

#include "models/loader.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/memory.h"
#include "ops/norm.h"

namespace vi {

void swiglu_mlp_block(ops::Context& ctx, Tensor& x, const Tensor& norm_w, float eps, float norm_off,
                      const Tensor& w_gate, const Tensor& w_up, const Tensor& w_down, Tensor& n, Tensor& g, Tensor& u,
                      Tensor& o) {
  ops::rms_norm(ctx, x, norm_w, eps, norm_off, n);
  ops::matmul(ctx, n, w_gate, g);
  ops::matmul(ctx, n, w_up, u);
  ops::swiglu(ctx, g, u, g);
  ops::matmul(ctx, g, w_down, o);
  ops::add(ctx, x, o, x);
}

void output_logits(ops::Context& ctx, const BatchPlan& plan, const Tensor& x, const Tensor& norm_w, float eps,
                   float norm_off, const Tensor& lm_head, int64_t n_vocab, Tensor& n, LogitsOn where, Tensor& logits) {
  Tensor last = gather_output_rows(ctx, plan, x);
  Tensor nl = n.slice_rows(0, last.dim(0));
  ops::rms_norm(ctx, last, norm_w, eps, norm_off, nl);
  logits = ops::empty(ctx, ctx.act, {last.dim(0), n_vocab});
  ops::matmul(ctx, nl, lm_head, logits);
  if (where == LogitsOn::kHostF32) logits = logits_to_host_f32(ctx, logits);
}

}  // namespace vi
