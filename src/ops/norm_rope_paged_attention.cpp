// norm_rope_paged_attention entry point: the backend's fused form where it takes the call
// (after both ops' checks), else the two ops in order.
#include "ops/norm_rope_paged_attention.h"

#include <atomic>

#include "ops/profiler.h"
#include "ops/qk_norm_rope_kv_write.h"

namespace vi::ops {

OpTable<const NormRopePagedAttentionImpl*>& norm_rope_paged_attention_table() {
  static OpTable<const NormRopePagedAttentionImpl*> table("norm_rope_paged_attention");
  return table;
}

namespace {
std::atomic<uint64_t> g_fused_calls{0};
}  // namespace

uint64_t norm_rope_paged_attention_fused_calls() { return g_fused_calls.load(std::memory_order_relaxed); }

void norm_rope_paged_attention(Context& ctx, Tensor& q, Tensor& k, const Tensor& v, const QkNormRopeParams& nr,
                               KvRows& k_cache, KvRows& v_cache, const Tensor& rows, const Tensor& block_table,
                               int64_t block_size, const Tensor& q_pos, int64_t kv_bound, float scale, Tensor& out,
                               const Tensor* out_gate) {
  // Without a fused form (the CPU) the two ops below check their own arguments; with one, both
  // sets of checks come first, since `takes` reads the shapes.
  const DType t = q.dtype();
  const NormRopePagedAttentionImpl* fused =
      norm_rope_paged_attention_table().supports(ctx.device, t) ? norm_rope_paged_attention_table().get(ctx.device, t)
                                                                 : nullptr;
  if (fused != nullptr) {
    check_qk_norm_rope_kv_write(ctx, q, k, v, nr.q_norm, nr.k_norm, nr.eps, q_pos, nr.rot_dim, nr.theta, k_cache,
                                v_cache, rows);
    check_paged_attention(ctx, q, k_cache, v_cache, block_table, block_size, q_pos, kv_bound, out, out_gate);
  }
  if (fused != nullptr && q.dim(0) > 0 &&
      fused->takes(ctx, q, k_cache, v_cache, block_table, block_size, q_pos, kv_bound, out)) {
    // Bytes: q, k, v and out once, the keys' K/V rows and scales (the profiler runs eagerly:
    // the bound is the key count, the new rows among them).
    const auto row_bytes = [&](const KvRows& c) {
      return static_cast<double>(dtype_row_bytes(c.data.dtype(), k.dim(1) * q.dim(2)) +
                                 (c.scale.data() ? 4 * k.dim(1) : 0));
    };
    const double kv_bytes = static_cast<double>(kv_bound) * (row_bytes(k_cache) + row_bytes(v_cache));
    VI_OP_SCOPE(ctx, "norm_rope_paged_attention", t,
                static_cast<double>(q.nbytes() + k.nbytes() + v.nbytes() + out.nbytes()) + kv_bytes,
                "T={} Hq={} Hkv={} D={}", q.dim(0), q.dim(1), k.dim(1), q.dim(2));
    fused->run(ctx, q, k, v, nr, k_cache, v_cache, rows, block_table, block_size, q_pos, kv_bound, scale, out,
               out_gate);
    g_fused_calls.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  qk_norm_rope_kv_write(ctx, q, k, v, nr.q_norm, nr.k_norm, nr.eps, nr.w_offset, q_pos, nr.rot_dim, nr.theta, k_cache,
                        v_cache, rows);
  paged_attention(ctx, q, k_cache, v_cache, block_table, block_size, q_pos, kv_bound, scale, out, out_gate);
}

}  // namespace vi::ops
