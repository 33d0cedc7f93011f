// CPU qk_norm_rope_kv_write: literally the ops it stands for (rms_norm of the q and k heads,
// rope of both, then kv_scatter or kv_scatter_i8 for K and V), through their CPU kernels, so
// the reference is the unfused path bit for bit.
#include "backends/cpu/cpu_util.h"
#include "ops/kv_quant.h"
#include "ops/norm.h"
#include "ops/qk_norm_rope_kv_write.h"
#include "ops/rope.h"

namespace vi::cpu {
namespace {

// x [N, Hkv * D] to the cache rows `rows`: a copy for a float pool, quantized (K rotated) for i8.
void write_cache(ops::Context& ctx, const Tensor& x, ops::KvRows& c, const Tensor& rows, bool rotate) {
  Tensor& pool = c.data;
  if (pool.dtype() == DType::I8) {
    ops::paged_kv_write_i8_table().get(Device::CPU, x.dtype())(ctx, x, pool, c.scale, rows, rotate);
    return;
  }
  Tensor flat = pool.reshape({pool.dim(0), pool.dim(1) * pool.dim(2)});  // kv_scatter's [n_rows, W]
  ops::kv_scatter_table().get(Device::CPU, pool.dtype())(ctx, x, flat, rows);
}

void qk_norm_rope_kv_write_cpu(ops::Context& ctx, Tensor& q, Tensor& k, const Tensor& v, const Tensor& q_norm,
                               const Tensor& k_norm, float eps, float w_offset, const Tensor& pos, int rot_dim,
                               float theta, ops::KvRows& k_cache, ops::KvRows& v_cache, const Tensor& rows) {
  const DType t = q.dtype();
  const int64_t N = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k.dim(1);
  // The kernels straight from the tables: the ops' own entry points would time them again
  // under this op's profiler scope.
  const auto norm = ops::rms_norm_table().get(Device::CPU, t);
  const auto rope = ops::rope_table().get(Device::CPU, t);
  Tensor qr = q.reshape({N * Hq, D}), kr = k.reshape({N * Hkv, D});
  norm(ctx, qr, q_norm, eps, w_offset, qr);
  norm(ctx, kr, k_norm, eps, w_offset, kr);
  rope(ctx, q, pos, rot_dim, theta);
  rope(ctx, k, pos, rot_dim, theta);
  write_cache(ctx, k.reshape({N, Hkv * D}), k_cache, rows, /*rotate=*/true);
  write_cache(ctx, v.reshape({N, Hkv * D}), v_cache, rows, /*rotate=*/false);
}

const bool registered = [] {
  ops::qk_norm_rope_kv_write_table().add(Device::CPU, DType::F32, qk_norm_rope_kv_write_cpu);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
