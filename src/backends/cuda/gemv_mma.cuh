// The tensor-core decode GEMV (native profile, sm_80+): y[T, N] = x[T, K] · w[N, K]ᵀ for
// T <= 8 tokens with f16 activations. Weight rows are dequantized to f16 in registers and
// multiplied with mma.m16n8k16 (16 weight rows x 8 tokens per instruction, fp32 accumulation),
// so the arithmetic does not grow with T: on the H200 a T = 8 call costs 1.1-1.5x a T = 1 call
// (the extra is the activations each block reads). Q4_K/Q5_K are bounded by the unpacking,
// F16/Q8_0R by memory on large matrices (docs/notes/gemv.md).
//
// Layout of the work (gemv_mma.cu): a block of 8 warps owns 16 * TILES rows; the warps split K
// in steps of 128 values (warp w takes steps w, w + 8, ...), each lane reads one 16..64-byte
// unit of 32 values per row per step with 16-byte loads, and the block sums the 8 partial
// results through shared memory. Weight dtypes: Q4_K and Q5_K (file layouts), Q8_0R (the
// Q8_0 repack of ops::prepare_matmul_weight), Q8_0T (the same values in 16-row tiles in the
// order the lanes load them, so each warp-wide load is contiguous; the same outputs bit for bit)
// and F16; the rest use gemv_simt.cuh.
#pragma once

#include <vector>

#include "ops/registry.h"  // host-only: the op tests and the benchmark include this header

namespace vi::cuda {

// How the work is cut: row tiles of 16 per warp, the blocks per SM the registers are budgeted
// for, and whether activations load a step ahead with the weights. Compiled: {2, 2, both},
// {2, 1, staged}, {1, 2, staged}, {1, 3, not staged}. tiles 0: gemv_mma_default_shape.
// depth > 0 (Q8_0R only) picks the deep kernel instead, for matrices of few rows: blocks of 4
// warps on one 16-row tile, each warp holding `depth` steps of 128 values loaded ahead
// (tiles 1, 3 blocks per SM; stage_x: the activations of the next step load while this one
// multiplies; x 16-byte aligned). Compiled: depth 4 and 6, each both ways.
struct GemvMmaShape {
  int tiles = 0;
  int min_blocks = 0;
  bool stage_x = true;
  int depth = 0;
  bool operator==(const GemvMmaShape& o) const {
    return tiles == o.tiles && min_blocks == o.min_blocks && stage_x == o.stage_x && depth == o.depth;
  }
};
GemvMmaShape gemv_mma_default_shape(const Tensor& w, int64_t n_tok);
// Every shape compiled for weight dtype wt (the tests and the benchmark's --variants).
std::vector<GemvMmaShape> gemv_mma_shapes(DType wt);

// Whether gemv_mma can take this call (profile, device, dtypes, T, alignment).
bool gemv_mma_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w);
// x: [T, K] f16, T <= 8; w: [N, K]; y: [T, N] f16. Call only where gemv_mma_supports. A shape
// other than the default is for benchmarks (tests/bench/bench_cuda_gemv.cu --variants).
void gemv_mma(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, GemvMmaShape shape = {});
// h[T, F] = silu(x · w[0:F]ᵀ) ⊙ (x · w[F:2F]ᵀ) for a stacked gate|up w [2F, K] (where
// gemv_mma_supports(x, w)): ops::matmul_swiglu in one kernel, the step kernel in its default shape
// with each product rounded to f16 as the unfused GEMV stores it.
// Where gemv_mma_swiglu can take the call: gemv_mma_supports, and for Q8_0T halves of whole
// 16-row tiles (N % 32 == 0).
bool gemv_mma_swiglu_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w);
// shape: one of gemv_mma_shapes without depth (the tests and the benchmark); default: as the GEMV.
void gemv_mma_swiglu(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h, GemvMmaShape shape = {});

}  // namespace vi::cuda
