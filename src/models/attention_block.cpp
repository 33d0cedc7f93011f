#include "models/attention_block.h"

#include "ops/paged_attention.h"

namespace vi {

void paged_attention_block(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items,
                           int64_t pool_layer, const Tensor& qh, const Tensor& k, const Tensor& v, float scale,
                           Tensor& out) {
  const int64_t Hq = qh.dim(1), hd = qh.dim(2), Hkv = k.cols() / hd;
  for (size_t i = 0; i < items.size(); ++i) {
    KvPool& pool = items[i].seq->kv_pool();
    const int64_t r0 = plan.row0[i], T = plan.rows_of(i), p0 = plan.pos0[i], bs = pool.block_size;
    Tensor& kp = pool.tensors[2 * pool_layer];
    Tensor& vp = pool.tensors[2 * pool_layer + 1];
    ops::paged_kv_write(ctx, k.slice_rows(r0, r0 + T), kp, plan.block_tables[i], bs, p0);
    ops::paged_kv_write(ctx, v.slice_rows(r0, r0 + T), vp, plan.block_tables[i], bs, p0);
    Tensor qi = qh.slice_rows(r0, r0 + T);
    Tensor ai = out.slice_rows(r0, r0 + T).reshape({T, Hq, hd});
    ops::paged_attention(ctx, qi, kp.reshape({kp.dim(0), Hkv, hd}), vp.reshape({vp.dim(0), Hkv, hd}),
                         plan.block_tables[i], bs, p0, scale, ai);
  }
}

}  // namespace vi
