#include "models/attention_block.h"

#include "ops/kv_quant.h"
#include "ops/memory.h"
#include "ops/paged_attention.h"
#include "ops/qk_norm_rope_kv_write.h"

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

// Pool tensor j as attention and the fused write read it: [n_rows, Hkv, hd] and its scale.
ops::KvRows kv_rows_of(const KvPool& pool, size_t j, int64_t Hkv, int64_t hd) {
  const Tensor& t = pool.tensors[j];
  return ops::KvRows{t.reshape({t.dim(0), Hkv, hd}), scale_of(pool, j)};
}

// Rows [r0, r0 + T) of a plan's device input of one i32 per row (positions, pool rows).
Tensor plan_rows(const Tensor& per_row, int64_t n_rows, int64_t r0, int64_t T) {
  return per_row.reshape({n_rows, 1}).slice_rows(r0, r0 + T).reshape({T});
}

// Each sequence's queries over its pages, its new K/V rows already in the pool.
void attend(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items, int64_t pool_layer,
            const Tensor& qh, int64_t Hkv, float scale, Tensor& out, const Tensor* gate) {
  const int64_t Hq = qh.dim(1), hd = qh.dim(2);
  const size_t jk = static_cast<size_t>(2 * pool_layer), jv = jk + 1;
  for (size_t i = 0; i < items.size(); ++i) {
    const KvPool& pool = items[i].seq->kv_pool();
    const int64_t r0 = plan.row0[i], T = plan.rows_of(i);
    // Positions and table come from the plan's device inputs: no host round trip.
    const Tensor pos = plan_rows(plan.dev.pos, plan.n_rows, r0, T);
    Tensor qi = qh.slice_rows(r0, r0 + T);
    Tensor ai = out.slice_rows(r0, r0 + T).reshape({T, Hq, hd});
    const Tensor gi = gate != nullptr ? gate->slice_rows(r0, r0 + T).reshape({T, Hq, hd}) : Tensor();
    ops::paged_attention(ctx, qi, kv_rows_of(pool, jk, Hkv, hd), kv_rows_of(pool, jv, Hkv, hd), plan.dev.tables[i],
                         pool.block_size, pos, plan.kv_bound[i], scale, ai, gate != nullptr ? &gi : nullptr);
  }
}
}  // namespace

void paged_attention_block(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items,
                           int64_t pool_layer, const Tensor& qh, const Tensor& k, const Tensor& v, float scale,
                           Tensor& out, const Tensor* gate) {
  const int64_t hd = qh.dim(2), Hkv = k.cols() / hd;
  const size_t jk = static_cast<size_t>(2 * pool_layer), jv = jk + 1;
  for (size_t i = 0; i < items.size(); ++i) {
    KvPool& pool = items[i].seq->kv_pool();
    const int64_t r0 = plan.row0[i], T = plan.rows_of(i);
    const Tensor rows = plan_rows(plan.dev.kv_rows, plan.n_rows, r0, T);
    write_rows(ctx, k.slice_rows(r0, r0 + T), pool, jk, rows, hd, /*is_k=*/true);
    write_rows(ctx, v.slice_rows(r0, r0 + T), pool, jv, rows, hd, /*is_k=*/false);
  }
  attend(ctx, plan, items, pool_layer, qh, Hkv, scale, out, gate);
}

void norm_rope_paged_attention_block(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items,
                                     int64_t pool_layer, const QkNormRope& nr, Tensor& qh, Tensor& k,
                                     const Tensor& v, float scale, Tensor& out, const Tensor* gate) {
  const int64_t N = qh.dim(0), hd = qh.dim(2), Hkv = k.cols() / hd;
  const size_t jk = static_cast<size_t>(2 * pool_layer), jv = jk + 1;
  const auto write = [&](KvPool& pool, int64_t r0, int64_t T) {
    Tensor qi = qh.slice_rows(r0, r0 + T), ki = k.slice_rows(r0, r0 + T).reshape({T, Hkv, hd});
    ops::KvRows kc = kv_rows_of(pool, jk, Hkv, hd), vc = kv_rows_of(pool, jv, Hkv, hd);
    ops::qk_norm_rope_kv_write(ctx, qi, ki, v.slice_rows(r0, r0 + T).reshape({T, Hkv, hd}), nr.q_norm, nr.k_norm,
                               nr.eps, nr.w_offset, plan_rows(plan.dev.pos, plan.n_rows, r0, T), nr.rot_dim, nr.theta,
                               kc, vc, plan_rows(plan.dev.kv_rows, plan.n_rows, r0, T));
  };
  // The sequences of a batch share one pool: all rows in one op. Otherwise one op each.
  bool one_pool = true;
  for (const BatchItem& it : items) one_pool = one_pool && &it.seq->kv_pool() == &items[0].seq->kv_pool();
  if (one_pool && !items.empty()) {
    write(items[0].seq->kv_pool(), 0, N);
  } else {
    for (size_t i = 0; i < items.size(); ++i) write(items[i].seq->kv_pool(), plan.row0[i], plan.rows_of(i));
  }
  attend(ctx, plan, items, pool_layer, qh, Hkv, scale, out, gate);
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
