// Element-wise and row-wise activation ops. Shapes of all operands match unless noted.
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// out = a + b (the residual add; out may alias a).
void add(Context& ctx, const Tensor& a, const Tensor& b, Tensor& out);
// out = silu(gate) * up  (SwiGLU).
void swiglu(Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out);
// out[r, j] = silu(gu[r, j]) * gu[r, F + j]: SwiGLU of a stacked gate|up projection.
// gu: [R, 2F]; out: [R, F], same dtype, not overlapping gu.
void swiglu_halves(Context& ctx, const Tensor& gu, Tensor& out);
// out = x * sigmoid(gate)  (Qwen3.5 attention output gate).
void sigmoid_mul(Context& ctx, const Tensor& x, const Tensor& gate, Tensor& out);
// Row-wise softmax over the innermost dimension, fp32 math; out may alias x.
void softmax(Context& ctx, const Tensor& x, Tensor& out);

using BinaryFn = void (*)(Context&, const Tensor& a, const Tensor& b, Tensor& out);
using UnaryFn = void (*)(Context&, const Tensor& x, Tensor& out);
OpTable<BinaryFn>& add_table();          // keyed by a dtype
OpTable<BinaryFn>& swiglu_table();       // keyed by gate dtype
OpTable<UnaryFn>& swiglu_halves_table();  // keyed by gu dtype
OpTable<BinaryFn>& sigmoid_mul_table();  // keyed by x dtype
OpTable<UnaryFn>& softmax_table();       // keyed by x dtype

}  // namespace vi::ops
