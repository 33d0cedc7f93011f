// attention entry point: checks, then the (device, K dtype) kernel.
#include "ops/attention.h"

#include "ops/op_checks.h"
#include "ops/profiler.h"

namespace vi::ops {

OpTable<AttentionFn>& attention_table() {
  static OpTable<AttentionFn> table("attention");
  return table;
}

void attention(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos0,
               float scale, Tensor& out) {
  check_same_device("attention", ctx, {&q, &k, &v, &out});
  VI_CHECK(q.ndim() == 3 && k.ndim() == 3 && v.ndim() == 3,
           "op 'attention': q {}, k {}, v {} must be 3-D ([T, Hq, D], [S, Hkv, D])", describe(q),
           describe(k), describe(v));
  VI_CHECK(same_shape(k, v) && k.dtype() == v.dtype(), "op 'attention': k {} and v {} must match",
           describe(k), describe(v));
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), S = k.dim(0), Hkv = k.dim(1);
  VI_CHECK(k.dim(2) == D, "op 'attention': head_dim of q {} and k {} differ", describe(q), describe(k));
  VI_CHECK(Hkv > 0 && Hq % Hkv == 0, "op 'attention': {} query heads are not a multiple of {} kv heads",
           Hq, Hkv);
  VI_CHECK(q_pos0 >= 0 && q_pos0 + T <= S,
           "op 'attention': queries at positions [{}, {}) need {} keys but k {} holds {}", q_pos0,
           q_pos0 + T, q_pos0 + T, describe(k), S);
  VI_CHECK(same_shape(q, out) && q.dtype() == out.dtype(), "op 'attention': out {} must match q {}",
           describe(out), describe(q));
  VI_OP_SCOPE_F(ctx, "attention", k.dtype(), q.nbytes() + out.nbytes() + 2 * (q_pos0 + T) * k.row_bytes() * Hkv,
                4.0 * Hq * D * (T * q_pos0 + T * (T + 1) / 2), "Hq={} Hkv={} D={} T={}", Hq, Hkv, D, T);  // causal
  attention_table().get(ctx.device, k.dtype())(ctx, q, k, v, q_pos0, scale, out);
}

}  // namespace vi::ops
