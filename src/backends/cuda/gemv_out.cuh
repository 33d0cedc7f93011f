// Where the tiled decode GEMVs (gemv_q4kt.cu, gemv_q4ki.cu) write their rows.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <vector>

#include "backends/cuda/q4kr_mma.cuh"  // finish_split_k_tile
#include "core/error.h"
#include "core/tensor.h"
#include "ops/copy.h"  // kSplitMaxParts

namespace vi::cuda {

// Part p (rows [end[p - 1], end[p]) of the weight, end[-1] = 0) goes into y[p], a row-major
// [T, end[p] - end[p - 1]]. One part of N rows is matmul's y; more are matmul_split's parts, whole
// 16-row tiles each, so every block's tile lies in one. Passed by value (a kernel argument).
struct GemvOut {
  __half* y[ops::kSplitMaxParts];
  int64_t end[ops::kSplitMaxParts];
  int n;
};

// The part that holds the tile of rows n0 .. n0 + 15, the part's first row and its width.
__device__ __forceinline__ void gemv_out_part(const GemvOut& out, int64_t n0, __half*& y, int64_t& begin,
                                              int64_t& rows) {
  int p = 0;
  while (p + 1 < out.n && n0 >= out.end[p]) ++p;
  begin = p > 0 ? out.end[p - 1] : 0;
  rows = out.end[p] - begin;
  y = out.y[p];
}

// The end of a tiled decode GEMV whose 4 warps split a 16-row tile's K (gemv_q4kt, gemv_q4ki):
// the tile's sums into its part of out; with SWIGLU (rows g gate, rows g + 8 up, out one part of
// N / 2 columns) h = silu(gate) · up. Every thread of the block calls it. blk: the tile's work
// index (blockIdx.x where a block takes one). tok_scale: each token's sums scaled before rounding
// (store_tile_sums).
template <bool SWIGLU>
__device__ __forceinline__ void finish_gemv_out_tile(const float acc[4], const GemvOut& out, int64_t N, int n_tok,
                                                     int64_t blk, const float* tok_scale = nullptr) {
  if constexpr (SWIGLU) {
    finish_split_k_tile<true>(acc, out.y[0], N, n_tok, 0, 0, blk, tok_scale);
  } else {
    const int64_t n0 = blk * 16;
    __half* y;
    int64_t begin, rows;
    gemv_out_part(out, n0, y, begin, rows);
    finish_split_k_tile<false>(acc, y, rows, n_tok, n0 - begin, rows, blk, tok_scale);
  }
}

// One part: all N rows into y [T, N].
inline GemvOut gemv_out_whole(Tensor& y, int64_t N) {
  GemvOut o{};
  o.y[0] = y.ptr<__half>();
  o.end[0] = N;
  o.n = 1;
  return o;
}

// matmul_split's parts, [T, w_p] each with w_p a multiple of 16, for a weight of N rows and x of
// T rows; `what` names the caller in errors.
inline GemvOut gemv_out_parts(const std::vector<Tensor*>& parts, int64_t N, int64_t T, const char* what) {
  VI_CHECK(!parts.empty() && parts.size() <= ops::kSplitMaxParts, "{}: {} parts (1 to {})", what, parts.size(),
           ops::kSplitMaxParts);
  GemvOut o{};
  int64_t end = 0;
  for (const Tensor* p : parts) {
    VI_CHECK(p->dim(1) % kTiledRows == 0 && p->dim(0) == T, "{}: part [{}, {}] must be [{}, whole {}-row tiles]", what,
             p->dim(0), p->dim(1), T, kTiledRows);
    end += p->dim(1);
    o.y[o.n] = p->ptr<__half>();
    o.end[o.n++] = end;
  }
  VI_CHECK(end == N, "{}: parts of {} rows in all for a weight of {}", what, end, N);
  return o;
}

}  // namespace vi::cuda
