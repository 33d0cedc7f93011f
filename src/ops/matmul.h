// Matrix multiplication with a weight matrix: y = x · wᵀ.
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// x: [T, K] activations; w: [N, K] weights of any supported dtype (dequantized block by
// block; quantized types need K to be a whole number of blocks); y: [T, N].
// Leading dimensions of x/y beyond the last are flattened into T.
void matmul(Context& ctx, const Tensor& x, const Tensor& w, Tensor& y);
using MatmulFn = void (*)(Context&, const Tensor& x, const Tensor& w, Tensor& y);
OpTable<MatmulFn>& matmul_table();  // keyed by w dtype

}  // namespace vi::ops
