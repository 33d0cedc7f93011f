// embedding entry point: shape/dtype/device checks, then the (device, table dtype) kernel.
// The ids live in host memory (checked against the vocabulary here) or on the op's device
// (the batch plan checked them on the host before they moved).
#include "ops/embedding.h"

#include "ops/op_checks.h"
#include "ops/profiler.h"

namespace vi::ops {

OpTable<EmbeddingFn>& embedding_table() {
  static OpTable<EmbeddingFn> table("embedding");
  return table;
}

void embedding(Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out) {
  check_same_device("embedding", ctx, {&table, &out});
  VI_CHECK(ids.device() == Device::CPU || ids.device() == ctx.device,
           "op 'embedding': ids {} must be in host memory or on {}", describe(ids), device_name(ctx.device));
  VI_CHECK(table.ndim() == 2, "op 'embedding': table {} must be 2-D [vocab, d]", describe(table));
  VI_CHECK(ids.dtype() == DType::I32 && ids.ndim() == 1, "op 'embedding': ids {} must be [T] i32",
           describe(ids));
  VI_CHECK(out.rows() == ids.dim(0) && out.cols() == table.dim(1) && out.ndim() >= 1,
           "op 'embedding': out {} must hold [{}, {}] for ids {} and table {}", describe(out),
           ids.dim(0), table.dim(1), describe(ids), describe(table));
  const int64_t vocab = table.dim(0);
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t t = 0; ids.device() == Device::CPU && t < ids.dim(0); ++t) {
    VI_CHECK(id[t] >= 0 && id[t] < vocab, "op 'embedding': token id {} at position {} is outside the vocab of {} ({})",
             id[t], t, vocab, describe(table));
  }
  VI_OP_SCOPE(ctx, "embedding", table.dtype(), ids.dim(0) * table.row_bytes() + out.nbytes(), "{}x{} T={}", table.dim(0), table.dim(1), ids.dim(0));
  embedding_table().get(ctx.device, table.dtype())(ctx, table, ids, out);
}

}  // namespace vi::ops
