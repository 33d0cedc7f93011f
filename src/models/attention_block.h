// The attention part shared by every model with full-attention layers: append each
// sequence's new K/V rows to its pages of the layer's KV pool, then causal attention of
// its queries over all of its keys (through its block table). Also the KV pool those
// layers use, in the cache dtype the user chose (f32, f16 or i8 with scales).
#pragma once

#include <memory>
#include <span>

#include "core/tensor.h"
#include "models/batch.h"
#include "models/model.h"
#include "ops/registry.h"

namespace vi {

// qh: [N, Hq, hd] (normed, rotated); k, v: [N, Hkv*hd] (k rotated); out: [N, Hq*hd].
// pool_layer: the layer's index among the pool's attention layers (K at 2*i, V at 2*i+1).
// gate (optional, gated attention): [N, Hq*hd]; then out = attention · sigmoid(gate), which
// ops::paged_attention applies (on a GPU in the kernel that stores out: one launch fewer).
void paged_attention_block(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items,
                           int64_t pool_layer, const Tensor& qh, const Tensor& k, const Tensor& v, float scale,
                           Tensor& out, const Tensor* gate = nullptr);

// The per-head q/k RMSNorm and RoPE of a Qwen3-style layer (ops::rms_norm, ops::rope).
struct QkNormRope {
  Tensor q_norm, k_norm;  // [hd] f32
  float eps = 0.0f, w_offset = 0.0f;
  int rot_dim = 0;
  float theta = 0.0f;
};

// rms_norm of every q and k head, rope of both, then paged_attention_block; the norms, the
// RoPE and the K/V writes are one op (ops::qk_norm_rope_kv_write: one launch on a GPU
// instead of six) over all rows when the sequences share one KV pool (a batch does), one
// per sequence otherwise. The same bits as the separate ops. qh: [N, Hq, hd] and k:
// [N, Hkv*hd] as projected, left normed and rotated; v: [N, Hkv*hd]; out: [N, Hq*hd]; gate as
// paged_attention_block's.
void norm_rope_paged_attention_block(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items,
                                     int64_t pool_layer, const QkNormRope& nr, Tensor& qh, Tensor& k,
                                     const Tensor& v, float scale, Tensor& out, const Tensor* gate = nullptr);

// K and V pools for n_attn_layers layers on ctx's device: [n_blocks * block_size, Hkv*hd]
// each, of types.k / types.v (unset: ctx.act); i8 ones with their scales. Fails with the
// dtype named for anything but f32, f16 and i8.
std::shared_ptr<KvPool> new_attention_kv_pool(ops::Context& ctx, int64_t n_attn_layers, int64_t n_blocks,
                                              int64_t block_size, int64_t Hkv, int64_t hd, const KvCacheTypes& types);

}  // namespace vi
