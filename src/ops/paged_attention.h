// Attention over a paged KV cache: K/V rows of all sequences live in one pool of
// fixed-size blocks, and a sequence's block table says which pool block holds each run
// of block_size positions (position p sits in pool row table[p / bs] * bs + p % bs).
// Also the matching scatter that writes a chunk of new K/V rows through the table (the
// quantizing one for an int8 cache is in ops/kv_quant.h).
#pragma once

#include <vector>

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
// block_table: [n_tbl] i32 on ctx.device with n_tbl * block_size >= kv_bound, every entry it
// reaches < n_blocks; out: [T, Hq, D]. Query t sits at position q_pos[0] + t and sees keys
// 0 .. q_pos[0] + t. q_pos: [T] i32 positions on ctx.device (consecutive), read by the kernel
// itself, so a recorded decode step (ops/graph.h) replays at any position; kv_bound: a host
// upper bound of q_pos[0] + T that sizes the launch (eager callers pass the exact value, a
// recorded step the bound of its bucket). Same arithmetic, in the same order, as
// ops::attention over the gathered rows.
// out_gate (optional; Qwen3.5's gated attention): [T, Hq, D] of out's dtype on its device, not
// out itself; then out = attention · sigmoid(out_gate) element-wise, the bits of the plain op followed
// by sigmoid_mul(out, out_gate, out). A backend may apply it in the kernel that stores out (CUDA's
// split-KV decode: its combine), which saves the model a kernel per attention layer.
void paged_attention(Context& ctx, const Tensor& q, const KvRows& k, const KvRows& v, const Tensor& block_table,
                     int64_t block_size, const Tensor& q_pos, int64_t kv_bound, float scale, Tensor& out,
                     const Tensor* out_gate = nullptr);
// The same with the position known on the host (uploaded for a GPU; tests and tools).
void paged_attention(Context& ctx, const Tensor& q, const KvRows& k, const KvRows& v, const Tensor& block_table,
                     int64_t block_size, int64_t q_pos0, float scale, Tensor& out, const Tensor* out_gate = nullptr);
// Pools of f32/f16 rows (no scales).
void paged_attention(Context& ctx, const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                     const Tensor& block_table, int64_t block_size, int64_t q_pos0, float scale, Tensor& out);
// out_gate: null, or checked by the entry point as above (the kernel applies it).
using PagedAttentionFn = void (*)(Context&, const Tensor& q, const KvRows& k, const KvRows& v,
                                  const Tensor& block_table, int64_t block_size, const Tensor& q_pos,
                                  int64_t kv_bound, float scale, Tensor& out, const Tensor* out_gate);
OpTable<PagedAttentionFn>& paged_attention_table();  // keyed by K dtype; the kernel dispatches on V

// Writes row x[t] to pool row rows[t] (t < T). x: [T, W]; pool: [n_rows, W] of x's dtype;
// rows: [T] i32 on ctx.device, each < n_rows (the batch plan computes them from the block
// tables on the host and checks them there; a host rows tensor is checked here).
void kv_scatter(Context& ctx, const Tensor& x, Tensor& pool, const Tensor& rows);
using KvScatterFn = void (*)(Context&, const Tensor& x, Tensor& pool, const Tensor& rows);
OpTable<KvScatterFn>& kv_scatter_table();  // keyed by pool dtype

// Writes rows x[t] (t < T) to pool row of position pos0 + t through a host block table
// (kv_scatter with the rows computed here). x: [T, W]; pool: [n_blocks * block_size, W] of
// x's dtype; block_table as above, in host memory.
void paged_kv_write(Context& ctx, const Tensor& x, Tensor& pool, const Tensor& block_table, int64_t block_size,
                    int64_t pos0);

// The pool row of each position pos0 .. pos0 + T - 1 through a host block table, checked
// against the pool's n_blocks.
std::vector<int32_t> pool_rows(const char* op, const Tensor& block_table, int64_t block_size, int64_t n_blocks,
                               int64_t pos0, int64_t T);
// A [n] i32 tensor of `v` on ctx.device (the host tensor itself on the CPU).
Tensor i32_on_device(Context& ctx, const std::vector<int32_t>& v);

}  // namespace vi::ops
