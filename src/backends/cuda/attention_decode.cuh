// Split-KV decode attention over a paged (or contiguous) KV cache, for T = 1..8 query
// tokens per sequence (plain decode and MTP verification).
//
// Grid: (split, kv head). A block reads its slice of the keys of one KV head once and
// scores every query row that reads that head — all Hq / Hkv query heads of the group and
// all T tokens (R = T * group rows) — so a KV row is read from memory once per step, not
// once per query head. Splits are sized from the context length and the SM count; each
// block leaves an unnormalised partial (running max, running sum, accumulator) and a
// second kernel combines the splits (skipped when one split covers the context).
//
// K/V: f32, f16, or i8 with a per-(row, kv head) f32 scale (value = scale * int8); i8 K
// rows hold Hadamard-rotated keys (ops/kv_quant.h), so the kernel rotates the queries the
// same way and q·k is unchanged. Only sm_70 features are used (plain loads, shuffles,
// fp32 FMA), so the volta and native profiles run the same code.
#pragma once

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/paged_kernel_args.h"

namespace vi::cuda {

constexpr int kDecodeMaxT = 8;      // query tokens per sequence the split kernel takes
constexpr int kDecodeMaxRows = 64;  // T * (Hq / Hkv) rows per block
constexpr int kDecodeMaxDim = 256;  // head_dim: 8 dims per lane

// Whether decode_attention takes this shape (the caller falls back otherwise).
bool decode_attention_fits(int64_t T, int64_t Hq, int64_t Hkv, int64_t D);

// The paged kernel arguments (paged_kernel_args.h) with K/V f32, f16 or i8 and two
// additions: a null table means key s is row s, and without device positions (q_pos null)
// query t sits at q_pos0 + t; kv_bound 0 means q_pos0 + T. Splits past the true length
// contribute nothing.
struct DecodeArgs : PagedKernelArgs {
  int64_t q_pos0 = 0;
  int n_splits = 0;  // 0: chosen from the key bound and the SM count
};
void decode_attention(const ops::Context& ctx, const DecodeArgs& a);

}  // namespace vi::cuda
