// The tensor-core decode GEMV for Q4_KR weights (native profile, sm_80+): y[T, N] =
// x[T, K] · w[N, K]ᵀ for T <= 8 tokens of f16 activations, w in the Q4_KR layout that
// ops::prepare_matmul_weight makes from Q4_K (core/dtype.h).
//
// Why a kernel of its own: the file-layout Q4_K GEMV (gemv_mma.cu) executes ~4.7 instructions
// per weight value (ncu on the H200: integer pipe 51% busy at 37% of DRAM bandwidth, 128
// registers with spills, 16 warps per SM), most of them unpacking 6-bit scales and pairing
// nibbles. Here lane c of a row group takes a whole sub-block (32 values, one scale and one
// min) per step, so the scale is decoded once per 32 values, not per 8:
//   A = sc·q, exact in f16 (≤ 945), from the nibble pair under 0x6400 (1024 + q, or
//       1024 + 16q) by one f16 FMA; t = Σ sc·q·x over the step in the fp32 mma accumulators;
//   the mins through a second mma whose A holds m: u = Σ m·x;
//   acc += d·t − dmin·u once per step (128 values), in fp32.
// Every product and sum is exact or fp32, so the only rounding of note is the f16 output:
// closer to the CPU than dequantizing each weight to f16 (the other GEMVs).
//
// Work layout (gemv_q4kr.cu): a block of WARPS warps owns one tile of 16 rows and splits K in
// steps of 128 values (half a super-block) round-robin over its warps, two steps in flight per
// warp; lane (g, c) reads 16 bytes of rows g and g + 8 per step and the two headers. The warps'
// partial sums meet in shared memory.
#pragma once

#include "ops/registry.h"  // host-only: the op tests and the benchmark include this header

namespace vi::cuda {

// Warps per block (K split) and whether a step's activations load with its weights (one
// step ahead) or when it multiplies. warps 0: chosen by shape.
// affine: loads from one row pointer and immediate offsets (4 or 8 warps only; not yet measured,
// so not a default).
struct GemvQ4krShape {
  int warps = 0;
  bool stage_x = true;
  bool affine = false;
};
GemvQ4krShape gemv_q4kr_default_shape(int64_t N, int64_t K);
// Every compiled shape, for the benchmark's --variants.
std::vector<GemvQ4krShape> gemv_q4kr_shapes();

// Whether gemv_q4kr can take this call (profile, device, dtypes, T, alignment).
bool gemv_q4kr_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w);
// x: [T, K] f16, T <= 8; w: [N, K] Q4_KR; y: [T, N] f16.
void gemv_q4kr(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, GemvQ4krShape shape = {});

}  // namespace vi::cuda
