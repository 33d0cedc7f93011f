// Bias add broadcast over rows: out[r, :] = x[r, :] + bias[:]  (qwen2 q/k/v projections).
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// x, out: [R, n]; bias: [n] f32; out may alias x.
void add_bias(Context& ctx, const Tensor& x, const Tensor& bias, Tensor& out);
using AddBiasFn = void (*)(Context&, const Tensor& x, const Tensor& bias, Tensor& out);
OpTable<AddBiasFn>& add_bias_table();  // keyed by x dtype

}  // namespace vi::ops
