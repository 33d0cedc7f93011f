#include "models/batch.h"

#include <algorithm>

#include "core/error.h"
#include "ops/copy.h"
#include "ops/memory.h"
#include "ops/paged_attention.h"

namespace vi {

BatchPlan BatchPlan::make(std::span<const BatchItem> items, int64_t n_vocab) {
  VI_CHECK(!items.empty(), "forward needs at least one sequence");
  BatchPlan p;
  p.row0.push_back(0);
  for (size_t i = 0; i < items.size(); ++i) {
    const BatchItem& it = items[i];
    VI_CHECK(it.seq != nullptr && !it.tokens.empty(), "batch item {} has no sequence or no tokens", i);
    for (size_t j = 0; j < i; ++j) VI_CHECK(items[j].seq != it.seq, "a sequence appears twice in one batch");
    const int64_t T = static_cast<int64_t>(it.tokens.size()), past = it.seq->n_past();
    VI_CHECK(past + T <= it.seq->capacity(),
             "{} tokens after the {} already in the sequence exceed its context of {} tokens (raise -c/--ctx-size)",
             T, past, it.seq->capacity());
    // kvcache: the block table must already hold blocks for every new position.
    const int64_t bs = it.seq->kv_pool().block_size;
    const auto& tbl = it.seq->block_table();
    VI_CHECK(static_cast<int64_t>(tbl.size()) * bs >= past + T,
             "sequence {} has KV blocks for {} tokens but needs {}", i, static_cast<int64_t>(tbl.size()) * bs,
             past + T);
    p.block_tables.push_back(Tensor::view(DType::I32, {static_cast<int64_t>(tbl.size())},
                                          const_cast<int32_t*>(tbl.data()), nullptr));
    // The pool row of each new token; checks every table entry the step reads (kernels read
    // the table unchecked).
    const auto rows = ops::pool_rows("forward", p.block_tables.back(), bs, it.seq->kv_pool().n_blocks, past, T);
    p.kv_rows.insert(p.kv_rows.end(), rows.begin(), rows.end());
    for (int32_t id : it.tokens)
      VI_CHECK(id >= 0 && id < n_vocab, "token id {} is outside the vocabulary of {}", id, n_vocab);
    p.pos0.push_back(past);
    p.row0.push_back(p.row0.back() + T);
  }
  p.n_rows = p.row0.back();
  p.ids = Tensor::empty(DType::I32, {p.n_rows});
  p.pos = Tensor::empty(DType::I32, {p.n_rows});
  for (size_t i = 0; i < items.size(); ++i) {
    for (int64_t t = 0; t < p.rows_of(i); ++t) {
      p.ids.ptr<int32_t>()[p.row0[i] + t] = items[i].tokens[t];
      p.pos.ptr<int32_t>()[p.row0[i] + t] = static_cast<int32_t>(p.pos0[i] + t);
    }
    if (items[i].all_logits) {
      for (int64_t r = p.row0[i]; r < p.row0[i + 1]; ++r) p.out_rows.push_back(r);
    } else {
      p.out_rows.push_back(p.row0[i + 1] - 1);
    }
  }
  return p;
}

void BatchPlan::stage(ops::Context& ctx, std::span<const BatchItem> items, StepArena& arena, bool bucketed) {
  kv_bound.clear();
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t need = pos0[i] + rows_of(i);
    int64_t b = need;
    if (bucketed) {
      b = 256;
      while (b < need) b *= 2;
      b = std::max(need, std::min(b, items[i].seq->capacity()));
    }
    kv_bound.push_back(b);
  }
  dev = {};
  if (ctx.device == Device::CPU) {
    dev.ids = ids;
    dev.pos = pos;
    dev.kv_rows = Tensor::view(DType::I32, {n_rows}, kv_rows.data(), nullptr);
    dev.tables = block_tables;
    return;
  }
  // One host buffer: ids | pos | kv_rows | each item's table, zero-padded to its bound (the
  // padding is never read: no key reaches past the true length).
  std::vector<int64_t> tbl_off, tbl_len;
  int64_t total = 3 * n_rows;
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t bs = items[i].seq->kv_pool().block_size;
    tbl_off.push_back(total);
    tbl_len.push_back((kv_bound[i] + bs - 1) / bs);
    total += tbl_len.back();
  }
  std::vector<int32_t> host(static_cast<size_t>(total), 0);
  std::copy_n(ids.ptr<int32_t>(), n_rows, host.begin());
  std::copy_n(pos.ptr<int32_t>(), n_rows, host.begin() + n_rows);
  std::copy(kv_rows.begin(), kv_rows.end(), host.begin() + 2 * n_rows);
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& t = items[i].seq->block_table();
    std::copy_n(t.begin(), std::min<int64_t>(tbl_len[i], static_cast<int64_t>(t.size())), host.begin() + tbl_off[i]);
  }
  if (!arena.buf.data() || arena.buf.numel() < total) {
    const int64_t cap = std::max<int64_t>(total, 2 * (arena.buf.data() ? arena.buf.numel() : 4096));
    arena.buf = ops::empty(ctx, DType::I32, {cap, 1});
    ++arena.generation;
  }
  ops::upload_into(ctx, host.data(), host.size() * sizeof(int32_t), arena.buf);
  auto part = [&](int64_t off, int64_t n) { return arena.buf.slice_rows(off, off + n).reshape({n}); };
  dev.ids = part(0, n_rows);
  dev.pos = part(n_rows, n_rows);
  dev.kv_rows = part(2 * n_rows, n_rows);
  for (size_t i = 0; i < items.size(); ++i) dev.tables.push_back(part(tbl_off[i], tbl_len[i]));
}

Tensor gather_output_rows(ops::Context& ctx, const BatchPlan& plan, const Tensor& x) {
  const int64_t M = static_cast<int64_t>(plan.out_rows.size());
  if (M == plan.n_rows) return x;
  Tensor out = ops::empty(ctx, x.dtype(), {M, x.cols()});
  // Copy runs of consecutive rows in one op each.
  for (int64_t m = 0; m < M;) {
    int64_t r = plan.out_rows[m], n = 1;
    while (m + n < M && plan.out_rows[m + n] == r + n) ++n;
    Tensor dst = out.slice_rows(m, m + n);
    ops::copy(ctx, x.slice_rows(r, r + n), dst);
    m += n;
  }
  return out;
}

}  // namespace vi
