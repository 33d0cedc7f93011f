#include "models/dense_blocks.h"

#include "models/loader.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/memory.h"

namespace vi {

SwigluWeights load_swiglu(WeightLoader& w, const std::string& g, const std::string& h, int64_t d, int64_t d_ff) {
  SwigluWeights m;
  m.gate = w.load(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", {d_ff, d});
  m.up = w.load(g + "ffn_up.weight", h + "mlp.up_proj.weight", {d_ff, d});
  m.down = w.load(g + "ffn_down.weight", h + "mlp.down_proj.weight", {d, d_ff});
  if (m.gate.dtype() == m.up.dtype()) {
    m.gate_up = concat_rows({&m.gate, &m.up});
    m.gate_up.set_name(g + "ffn_gate_up.weight");
    stacked_views(m.gate_up, {&m.gate, &m.up});  // the loaded originals are dropped here
  }
  return m;
}

void swiglu_to_device(ops::Context& ctx, SwigluWeights& m) {
  to_device(ctx, {&m.down});
  if (m.gate_up.data() != nullptr) {
    // The post-attention norm's output; never viewed (matmul_swiglu, or the halves of matmul_split).
    to_device_stacked(ctx, m.gate_up, {&m.gate, &m.up}, ops::MatmulInput::kNorm, ops::MatmulUse::kSwiglu);
  } else {
    to_device(ctx, {&m.gate, &m.up});
  }
}

Tensor swiglu_scratch(ops::Context& ctx, int64_t N, int64_t d_ff) {
  return N <= kStackedMlpMaxRows ? ops::empty(ctx, ctx.act, {N, d_ff}) : Tensor();
}

Tensor swiglu_hidden(ops::Context& ctx, const Tensor& n, const SwigluWeights& m, Tensor& gu, Tensor& h) {
  const int64_t N = n.rows(), F = gu.cols() / 2;
  if (m.gate_up.data() != nullptr && N <= kStackedMlpMaxRows) {
    VI_CHECK(h.data() != nullptr && h.rows() == N && h.cols() == F && h.dtype() == gu.dtype(),
             "swiglu_mlp: h must be swiglu_scratch({}, {}), got [{}, {}] {}", N, F, h.rows(), h.cols(),
             dtype_name(h.dtype()));
    ops::matmul_swiglu(ctx, n, m.gate_up, gu, h);
    return h;
  }
  Tensor halves = gu.reshape({2 * N, F});
  Tensor g = halves.slice_rows(0, N), u = halves.slice_rows(N, 2 * N);  // [N, d_ff] each
  if (m.gate.data() == nullptr) {
    // A stack without row views (ops::MatmulUse::kSwiglu): the views' two matmuls, into the same
    // halves, by a device that writes the parts of a split itself (gu, `all`, is then untouched).
    std::vector<Tensor*> parts = {&g, &u};
    VI_CHECK(ops::matmul_split_direct(ctx, n, m.gate_up, parts),
             "swiglu_mlp: gate|up '{}' ({}) has no row views and its device cannot write its halves",
             m.gate_up.name(), dtype_name(m.gate_up.dtype()));
    ops::matmul_split(ctx, n, m.gate_up, gu, parts);
  } else {
    ops::matmul(ctx, n, m.gate, g);
    ops::matmul(ctx, n, m.up, u);
  }
  ops::swiglu(ctx, g, u, g);
  return g;
}

void swiglu_mlp(ops::Context& ctx, const Tensor& n, const SwigluWeights& m, Tensor& gu, Tensor& h, Tensor& o) {
  ops::matmul(ctx, swiglu_hidden(ctx, n, m, gu, h), m.down, o);
}

Tensor logits_scratch(ops::Context& ctx, const BatchPlan& plan, int64_t n_vocab) {
  return ops::empty(ctx, ctx.act, {static_cast<int64_t>(plan.out_rows.size()), n_vocab});
}

void output_logits(ops::Context& ctx, const BatchPlan& plan, const Tensor& n, const Tensor& lm_head, LogitsOn where,
                   const Tensor& out, Tensor& logits) {
  Tensor last = gather_output_rows(ctx, plan, n);
  VI_CHECK(out.rows() == last.dim(0) && out.cols() == lm_head.dim(0),
           "output_logits: out [{}, {}] for {} rows and a vocabulary of {}", out.rows(), out.cols(), last.dim(0),
           lm_head.dim(0));
  logits = out;
  ops::matmul(ctx, last, lm_head, logits);
  if (where == LogitsOn::kHostF32) logits = logits_to_host_f32(ctx, logits);
}

}  // namespace vi
