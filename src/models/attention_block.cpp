#include "models/attention_block.h"

#include "ops/kv_quant.h"
#include "ops/memory.h"
#include "ops/paged_attention.h"

namespace vi {

namespace {
// The i8 scale of pool tensor j, or an empty Tensor.
Tensor scale_of(const KvPool& pool, size_t j) { return pool.scales.empty() ? Tensor() : pool.scales[j]; }

// x rows -> pool rows `rows` (device): a copy for a float pool, quantized (K rotated) for i8.
void write_rows(ops::Context& ctx, const Tensor& x, KvPool& pool, size_t j, const Tensor& rows, int64_t hd,
                bool is_k) {
  Tensor& dst = pool.tensors[j];
  if (dst.dtype() != DType::I8) {
    ops::kv_scatter(ctx, x, dst, rows);
    return;
  }
  Tensor q = dst.reshape({dst.dim(0), dst.dim(1) / hd, hd});
  ops::kv_scatter_i8(ctx, x, q, pool.scales[j], rows, /*rotate=*/is_k);
}
}  // namespace

void paged_attention_block(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items,
                           int64_t pool_layer, const Tensor& qh, const Tensor& k, const Tensor& v, float scale,
                           Tensor& out) {
  const int64_t Hq = qh.dim(1), hd = qh.dim(2), Hkv = k.cols() / hd;
  const size_t jk = static_cast<size_t>(2 * pool_layer), jv = jk + 1;
  for (size_t i = 0; i < items.size(); ++i) {
    KvPool& pool = items[i].seq->kv_pool();
    const int64_t r0 = plan.row0[i], T = plan.rows_of(i), bs = pool.block_size;
    // Positions, rows and table come from the plan's device inputs: no host round trip.
    const Tensor rows = plan.dev.kv_rows.reshape({plan.n_rows, 1}).slice_rows(r0, r0 + T).reshape({T});
    const Tensor pos = plan.dev.pos.reshape({plan.n_rows, 1}).slice_rows(r0, r0 + T).reshape({T});
    write_rows(ctx, k.slice_rows(r0, r0 + T), pool, jk, rows, hd, /*is_k=*/true);
    write_rows(ctx, v.slice_rows(r0, r0 + T), pool, jv, rows, hd, /*is_k=*/false);
    const Tensor& kp = pool.tensors[jk];
    const Tensor& vp = pool.tensors[jv];
    Tensor qi = qh.slice_rows(r0, r0 + T);
    Tensor ai = out.slice_rows(r0, r0 + T).reshape({T, Hq, hd});
    ops::paged_attention(ctx, qi, ops::KvRows{kp.reshape({kp.dim(0), Hkv, hd}), scale_of(pool, jk)},
                         ops::KvRows{vp.reshape({vp.dim(0), Hkv, hd}), scale_of(pool, jv)}, plan.dev.tables[i], bs,
                         pos, plan.kv_bound[i], scale, ai);
  }
}

std::shared_ptr<KvPool> new_attention_kv_pool(ops::Context& ctx, int64_t n_attn_layers, int64_t n_blocks,
                                              int64_t block_size, int64_t Hkv, int64_t hd, const KvCacheTypes& types) {
  const DType tk = types.k.value_or(ctx.act), tv = types.v.value_or(ctx.act);
  for (DType t : {tk, tv})
    VI_CHECK(t == DType::F32 || t == DType::F16 || t == DType::I8,
             "KV cache type {} is not supported: use f32, f16 or i8", dtype_name(t));
  auto pool = std::make_shared<KvPool>();
  pool->block_size = block_size;
  pool->n_blocks = n_blocks;
  const int64_t rows = n_blocks * block_size;
  const bool any_i8 = tk == DType::I8 || tv == DType::I8;
  for (int64_t l = 0; l < n_attn_layers; ++l) {
    for (DType t : {tk, tv}) {  // K, V: [rows, Hkv*hd]
      pool->tensors.push_back(ops::empty(ctx, t, {rows, Hkv * hd}));
      if (any_i8) pool->scales.push_back(t == DType::I8 ? ops::empty(ctx, DType::F32, {rows, Hkv}) : Tensor());
    }
  }
  return pool;
}

}  // namespace vi
