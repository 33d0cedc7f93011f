// Embedding lookup: out[t, :] = table[ids[t], :] dequantized.
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// table: [vocab, d] any weight dtype; ids: [T] i32 (host memory on every backend: ids come
// from the sampler); out: [T, d] f32 (CPU) / f16 (CUDA). Throws on an id outside the vocab.
void embedding(Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out);
using EmbeddingFn = void (*)(Context&, const Tensor& table, const Tensor& ids, Tensor& out);
OpTable<EmbeddingFn>& embedding_table();  // keyed by table dtype

}  // namespace vi::ops
