// int8 KV: the Hadamard rule (shared by every backend's reference math) and the
// quantizing scatter's entry point.
#include "ops/kv_quant.h"

#include <cmath>
#include <vector>

#include "ops/op_checks.h"
#include "ops/paged_attention.h"
#include "ops/profiler.h"

namespace vi::ops {

void hadamard_rotate(float* x, int64_t D) {
  for (int64_t b0 = 0; b0 < D;) {
    int64_t n = 1;
    while (n * 2 <= D - b0) n *= 2;
    float* y = x + b0;
    for (int64_t h = 1; h < n; h *= 2)  // butterflies: y <- H_n y in natural (Sylvester) order
      for (int64_t i = 0; i < n; i += 2 * h)
        for (int64_t j = i; j < i + h; ++j) {
          const float a = y[j], c = y[j + h];
          y[j] = a + c;
          y[j + h] = a - c;
        }
    const float norm = 1.0f / std::sqrt(static_cast<float>(n));
    for (int64_t j = 0; j < n; ++j) y[j] *= norm;
    b0 += n;
  }
}

OpTable<PagedKvWriteI8Fn>& paged_kv_write_i8_table() {
  static OpTable<PagedKvWriteI8Fn> table("paged_kv_write_i8");
  return table;
}

void kv_scatter_i8(Context& ctx, const Tensor& x, Tensor& pool, Tensor& scale, const Tensor& rows, bool rotate) {
  check_same_device("paged_kv_write_i8", ctx, {&x, &pool, &scale, &rows});
  VI_CHECK(pool.dtype() == DType::I8 && pool.ndim() == 3 && scale.dtype() == DType::F32 && scale.ndim() == 2 &&
               scale.dim(0) == pool.dim(0) && scale.dim(1) == pool.dim(1),
           "op 'paged_kv_write_i8': pool {} must be [rows, Hkv, D] i8 and scale {} [rows, Hkv] f32",
           describe(pool), describe(scale));
  VI_CHECK(x.ndim() == 2 && x.cols() == pool.dim(1) * pool.dim(2),
           "op 'paged_kv_write_i8': rows {} do not fit pool {}", describe(x), describe(pool));
  VI_CHECK(rows.dtype() == DType::I32 && rows.ndim() == 1 && rows.dim(0) == x.dim(0),
           "op 'paged_kv_write_i8': row indices {} must be [{}] i32", describe(rows), x.dim(0));
  const int64_t T = x.dim(0);
  if (rows.device() == Device::CPU) {
    const int32_t* r = rows.ptr<int32_t>();
    for (int64_t t = 0; t < T; ++t)
      VI_CHECK(r[t] >= 0 && r[t] < pool.dim(0), "op 'paged_kv_write_i8': row {} is outside the pool of {} rows",
               r[t], pool.dim(0));
  }
  if (T == 0) return;
  VI_OP_SCOPE(ctx, "paged_kv_write_i8", x.dtype(), x.nbytes() + T * pool.dim(1) * (pool.dim(2) + 4),
              "T={} Hkv={} D={} rotate={}", T, pool.dim(1), pool.dim(2), rotate);
  paged_kv_write_i8_table().get(ctx.device, x.dtype())(ctx, x, pool, scale, rows, rotate);
}

void paged_kv_write_i8(Context& ctx, const Tensor& x, Tensor& pool, Tensor& scale, const Tensor& block_table,
                       int64_t block_size, int64_t pos0, bool rotate) {
  VI_CHECK(pool.ndim() == 3 && block_size > 0 && pool.dim(0) % block_size == 0,
           "op 'paged_kv_write_i8': pool {} is not a whole number of blocks of {}", describe(pool), block_size);
  const int64_t T = x.ndim() == 2 ? x.dim(0) : 0;
  const auto rows = pool_rows("paged_kv_write_i8", block_table, block_size, pool.dim(0) / block_size, pos0, T);
  kv_scatter_i8(ctx, x, pool, scale, i32_on_device(ctx, rows), rotate);
}

}  // namespace vi::ops
