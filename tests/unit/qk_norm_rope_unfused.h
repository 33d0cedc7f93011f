// What qk_norm_rope_kv_write stands for, as the separate ops on ctx's device: rms_norm of
// the q heads and of the k heads, rope of both, then the K and V writes (kv_scatter into a
// float pool, kv_scatter_i8 into an i8 one, K rotated). The reference the CPU and CUDA tests
// of the fused op compare it with.
#pragma once

#include "ops/kv_quant.h"
#include "ops/norm.h"
#include "ops/paged_attention.h"
#include "ops/rope.h"

namespace vi::test {

// x [N, Hkv, D] to pool rows `rows`, as models/attention_block.cpp wrote them before the fusion.
inline void unfused_kv_write(ops::Context& ctx, const Tensor& x, ops::KvRows& c, const Tensor& rows, bool rotate) {
  const int64_t N = x.dim(0), W = x.dim(1) * x.dim(2);
  if (c.data.dtype() == DType::I8) {
    ops::kv_scatter_i8(ctx, x.reshape({N, W}), c.data, c.scale, rows, rotate);
  } else {
    Tensor flat = c.data.reshape({c.data.dim(0), W});
    ops::kv_scatter(ctx, x.reshape({N, W}), flat, rows);
  }
}

// Shapes as ops::qk_norm_rope_kv_write: q [N, Hq, D], k, v [N, Hkv, D], q and k updated in place.
inline void unfused_qk_norm_rope_kv_write(ops::Context& ctx, Tensor& q, Tensor& k, const Tensor& v,
                                          const Tensor& q_norm, const Tensor& k_norm, float eps, float w_offset,
                                          const Tensor& pos, int rot_dim, float theta, ops::KvRows& k_cache,
                                          ops::KvRows& v_cache, const Tensor& rows) {
  const int64_t N = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k.dim(1);
  Tensor qr = q.reshape({N * Hq, D}), kr = k.reshape({N * Hkv, D});
  ops::rms_norm(ctx, qr, q_norm, eps, w_offset, qr);
  ops::rms_norm(ctx, kr, k_norm, eps, w_offset, kr);
  ops::rope(ctx, q, pos, rot_dim, theta);
  ops::rope(ctx, k, pos, rot_dim, theta);
  unfused_kv_write(ctx, k, k_cache, rows, /*rotate=*/true);
  unfused_kv_write(ctx, v, v_cache, rows, /*rotate=*/false);
}

}  // namespace vi::test
