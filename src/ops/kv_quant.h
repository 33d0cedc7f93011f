// The int8 KV cache: its row format, the Hadamard rotation of keys, and the scatter that
// quantizes new K/V rows into the pool.
//
// Format: a K or V pool in i8 is [n_rows, Hkv, D] int8 with a scale [n_rows, Hkv] f32 per
// (row, kv head): value = scale * q, q in [-127, 127], scale = max|x| / 127 (0 for a zero
// row). One scale per head vector follows the per-token-head scaling the decode kernels
// want: one float per D values, read once per key.
//
// K rotation: keys carry outlier dims (a few channels much larger than the rest), which
// would set the scale and flatten every other dim to a few levels. K rows are rotated
// before quantizing by H = blockdiag(H_n1, H_n2, ...) / normalised Sylvester Hadamard
// matrices (H_n / sqrt(n), orthonormal and symmetric), which spreads an outlier over n
// dims. Head dims that are not a power of two are cut into powers of two greedily from
// the front: D = 80 -> 64 + 16, D = 72 -> 64 + 8, D = 37 -> 32 + 4 + 1 (a block of 1 is
// left as is). Attention rotates the queries by the same H, so (H q)·(H k) = q·k. V is
// quantized as is (its rotation would have to be undone on the output).
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// In-place y = H x over one head vector x[D] (the rule above).
void hadamard_rotate(float* x, int64_t D);

// Like kv_scatter, quantizing: x [T, Hkv * D] (f32, or f16 on a GPU) row t goes to pool row
// rows[t] (pool [n_rows, Hkv, D] i8, scale [n_rows, Hkv] f32; rows [T] i32 on ctx.device),
// each head vector rotated first when `rotate` (K pools).
void kv_scatter_i8(Context& ctx, const Tensor& x, Tensor& pool, Tensor& scale, const Tensor& rows, bool rotate);
// The same through a host block table: row t goes to the pool row of position pos0 + t.
void paged_kv_write_i8(Context& ctx, const Tensor& x, Tensor& pool, Tensor& scale, const Tensor& block_table,
                       int64_t block_size, int64_t pos0, bool rotate);
using PagedKvWriteI8Fn = void (*)(Context&, const Tensor& x, Tensor& pool, Tensor& scale, const Tensor& rows,
                                  bool rotate);
OpTable<PagedKvWriteI8Fn>& paged_kv_write_i8_table();  // keyed by x dtype

}  // namespace vi::ops
