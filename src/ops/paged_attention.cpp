// paged_attention / paged_kv_write entry points: shape and table checks, then the kernel.
#include "ops/paged_attention.h"

#include <algorithm>

#include "core/log.h"
#include "ops/attention.h"
#include "ops/copy.h"
#include "ops/memory.h"
#include "ops/op_checks.h"
#include "ops/profiler.h"

namespace vi::ops {

OpTable<PagedAttentionFn>& paged_attention_table() {
  static OpTable<PagedAttentionFn> table("paged_attention");
  return table;
}

namespace {
// The table is read on the host by the CPU kernel; entries are checked here once so a
// corrupt table is an error, not an out-of-bounds read.
void check_table(const char* op, const Tensor& table, int64_t block_size, int64_t n_blocks, int64_t n_pos) {
  VI_CHECK(table.dtype() == DType::I32 && table.ndim() == 1, "op '{}': block table {} must be 1-D i32", op,
           describe(table));
  VI_CHECK(block_size > 0, "op '{}': block size {} must be positive", op, block_size);
  const int64_t need = (n_pos + block_size - 1) / block_size;
  VI_CHECK(table.dim(0) >= need, "op '{}': {} positions need {} blocks of {} but the table has {}", op, n_pos,
           need, block_size, table.dim(0));
  if (table.device() == Device::CPU) {
    const int32_t* t = table.ptr<int32_t>();
    for (int64_t i = 0; i < need; ++i)
      VI_CHECK(t[i] >= 0 && t[i] < n_blocks, "op '{}': block table entry {} is {}, outside the pool of {} blocks",
               op, i, t[i], n_blocks);
  }
}
}  // namespace

// i8 rows need their [n_rows, Hkv] f32 scale; other dtypes have none.
static void check_kv_rows(const char* what, const KvRows& r) {
  const Tensor& d = r.data;
  VI_CHECK(d.dtype() == DType::F32 || d.dtype() == DType::F16 || d.dtype() == DType::I8,
           "op 'paged_attention': {} pool {} must be f32, f16 or i8", what, describe(d));
  if (d.dtype() == DType::I8) {
    VI_CHECK(r.scale.dtype() == DType::F32 && r.scale.ndim() == 2 && r.scale.dim(0) == d.dim(0) &&
                 r.scale.dim(1) == d.dim(1) && r.scale.device() == d.device(),
             "op 'paged_attention': i8 {} pool {} needs a scale [{}, {}] f32 on its device, got {}", what,
             describe(d), d.dim(0), d.dim(1), describe(r.scale));
  } else {
    VI_CHECK(r.scale.data() == nullptr, "op 'paged_attention': {} pool {} is not i8 and takes no scale", what,
             describe(d));
  }
}

void paged_attention(Context& ctx, const Tensor& q, const KvRows& k, const KvRows& v, const Tensor& block_table,
                     int64_t block_size, int64_t q_pos0, float scale, Tensor& out) {
  const Tensor& k_pool = k.data;
  const Tensor& v_pool = v.data;
  check_same_device("paged_attention", ctx, {&q, &k_pool, &v_pool, &out});
  VI_CHECK(q.ndim() == 3 && k_pool.ndim() == 3, "op 'paged_attention': q {} and k_pool {} must be 3-D",
           describe(q), describe(k_pool));
  VI_CHECK(same_shape(k_pool, v_pool), "op 'paged_attention': k_pool {} and v_pool {} must have one shape",
           describe(k_pool), describe(v_pool));
  check_kv_rows("K", k);
  check_kv_rows("V", v);
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k_pool.dim(1);
  VI_CHECK(k_pool.dim(2) == D, "op 'paged_attention': head_dim of q {} and k_pool {} differ", describe(q),
           describe(k_pool));
  VI_CHECK(Hkv > 0 && Hq % Hkv == 0, "op 'paged_attention': {} query heads are not a multiple of {} kv heads",
           Hq, Hkv);
  VI_CHECK(block_size > 0 && k_pool.dim(0) % block_size == 0,
           "op 'paged_attention': pool {} is not a whole number of blocks of {}", describe(k_pool), block_size);
  VI_CHECK(q_pos0 >= 0, "op 'paged_attention': negative query position {}", q_pos0);
  check_table("paged_attention", block_table, block_size, k_pool.dim(0) / block_size, q_pos0 + T);
  VI_CHECK(same_shape(q, out) && q.dtype() == out.dtype(), "op 'paged_attention': out {} must match q {}",
           describe(out), describe(q));
  // Bytes: the keys' K/V rows (and i8 scales) once, q and out.
  const int64_t kv_row_bytes = static_cast<int64_t>(dtype_row_bytes(k_pool.dtype(), Hkv * D) +
                                                    dtype_row_bytes(v_pool.dtype(), Hkv * D)) +
                               4 * Hkv * ((k_pool.dtype() == DType::I8) + (v_pool.dtype() == DType::I8));
  VI_OP_SCOPE_F(ctx, "paged_attention", k_pool.dtype(), q.nbytes() + out.nbytes() + (q_pos0 + T) * kv_row_bytes,
                4.0 * Hq * D * (T * q_pos0 + T * (T + 1) / 2), "Hq={} Hkv={} D={} T={} V={}", Hq, Hkv, D, T,
                dtype_name(v_pool.dtype()));  // causal
  if (paged_attention_table().supports(ctx.device, k_pool.dtype())) {
    paged_attention_table().get(ctx.device, k_pool.dtype())(ctx, q, k, v, block_table, block_size, q_pos0, scale,
                                                            out);
    return;
  }
  VI_CHECK(k_pool.dtype() != DType::I8 && v_pool.dtype() == k_pool.dtype(),
           "op 'paged_attention' has no {} kernel for K {} / V {}", device_name(ctx.device),
           dtype_name(k_pool.dtype()), dtype_name(v_pool.dtype()));
  // Bridge for a backend without a paged kernel yet: gather the sequence's rows (one copy
  // per block) and run the contiguous attention op. Correct but slower; said once.
  VI_CHECK(block_table.device() == Device::CPU && attention_table().supports(ctx.device, k_pool.dtype()),
           "op 'paged_attention' has no {} kernel for dtype {}", device_name(ctx.device),
           dtype_name(k_pool.dtype()));
  static bool warned = false;
  if (!warned) {
    warned = true;
    VI_LOG_WARN("paged_attention: no {} kernel for {} K/V yet; gathering blocks for the contiguous attention op",
                device_name(ctx.device), dtype_name(k_pool.dtype()));
  }
  const int64_t S = q_pos0 + T;
  Tensor kc = empty(ctx, k_pool.dtype(), {S, Hkv, D}), vc = empty(ctx, v_pool.dtype(), {S, Hkv, D});
  const int32_t* tbl = block_table.ptr<int32_t>();
  for (int64_t s0 = 0; s0 < S; s0 += block_size) {
    const int64_t n = std::min(block_size, S - s0), row = static_cast<int64_t>(tbl[s0 / block_size]) * block_size;
    Tensor kd = kc.slice_rows(s0, s0 + n), vd = vc.slice_rows(s0, s0 + n);
    copy(ctx, k_pool.slice_rows(row, row + n), kd);
    copy(ctx, v_pool.slice_rows(row, row + n), vd);
  }
  attention(ctx, q, kc, vc, q_pos0, scale, out);
}

void paged_attention(Context& ctx, const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                     const Tensor& block_table, int64_t block_size, int64_t q_pos0, float scale, Tensor& out) {
  paged_attention(ctx, q, KvRows{k_pool, {}}, KvRows{v_pool, {}}, block_table, block_size, q_pos0, scale, out);
}

void paged_kv_write(Context& ctx, const Tensor& x, Tensor& pool, const Tensor& block_table, int64_t block_size,
                    int64_t pos0) {
  check_same_device("paged_kv_write", ctx, {&x, &pool});
  VI_CHECK(x.ndim() == 2 && pool.ndim() == 2 && x.cols() == pool.cols() && x.dtype() == pool.dtype(),
           "op 'paged_kv_write': rows {} do not fit pool {}", describe(x), describe(pool));
  VI_CHECK(block_size > 0 && pool.dim(0) % block_size == 0,
           "op 'paged_kv_write': pool {} is not a whole number of blocks of {}", describe(pool), block_size);
  VI_CHECK(block_table.device() == Device::CPU,
           "op 'paged_kv_write': the block table must be readable on the host");
  const int64_t T = x.dim(0);
  check_table("paged_kv_write", block_table, block_size, pool.dim(0) / block_size, pos0 + T);
  VI_OP_SCOPE(ctx, "paged_kv_write", pool.dtype(), 2 * x.nbytes(), "T={} C={}", T, x.cols());
  const int32_t* tbl = block_table.ptr<int32_t>();
  // One copy per run of positions inside one block.
  for (int64_t t = 0; t < T;) {
    const int64_t p = pos0 + t, off = p % block_size, n = std::min(T - t, block_size - off);
    const int64_t r = static_cast<int64_t>(tbl[p / block_size]) * block_size + off;
    Tensor dst = pool.slice_rows(r, r + n);
    copy(ctx, x.slice_rows(t, t + n), dst);
    t += n;
  }
}

}  // namespace vi::ops
