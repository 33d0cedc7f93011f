// Attention over a paged KV cache: K/V rows of all sequences live in one pool of
// fixed-size blocks, and a sequence's block table says which pool block holds each run
// of block_size positions (position p sits in pool row table[p / bs] * bs + p % bs).
// Also the matching scatter that writes a chunk of new K/V rows through the table.
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// q: [T, Hq, D] f32; k_pool, v_pool: [n_blocks * block_size, Hkv, D];
// block_table: [n_tbl] i32 with n_tbl * block_size >= q_pos0 + T, every entry < n_blocks;
// out: [T, Hq, D]. Query t sits at position q_pos0 + t and sees keys 0 .. q_pos0 + t.
// Same arithmetic, in the same order, as ops::attention over the gathered rows.
void paged_attention(Context& ctx, const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                     const Tensor& block_table, int64_t block_size, int64_t q_pos0, float scale, Tensor& out);
using PagedAttentionFn = void (*)(Context&, const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                                  const Tensor& block_table, int64_t block_size, int64_t q_pos0, float scale,
                                  Tensor& out);
OpTable<PagedAttentionFn>& paged_attention_table();  // keyed by k_pool dtype

// Writes rows x[t] (t < T) to pool row of position pos0 + t through the block table.
// x: [T, W]; pool: [n_blocks * block_size, W] of x's dtype; block_table as above.
void paged_kv_write(Context& ctx, const Tensor& x, Tensor& pool, const Tensor& block_table, int64_t block_size,
                    int64_t pos0);

}  // namespace vi::ops
