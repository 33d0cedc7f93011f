// qk_norm_rope_kv_write entry point: the shape checks of rms_norm, rope, kv_scatter and
// kv_scatter_i8 for the layer's q, k, v and its two cache pools, then the (device, q dtype) kernel.
#include "ops/qk_norm_rope_kv_write.h"

#include <initializer_list>

#include "ops/op_checks.h"
#include "ops/profiler.h"

namespace vi::ops {

OpTable<QkNormRopeKvWriteFn>& qk_norm_rope_kv_write_table() {
  static OpTable<QkNormRopeKvWriteFn> table("qk_norm_rope_kv_write");
  return table;
}

namespace {

constexpr const char* kOp = "qk_norm_rope_kv_write";

// A K or V pool: [n_rows, Hkv, D] of the activation dtype without a scale, or i8 with
// a scale [n_rows, Hkv] f32.
void check_cache(Context& ctx, const KvRows& c, const char* which, int64_t n_rows, int64_t Hkv, int64_t D, DType act) {
  check_same_device(kOp, ctx, {&c.data});
  VI_CHECK(c.data.ndim() == 3 && c.data.dim(0) == n_rows && c.data.dim(1) == Hkv && c.data.dim(2) == D,
           "op '{}': {} cache {} must be [n_rows={}, Hkv={}, D={}]", kOp, which, describe(c.data), n_rows, Hkv, D);
  if (c.data.dtype() == DType::I8) {
    VI_CHECK(c.scale.data() != nullptr, "op '{}': i8 {} cache {} needs its scale", kOp, which, describe(c.data));
    check_same_device(kOp, ctx, {&c.scale});
    VI_CHECK(c.scale.dtype() == DType::F32 && c.scale.ndim() == 2 && c.scale.dim(0) == n_rows &&
                 c.scale.dim(1) == Hkv,
             "op '{}': {} cache scale {} must be [n_rows={}, Hkv={}] f32", kOp, which, describe(c.scale), n_rows,
             Hkv);
  } else {
    VI_CHECK(c.data.dtype() == act, "op '{}': {} cache {} must be i8 or of q's dtype {}", kOp, which,
             describe(c.data), dtype_name(act));
    VI_CHECK(c.scale.data() == nullptr, "op '{}': {} cache {} is not i8 but has a scale {}",
             kOp, which, describe(c.data), describe(c.scale));
  }
}

}  // namespace

void qk_norm_rope_kv_write(Context& ctx, Tensor& q, Tensor& k, const Tensor& v, const Tensor& q_norm,
                           const Tensor& k_norm, float eps, float w_offset, const Tensor& pos, int rot_dim,
                           float theta, KvRows& k_cache, KvRows& v_cache, const Tensor& rows) {
  check_same_device(kOp, ctx, {&q, &k, &v, &q_norm, &k_norm, &pos, &rows});
  const DType t = q.dtype();
  VI_CHECK(q.ndim() == 3 && q.dim(1) >= 1 && q.dim(2) >= 1, "op '{}': q {} must be [N, Hq, D]", kOp, describe(q));
  const int64_t N = q.dim(0), Hq = q.dim(1), D = q.dim(2);
  VI_CHECK(k.ndim() == 3 && k.dim(0) == N && k.dim(1) >= 1 && k.dim(2) == D,
           "op '{}': k {} must be [N={}, Hkv, D={}]", kOp, describe(k), N, D);
  const int64_t Hkv = k.dim(1);
  VI_CHECK(same_shape(v, k), "op '{}': v {} must have the shape of k {}", kOp, describe(v), describe(k));
  for (const Tensor* p : std::initializer_list<const Tensor*>{&k, &v})
    VI_CHECK(p->dtype() == t, "op '{}': {} must have q's dtype {}", kOp, describe(*p), dtype_name(t));
  for (const Tensor* p : {&q_norm, &k_norm})
    VI_CHECK(p->dtype() == DType::F32 && p->ndim() == 1 && p->dim(0) == D,
             "op '{}': norm weight {} must be [D={}] f32", kOp, describe(*p), D);
  for (const Tensor* p : {&pos, &rows})
    VI_CHECK(p->dtype() == DType::I32 && p->ndim() == 1 && p->dim(0) == N,
             "op '{}': positions and pool rows ({}) must be [N={}] i32", kOp, describe(*p), N);
  VI_CHECK(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= D, "op '{}': rot_dim {} must be even and in (0, D = {}]",
           kOp, rot_dim, D);
  VI_CHECK(theta > 0.0f, "op '{}': theta {} must be positive", kOp, theta);
  VI_CHECK(eps > 0.0f, "op '{}': eps {} must be > 0", kOp, eps);
  VI_CHECK(k_cache.data.ndim() == 3, "op '{}': K cache {} must be [n_rows, Hkv, D]", kOp, describe(k_cache.data));
  const int64_t n_rows = k_cache.data.dim(0);
  check_cache(ctx, k_cache, "K", n_rows, Hkv, D, t);
  check_cache(ctx, v_cache, "V", n_rows, Hkv, D, t);
  VI_CHECK(k_cache.data.data() != v_cache.data.data() || N == 0, "op '{}': K and V caches are the same tensor", kOp);
  if (rows.device() == Device::CPU) {
    const int32_t* r = rows.ptr<int32_t>();
    for (int64_t i = 0; i < N; ++i)
      VI_CHECK(r[i] >= 0 && r[i] < n_rows, "op '{}': row {} is outside the pool of {} rows", kOp, r[i], n_rows);
  }
  if (N == 0) return;
  // Reads q, k, v; writes q and k back and one pool row (and scale) per token for K and V.
  const auto cache_bytes = [&](const KvRows& c) {
    return static_cast<double>(N * Hkv) * (dtype_row_bytes(c.data.dtype(), D) + (c.scale.data() ? 4 : 0));
  };
  VI_OP_SCOPE(ctx, kOp, t, 2.0 * (q.nbytes() + k.nbytes()) + v.nbytes() + cache_bytes(k_cache) + cache_bytes(v_cache),
              "N={} Hq={} Hkv={} D={} rot={} K={} V={}", N, Hq, Hkv, D, rot_dim, dtype_name(k_cache.data.dtype()),
              dtype_name(v_cache.data.dtype()));
  qk_norm_rope_kv_write_table().get(ctx.device, t)(ctx, q, k, v, q_norm, k_norm, eps, w_offset, pos, rot_dim, theta,
                                                   k_cache, v_cache, rows);
}

}  // namespace vi::ops
