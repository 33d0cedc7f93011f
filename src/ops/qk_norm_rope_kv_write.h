// What a Qwen3-style full-attention layer does between its q/k/v projections and the
// attention itself, as one op: the per-head RMSNorm of q and k, their partial RoPE, and the
// append of the new K and V rows to the paged cache. Unfused these are six launches per layer
// (rms_norm q, rms_norm k, rope q, rope k, the K write, the V write), each costing more in
// launch latency than its work at decode batch sizes; this op does the same math in one.
#pragma once

#include "ops/paged_attention.h"

namespace vi::ops {

// For every token t and head:
//   q[t, h]  = rope(rms_norm(q[t, h], q_norm, eps, w_offset), pos[t], rot_dim, theta)   in place
//   k[t, j]  = rope(rms_norm(k[t, j], k_norm, eps, w_offset), pos[t], rot_dim, theta)   in place
//   k_cache row rows[t] = k[t]   (a copy, or i8 quantized with the K Hadamard rotation)
//   v_cache row rows[t] = v[t]   (a copy, or i8 quantized)
// with the rounding points of the unfused sequence (rms_norm, rope, rope, kv_scatter or
// kv_scatter_i8): the norm's output is stored in q's dtype before RoPE reads it, and the
// rotated K in q's dtype before the cache write reads it, so the results are those ops' bits.
// q: [N, Hq, D]; k, v: [N, Hkv, D], one activation dtype; q_norm, k_norm: [D] f32;
// pos, rows: [N] i32 on ctx.device (rows each < n_rows: the batch plan checks them; host
// ones are checked here); k_cache, v_cache: [n_rows, Hkv, D] pools of q's dtype (no scale),
// or i8 with a scale [n_rows, Hkv] f32 (ops/kv_quant.h); K and V may differ in dtype.
void qk_norm_rope_kv_write(Context& ctx, Tensor& q, Tensor& k, const Tensor& v, const Tensor& q_norm,
                           const Tensor& k_norm, float eps, float w_offset, const Tensor& pos, int rot_dim,
                           float theta, KvRows& k_cache, KvRows& v_cache, const Tensor& rows);
using QkNormRopeKvWriteFn = void (*)(Context&, Tensor& q, Tensor& k, const Tensor& v, const Tensor& q_norm,
                                     const Tensor& k_norm, float eps, float w_offset, const Tensor& pos, int rot_dim,
                                     float theta, KvRows& k_cache, KvRows& v_cache, const Tensor& rows);
OpTable<QkNormRopeKvWriteFn>& qk_norm_rope_kv_write_table();  // keyed by q dtype

}  // namespace vi::ops
