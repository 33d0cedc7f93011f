// The attention part shared by every model with full-attention layers: append each
// sequence's new K/V rows to its pages of the layer's KV pool, then causal attention of
// its queries over all of its keys (through its block table).
#pragma once

#include <span>

#include "core/tensor.h"
#include "models/batch.h"
#include "models/model.h"
#include "ops/registry.h"

namespace vi {

// qh: [N, Hq, hd] (normed, rotated); k, v: [N, Hkv*hd] (k rotated); out: [N, Hq*hd].
// pool_layer: the layer's index among the pool's attention layers (K at 2*i, V at 2*i+1).
void paged_attention_block(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items,
                           int64_t pool_layer, const Tensor& qh, const Tensor& k, const Tensor& v, float scale,
                           Tensor& out);

}  // namespace vi
