// Flash-style prefill attention over a paged KV cache on tensor cores (WMMA 16x16x16, f16
// operands, fp32 accumulation, online softmax in fp32), for chunks of many query tokens.
//
// Grid: (query head, tile of 64 query tokens). A block stages its 64 scaled (and, for an
// i8 K pool, Hadamard-rotated) query rows in shared memory once, then walks the key tiles
// of 32 positions that the causal mask leaves visible to its last row (later tiles are never
// read): K/V rows are gathered through the block table, converted to f16 (i8: value =
// scale * int8) into shared memory, S = Q·Kᵀ and O += P·V run on tensor cores. The query
// heads of one KV group read the same K/V tiles, which L2 serves (the 27B layer's K and V
// at 8K tokens are 8 MB each), so no block holds more than one head's rows and the shared
// memory stays under Volta's 96 KB. Only sm_70 features (WMMA, plain loads, shuffles): the
// volta and native profiles run the same code, and the CUDA 11.8 sm_70 build compiles it.
//
// This header is plain C++ (no CUDA types), so host code and tests can include it.
#pragma once

#include <cstdint>

#include "backends/cuda/paged_kernel_args.h"
#include "ops/registry.h"

namespace vi::cuda {

constexpr int kPrefillMaxDim = 256;  // head_dim bound (padded inside to 64, 128 or 256)

// The paged kernel arguments (paged_kernel_args.h) with K and V each f16 or i8 (f32 pools
// are refused: the caller falls back); the grid does not depend on kv_bound, which is only
// checked against 32-bit positions.
using PrefillArgs = PagedKernelArgs;

// Whether prefill_attention takes this combination on the current device: q f16/f32, K and
// V each f16 or i8, 1 <= D <= kPrefillMaxDim, Hq a multiple of Hkv, and the device lets a
// block opt into the shared memory the padded head dim needs (D <= 64: 32 KB, <= 128: 48 KB,
// <= 256: 80 KB; sm_70 and sm_80+ give 96 KB+, sm_75 only 64 KB). Any T >= 1 works, but
// T <= 8 is faster on the split-KV decode kernel (attention_decode.cuh).
bool prefill_attention_fits(int64_t Hq, int64_t Hkv, int64_t D, DType q_dtype, DType k_dtype, DType v_dtype);

// Launches on stream_of(ctx); no host synchronisation, no allocation (graph-capturable).
// Fails loudly (vi::Error) on a combination prefill_attention_fits refuses.
void prefill_attention(const ops::Context& ctx, const PrefillArgs& a);

}  // namespace vi::cuda
