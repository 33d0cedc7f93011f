// int8 KV: the Hadamard rule (shared by every backend's reference math) and the
// quantizing scatter's entry point.
#include "ops/kv_quant.h"

#include <cmath>
#include <vector>

#include "ops/op_checks.h"
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

void paged_kv_write_i8(Context& ctx, const Tensor& x, Tensor& pool, Tensor& scale, const Tensor& block_table,
                       int64_t block_size, int64_t pos0, bool rotate) {
  check_same_device("paged_kv_write_i8", ctx, {&x, &pool, &scale});
  VI_CHECK(pool.dtype() == DType::I8 && pool.ndim() == 3 && scale.dtype() == DType::F32 && scale.ndim() == 2 &&
               scale.dim(0) == pool.dim(0) && scale.dim(1) == pool.dim(1),
           "op 'paged_kv_write_i8': pool {} must be [rows, Hkv, D] i8 and scale {} [rows, Hkv] f32",
           describe(pool), describe(scale));
  VI_CHECK(x.ndim() == 2 && x.cols() == pool.dim(1) * pool.dim(2),
           "op 'paged_kv_write_i8': rows {} do not fit pool {}", describe(x), describe(pool));
  VI_CHECK(block_size > 0 && pool.dim(0) % block_size == 0,
           "op 'paged_kv_write_i8': pool {} is not a whole number of blocks of {}", describe(pool), block_size);
  VI_CHECK(block_table.device() == Device::CPU && block_table.dtype() == DType::I32 && block_table.ndim() == 1,
           "op 'paged_kv_write_i8': the block table {} must be 1-D i32 on the host", describe(block_table));
  VI_CHECK(pos0 >= 0, "op 'paged_kv_write_i8': negative position {}", pos0);
  const int64_t T = x.dim(0), n_blocks = pool.dim(0) / block_size;
  if (T == 0) return;
  const int64_t need = (pos0 + T + block_size - 1) / block_size;
  VI_CHECK(block_table.dim(0) >= need, "op 'paged_kv_write_i8': {} positions need {} blocks but the table has {}",
           pos0 + T, need, block_table.dim(0));
  const int32_t* tbl = block_table.ptr<int32_t>();
  std::vector<int32_t> rows(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = pos0 + t, b = tbl[p / block_size];
    VI_CHECK(b >= 0 && b < n_blocks, "op 'paged_kv_write_i8': block table entry {} is {}, outside the pool of {} blocks",
             p / block_size, b, n_blocks);
    rows[static_cast<size_t>(t)] = static_cast<int32_t>(b * block_size + p % block_size);
  }
  VI_OP_SCOPE(ctx, "paged_kv_write_i8", x.dtype(), x.nbytes() + T * pool.dim(1) * (pool.dim(2) + 4),
              "T={} Hkv={} D={} rotate={}", T, pool.dim(1), pool.dim(2), rotate);
  paged_kv_write_i8_table().get(ctx.device, x.dtype())(ctx, x, pool, scale, rows.data(), rotate);
}

}  // namespace vi::ops
