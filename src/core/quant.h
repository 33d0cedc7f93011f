// Row conversion between fp32 and every weight dtype (F32, F16, BF16 and the ggml block
// formats Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K). These are the scalar reference routines:
// the GGUF reader, `make-model` and the tests use them; the CPU backend has its own SIMD
// block decoders that must agree with dequantize_row.
// What does not live here: repacking into kernel-specific layouts (formats/).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace vi {

// dst[0..n) = the values stored in src (one row of n values of type t, ggml block layout).
// Throws vi::Error for a dtype that is not a weight dtype or n not a whole number of blocks.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// Stores src[0..n) as type t (dtype_row_bytes(t, n) bytes at dst). Round-to-nearest with
// the format's usual scale/min choice (no importance weighting): Q8_0/Q4_0/Q4_1 match
// ggml's reference quantizers bit for bit; the K-quants use a simpler min/max search.
void quantize_row(DType t, const float* src, void* dst, int64_t n);

// Both also take Q8_KX (int8 activations, core/dtype.h): quantize_row rounds x / d to nearest
// even with d = max|x| / 127 per 256 values, as the CUDA kernel that makes them does.

// True for the weight dtypes the two functions above accept (not Q8_KX).
bool quant_supported(DType t);

}  // namespace vi
