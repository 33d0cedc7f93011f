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

namespace vi::cuda {

constexpr int kDecodeMaxT = 8;      // query tokens per sequence the split kernel takes
constexpr int kDecodeMaxRows = 64;  // T * (Hq / Hkv) rows per block
constexpr int kDecodeMaxDim = 256;  // head_dim: 8 dims per lane

// Whether decode_attention takes this shape (the caller falls back otherwise).
bool decode_attention_fits(int64_t T, int64_t Hq, int64_t Hkv, int64_t D);

// q: [T, Hq, D] (f32/f16, the activation dtype); k, v: [n_rows, Hkv, D] of k_dtype /
// v_dtype (f32, f16 or i8); k_scale / v_scale: [n_rows, Hkv] f32 for an i8 tensor, else
// null; table: device i32 block table (null: key s is row s); out: [T, Hq, D] like q.
// Query t sits at position p0 + t and sees keys 0 .. p0 + t, where p0 = q_pos[0] (device
// memory, read by the kernel: a recorded step replays at any position) or q_pos0 when
// q_pos is null. kv_bound: a host upper bound of p0 + T (0: q_pos0 + T) that sizes the
// splits; splits past the true length contribute nothing.
struct DecodeArgs {
  const void* q = nullptr;
  DType q_dtype = DType::F16;
  const void* k = nullptr;
  const void* v = nullptr;
  DType k_dtype = DType::F16, v_dtype = DType::F16;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  const int32_t* table = nullptr;
  int64_t block_size = 0;
  int64_t T = 0, Hq = 0, Hkv = 0, D = 0;
  int64_t q_pos0 = 0;
  const int32_t* q_pos = nullptr;
  int64_t kv_bound = 0;
  float scale = 1.0f;
  void* out = nullptr;
  int n_splits = 0;  // 0: chosen from the context length and the SM count
};
void decode_attention(const ops::Context& ctx, const DecodeArgs& a);

}  // namespace vi::cuda
