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

#include "ops/registry.h"

namespace vi::cuda {

constexpr int kPrefillMaxDim = 256;  // head_dim bound (padded inside to 64, 128 or 256)

// q: [T, Hq, D] f16 or f32 (the activation dtype); k, v: pools [n_rows, Hkv, D] of k_dtype /
// v_dtype, each f16 or i8 (f32 pools are refused: the caller falls back); k_scale / v_scale:
// [n_rows, Hkv] f32 for an i8 pool (value = scale * int8; i8 K rows hold Hadamard-rotated
// keys, ops/kv_quant.h), else null; table: device i32 block table, key position s sits in
// pool row table[s / block_size] * block_size + s % block_size; q_pos: DEVICE [>= 1] i32,
// query t sits at position q_pos[0] + t and sees keys 0 .. q_pos[0] + t (read on the
// device, so a captured graph can replay with new positions); kv_bound: a host upper bound
// of q_pos[0] + T (checked against 32-bit positions; the grid does not depend on it);
// out: [T, Hq, D] like q. Hq must be a multiple of Hkv (GQA).
struct PrefillArgs {
  const void* q = nullptr;
  DType q_dtype = DType::F16;
  const void* k = nullptr;
  const void* v = nullptr;
  DType k_dtype = DType::F16, v_dtype = DType::F16;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  const int32_t* table = nullptr;
  int64_t block_size = 0;
  const int32_t* q_pos = nullptr;
  int64_t kv_bound = 0;
  int64_t T = 0, Hq = 0, Hkv = 0, D = 0;
  float scale = 1.0f;
  void* out = nullptr;
};

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
