// Embedding lookup: out[t, :] = table[ids[t], :] dequantized.
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// table: [vocab, d] any weight dtype; ids: [T] i32 in host memory (checked: throws on an id
// outside the vocab) or on ctx.device (already checked by the caller: the batch plan);
// out: [T, d] f32 (CPU) / f16 (CUDA).
void embedding(Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out);
using EmbeddingFn = void (*)(Context&, const Tensor& table, const Tensor& ids, Tensor& out);
OpTable<EmbeddingFn>& embedding_table();  // keyed by table dtype

}  // namespace vi::ops
