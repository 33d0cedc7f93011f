// Causal multi-head attention with grouped KV heads over a contiguous KV sequence.
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// q: [T, Hq, D]; k, v: [S, Hkv, D] holding positions 0..S-1 (S >= q_pos0 + T);
// out: [T, Hq, D]. Query t sits at absolute position q_pos0 + t and sees keys
// 0..q_pos0 + t. Query head h reads KV head h / (Hq / Hkv). softmax(q·kᵀ·scale) in fp32.
void attention(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos0,
               float scale, Tensor& out);
using AttentionFn = void (*)(Context&, const Tensor& q, const Tensor& k, const Tensor& v,
                             int64_t q_pos0, float scale, Tensor& out);
OpTable<AttentionFn>& attention_table();  // keyed by k dtype

}  // namespace vi::ops
