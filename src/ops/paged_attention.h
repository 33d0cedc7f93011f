// Attention over a paged KV cache: K/V rows of all sequences live in one pool of
// fixed-size blocks, and a sequence's block table says which pool block holds each run
// of block_size positions (position p sits in pool row table[p / bs] * bs + p % bs).
// Also the matching scatter that writes a chunk of new K/V rows through the table (the
// quantizing one for an int8 cache is in ops/kv_quant.h).
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// One layer's K or V pool as attention reads it: rows [n_blocks * block_size, Hkv, D] of
// f32 or f16, or of i8 with a per-(row, kv head) scale [n_rows, Hkv] f32 (value = scale *
// int8; ops/kv_quant.h). An i8 K pool holds Hadamard-rotated keys: the op rotates the
// queries the same way. K and V may differ in dtype.
struct KvRows {
  Tensor data;
  Tensor scale;  // i8 data only; empty otherwise
};

// q: [T, Hq, D] (f32 on the CPU, the activation dtype on a GPU); k, v: pools as above;
// block_table: [n_tbl] i32 with n_tbl * block_size >= q_pos0 + T, every entry < n_blocks;
// out: [T, Hq, D]. Query t sits at position q_pos0 + t and sees keys 0 .. q_pos0 + t.
// Same arithmetic, in the same order, as ops::attention over the gathered rows.
void paged_attention(Context& ctx, const Tensor& q, const KvRows& k, const KvRows& v, const Tensor& block_table,
                     int64_t block_size, int64_t q_pos0, float scale, Tensor& out);
// Pools of f32/f16 rows (no scales).
void paged_attention(Context& ctx, const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                     const Tensor& block_table, int64_t block_size, int64_t q_pos0, float scale, Tensor& out);
using PagedAttentionFn = void (*)(Context&, const Tensor& q, const KvRows& k, const KvRows& v,
                                  const Tensor& block_table, int64_t block_size, int64_t q_pos0, float scale,
                                  Tensor& out);
OpTable<PagedAttentionFn>& paged_attention_table();  // keyed by K dtype; the kernel dispatches on V

// Writes rows x[t] (t < T) to pool row of position pos0 + t through the block table.
// x: [T, W]; pool: [n_blocks * block_size, W] of x's dtype; block_table as above.
void paged_kv_write(Context& ctx, const Tensor& x, Tensor& pool, const Tensor& block_table, int64_t block_size,
                    int64_t pos0);

}  // namespace vi::ops
