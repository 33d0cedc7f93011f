// The decode of one sequence's full-attention layer in a Qwen3-style model as one op: the
// per-head q/k norm and RoPE and the K/V cache append (ops/qk_norm_rope_kv_write.h), then
// paged attention over the sequence's keys (ops/paged_attention.h). A backend may do both in
// one kernel (CUDA: the split-KV decode kernel at T = 1 with int8 K/V normalises its own q rows
// and writes the new K/V row itself), which removes a kernel boundary a layer; everywhere else
// the op runs the two ops in order.
#pragma once

#include "ops/paged_attention.h"

namespace vi::ops {

// The per-head norm and RoPE of q and k (qk_norm_rope_kv_write's parameters).
struct QkNormRopeParams {
  const Tensor& q_norm;  // [D] f32
  const Tensor& k_norm;  // [D] f32
  float eps, w_offset;
  int rot_dim;
  float theta;
};

// qk_norm_rope_kv_write(q, k, v, nr, q_pos, k_cache, v_cache, rows) then paged_attention(q,
// k_cache, v_cache, block_table, block_size, q_pos, kv_bound, scale, out, out_gate), with those
// ops' shapes and checks: q: [T, Hq, D]; k, v: [T, Hkv, D]; rows: [T] i32 pool rows of the
// new tokens; q_pos: [T] i32 positions (both on ctx.device). The same bits as the two ops:
// out, the K/V rows written, their scales. q and k afterwards: unspecified (the two ops leave
// them normed and rotated, a fused kernel as they were), so callers must not read them.
void norm_rope_paged_attention(Context& ctx, Tensor& q, Tensor& k, const Tensor& v, const QkNormRopeParams& nr,
                               KvRows& k_cache, KvRows& v_cache, const Tensor& rows, const Tensor& block_table,
                               int64_t block_size, const Tensor& q_pos, int64_t kv_bound, float scale, Tensor& out,
                               const Tensor* out_gate = nullptr);
// A backend's fused form: `takes` says whether it fuses this call (it is asked after the op's
// checks), `run` does it; for a call it does not take the op runs the two ops.
struct NormRopePagedAttentionImpl {
  bool (*takes)(const Context&, const Tensor& q, const KvRows& k_cache, const KvRows& v_cache,
                const Tensor& block_table, int64_t block_size, const Tensor& q_pos, int64_t kv_bound,
                const Tensor& out);
  void (*run)(Context&, const Tensor& q, const Tensor& k, const Tensor& v, const QkNormRopeParams& nr,
              KvRows& k_cache, KvRows& v_cache, const Tensor& rows, const Tensor& block_table, int64_t block_size,
              const Tensor& q_pos, int64_t kv_bound, float scale, Tensor& out, const Tensor* out_gate);
};
OpTable<const NormRopePagedAttentionImpl*>& norm_rope_paged_attention_table();  // keyed by q dtype; optional

// Calls of norm_rope_paged_attention a backend fused so far (host count; tests).
uint64_t norm_rope_paged_attention_fused_calls();

}  // namespace vi::ops
