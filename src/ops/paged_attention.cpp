// paged_attention / paged_kv_write entry points: shape and table checks, then the kernel.
#include "ops/paged_attention.h"

#include <algorithm>

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
                     int64_t block_size, const Tensor& q_pos, int64_t kv_bound, float scale, Tensor& out,
                     const Tensor* out_gate) {
  const Tensor& k_pool = k.data;
  const Tensor& v_pool = v.data;
  check_same_device("paged_attention", ctx, {&q, &k_pool, &v_pool, &out, &block_table, &q_pos});
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
  VI_CHECK(q_pos.dtype() == DType::I32 && q_pos.ndim() == 1 && q_pos.dim(0) >= T,
           "op 'paged_attention': positions {} must be [{}] i32", describe(q_pos), T);
  VI_CHECK(kv_bound >= T, "op 'paged_attention': key bound {} is below the {} queries", kv_bound, T);
  if (q_pos.device() == Device::CPU && T > 0) {  // readable here: the bound must hold
    const int64_t p0 = q_pos.ptr<int32_t>()[0];
    VI_CHECK(p0 >= 0 && p0 + T <= kv_bound, "op 'paged_attention': query position {} + {} exceeds the bound {}", p0,
             T, kv_bound);
  }
  check_table("paged_attention", block_table, block_size, k_pool.dim(0) / block_size, kv_bound);
  VI_CHECK(same_shape(q, out) && q.dtype() == out.dtype(), "op 'paged_attention': out {} must match q {}",
           describe(out), describe(q));
  if (out_gate != nullptr) {
    check_same_device("paged_attention", ctx, {out_gate});
    VI_CHECK(same_shape(*out_gate, out) && out_gate->dtype() == out.dtype(),
             "op 'paged_attention': the output gate {} must match out {}", describe(*out_gate), describe(out));
    // The gate is read as it was before the op: out itself would be the attention by then.
    VI_CHECK(out.numel() == 0 || out_gate->data() != out.data(),
             "op 'paged_attention': the output gate must not be out itself");
  }
  // Bytes: the keys' K/V rows (and i8 scales) once, q, out and the gate (at the bound: the
  // profiler runs eagerly, where the bound is exact).
  const int64_t kv_row_bytes = static_cast<int64_t>(dtype_row_bytes(k_pool.dtype(), Hkv * D) +
                                                    dtype_row_bytes(v_pool.dtype(), Hkv * D)) +
                               4 * Hkv * ((k_pool.dtype() == DType::I8) + (v_pool.dtype() == DType::I8));
  const int64_t past = kv_bound - T;
  const int64_t gate_bytes = out_gate != nullptr ? static_cast<int64_t>(out_gate->nbytes()) : 0;
  VI_OP_SCOPE_F(ctx, "paged_attention", k_pool.dtype(),
                q.nbytes() + out.nbytes() + gate_bytes + kv_bound * kv_row_bytes,
                4.0 * Hq * D * (T * past + T * (T + 1) / 2), "Hq={} Hkv={} D={} T={} V={}", Hq, Hkv, D, T,
                dtype_name(v_pool.dtype()));  // causal
  VI_CHECK(paged_attention_table().supports(ctx.device, k_pool.dtype()),
           "op 'paged_attention' has no {} kernel for K {} / V {}", device_name(ctx.device),
           dtype_name(k_pool.dtype()), dtype_name(v_pool.dtype()));
  paged_attention_table().get(ctx.device, k_pool.dtype())(ctx, q, k, v, block_table, block_size, q_pos, kv_bound,
                                                          scale, out, out_gate);
}

Tensor i32_on_device(Context& ctx, const std::vector<int32_t>& v) {
  Tensor h = Tensor::empty(DType::I32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), h.ptr<int32_t>());
  return ctx.device == Device::CPU ? h : upload(ctx, h);
}

void paged_attention(Context& ctx, const Tensor& q, const KvRows& k, const KvRows& v, const Tensor& block_table,
                     int64_t block_size, int64_t q_pos0, float scale, Tensor& out, const Tensor* out_gate) {
  VI_CHECK(q_pos0 >= 0, "op 'paged_attention': negative query position {}", q_pos0);
  const int64_t T = q.ndim() == 3 ? q.dim(0) : 0;
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(q_pos0 + t);
  // A host table is checked entry by entry before it moves to the device.
  if (block_table.device() == Device::CPU && ctx.device != Device::CPU) {
    VI_CHECK(block_size > 0 && k.data.ndim() == 3, "op 'paged_attention': bad pool {} or block size {}",
             describe(k.data), block_size);
    check_table("paged_attention", block_table, block_size, k.data.dim(0) / block_size, q_pos0 + T);
    paged_attention(ctx, q, k, v, upload(ctx, block_table), block_size, i32_on_device(ctx, pos), q_pos0 + T, scale,
                    out, out_gate);
    return;
  }
  paged_attention(ctx, q, k, v, block_table, block_size, i32_on_device(ctx, pos), q_pos0 + T, scale, out, out_gate);
}

void paged_attention(Context& ctx, const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                     const Tensor& block_table, int64_t block_size, int64_t q_pos0, float scale, Tensor& out) {
  paged_attention(ctx, q, KvRows{k_pool, {}}, KvRows{v_pool, {}}, block_table, block_size, q_pos0, scale, out);
}

OpTable<KvScatterFn>& kv_scatter_table() {
  static OpTable<KvScatterFn> table("kv_scatter");
  return table;
}

void kv_scatter(Context& ctx, const Tensor& x, Tensor& pool, const Tensor& rows) {
  check_same_device("kv_scatter", ctx, {&x, &pool, &rows});
  VI_CHECK(x.ndim() == 2 && pool.ndim() == 2 && x.cols() == pool.cols() && x.dtype() == pool.dtype(),
           "op 'kv_scatter': rows {} do not fit pool {}", describe(x), describe(pool));
  VI_CHECK(rows.dtype() == DType::I32 && rows.ndim() == 1 && rows.dim(0) == x.dim(0),
           "op 'kv_scatter': row indices {} must be [{}] i32", describe(rows), x.dim(0));
  if (rows.device() == Device::CPU) {
    const int32_t* r = rows.ptr<int32_t>();
    for (int64_t t = 0; t < rows.dim(0); ++t)
      VI_CHECK(r[t] >= 0 && r[t] < pool.dim(0), "op 'kv_scatter': row {} is outside the pool of {} rows", r[t],
               pool.dim(0));
  }
  if (x.dim(0) == 0) return;
  VI_OP_SCOPE(ctx, "kv_scatter", pool.dtype(), 2 * x.nbytes(), "T={} C={}", x.dim(0), x.cols());
  kv_scatter_table().get(ctx.device, pool.dtype())(ctx, x, pool, rows);
}

std::vector<int32_t> pool_rows(const char* op, const Tensor& block_table, int64_t block_size, int64_t n_blocks,
                               int64_t pos0, int64_t T) {
  VI_CHECK(block_table.device() == Device::CPU, "op '{}': the block table must be readable on the host", op);
  VI_CHECK(pos0 >= 0, "op '{}': negative position {}", op, pos0);
  check_table(op, block_table, block_size, n_blocks, pos0 + T);
  const int32_t* tbl = block_table.ptr<int32_t>();
  std::vector<int32_t> rows(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = pos0 + t;
    rows[static_cast<size_t>(t)] = static_cast<int32_t>(int64_t(tbl[p / block_size]) * block_size + p % block_size);
  }
  return rows;
}

void paged_kv_write(Context& ctx, const Tensor& x, Tensor& pool, const Tensor& block_table, int64_t block_size,
                    int64_t pos0) {
  VI_CHECK(block_size > 0 && pool.ndim() == 2 && pool.dim(0) % block_size == 0,
           "op 'paged_kv_write': pool {} is not a whole number of blocks of {}", describe(pool), block_size);
  const int64_t T = x.ndim() == 2 ? x.dim(0) : 0;
  const auto rows = pool_rows("paged_kv_write", block_table, block_size, pool.dim(0) / block_size, pos0, T);
  kv_scatter(ctx, x, pool, i32_on_device(ctx, rows));
}

}  // namespace vi::ops
