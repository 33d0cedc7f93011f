// Rotary position embedding, NeoX (half-split) pairing: inside the first rot_dim
// dims of each head, dim j pairs with dim j + rot_dim/2; dims >= rot_dim pass through
// (partial RoPE). inv_freq[j] = 1 / theta^(2j / rot_dim), angle = pos * inv_freq, fp32.
// Llama GGUF files store q/k rows permuted for adjacent pairing; the loader undoes that
// permutation so this one pairing serves every model.
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// x: [T, H, head_dim] rotated in place; pos: [T] i32 in host memory or on ctx.device.
void rope(Context& ctx, Tensor& x, const Tensor& pos, int rot_dim, float theta);
using RopeFn = void (*)(Context&, Tensor& x, const Tensor& pos, int rot_dim, float theta);
OpTable<RopeFn>& rope_table();  // keyed by x dtype

}  // namespace vi::ops
