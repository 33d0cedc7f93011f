// gdn_conv_decode_step entry point: the checks of gdn_conv_step (per sequence) and of
// gdn_decode_step, then the device's fused kernel where it takes the call, else the two ops.
#include "ops/gdn_conv_decode_step.h"

#include <tuple>

#include "ops/op_checks.h"
#include "ops/profiler.h"

namespace vi::ops {

OpTable<GdnConvDecodeStepFn>& gdn_conv_decode_step_table() {
  static OpTable<GdnConvDecodeStepFn> table("gdn_conv_decode_step");
  return table;
}

namespace {

// Sequence n's conv groups: its T rows of x and c as [T, C], its windows.
struct SeqGroups {
  ConvGroup q, k, v;
};
SeqGroups groups_of(const GdnConvIn& in, int64_t n, int64_t T) {
  auto rows = [&](const Tensor& t) {
    return t.slice_rows(n * T, (n + 1) * T).reshape({T, t.numel() / t.dim(0)});
  };
  const GdnConvWindows& w = in.windows[static_cast<size_t>(n)];
  return SeqGroups{ConvGroup{rows(in.xq), in.wq, w.q, rows(in.cq)}, ConvGroup{rows(in.xk), in.wk, w.k, rows(in.ck)},
                   ConvGroup{rows(in.xv), in.wv, w.v, rows(in.cv)}};
}

}  // namespace

void gdn_conv_decode_step(Context& ctx, const GdnConvIn& in, const Tensor& a, const Tensor& b,
                          const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z, const Tensor& norm_w,
                          float eps, const std::vector<Tensor>& states, GvaLayout layout, Tensor& y) {
  // The conv outputs' shapes are the decode step's q, k, v: its checks on them, then the
  // conv's on each sequence's rows.
  for (const auto& [name, x, c] : {std::tuple<const char*, const Tensor*, const Tensor*>{"q", &in.xq, &in.cq},
                                   {"k", &in.xk, &in.ck},
                                   {"v", &in.xv, &in.cv}})
    VI_CHECK(x->ndim() == 3 && same_shape(*x, *c) && x->dtype() == c->dtype(),
             "op 'gdn_conv_decode_step': {} x {} must be [R, heads, head dim] and its scratch {} alike", name,
             describe(*x), describe(*c));
  check_gdn_decode_step(ctx, in.cq, in.ck, in.cv, a, b, neg_exp_A, dt_bias, z, norm_w, eps, states, layout, y);
  VI_CHECK(in.windows.size() == states.size(),
           "op 'gdn_conv_decode_step': {} sequences of conv windows for {} of recurrent states", in.windows.size(),
           states.size());
  const int64_t n_seq = static_cast<int64_t>(states.size()), T = in.xq.dim(0) / n_seq;
  const int64_t dk = in.xq.dim(2);
  double conv_bytes = 0;
  for (int64_t n = 0; n < n_seq; ++n) {
    const SeqGroups g = groups_of(in, n, T);
    conv_bytes += check_gdn_conv_step(ctx, g.q, g.k, g.v, dk);
  }
  const DType t = in.xq.dtype();
  const auto& table = gdn_conv_decode_step_table();
  if (table.supports(ctx.device, t)) {
    const GdnConvDecodeStepFn fn = table.get(ctx.device, t);
    if (fn(ctx, in, a, b, neg_exp_A, dt_bias, z, norm_w, eps, states, layout, y, false)) {
      const int64_t R = in.xq.dim(0), Hv = in.xv.dim(1), dv = in.xv.dim(2);
      const double state_bytes = static_cast<double>(n_seq) * Hv * dk * dv * 4;
      VI_OP_SCOPE_F(ctx, "gdn_conv_decode_step", t,
                    conv_bytes - static_cast<double>(in.cq.nbytes() + in.ck.nbytes() + in.cv.nbytes()) +
                        static_cast<double>(a.nbytes() + b.nbytes() + z.nbytes() + y.nbytes()) + 2 * state_bytes,
                    6.0 * R * Hv * dk * dv, "N={} T={} Hv={} dk={} dv={}", n_seq, T, Hv, dk, dv);
      fn(ctx, in, a, b, neg_exp_A, dt_bias, z, norm_w, eps, states, layout, y, true);
      return;
    }
  }
  for (int64_t n = 0; n < n_seq; ++n) {
    const SeqGroups g = groups_of(in, n, T);
    gdn_conv_step(ctx, g.q, g.k, g.v, dk, in.l2_eps, in.q_scale);
  }
  gdn_decode_step(ctx, in.cq, in.ck, in.cv, a, b, neg_exp_A, dt_bias, z, norm_w, eps, states, layout, y);
}

}  // namespace vi::ops
