#include "models/batch.h"

#include <algorithm>

#include "core/error.h"
#include "ops/copy.h"
#include "ops/memory.h"

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
