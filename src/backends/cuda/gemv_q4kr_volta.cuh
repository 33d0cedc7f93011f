// The decode GEMV for Q4_KR weights in the volta profile: y[T, N] = x[T, K] · w[N, K]ᵀ for
// T <= 8 tokens of f16 activations on Volta's tensor cores (mma.m8n8k4, fp32 accumulation), w
// in the Q4_KR layout (core/dtype.h) that ops::prepare_matmul_weight makes from Q4_K.
//
// Why a kernel of its own: the CUDA-core GEMV (gemv_simt.cu) spends ~6 instructions per weight
// value at T = 1 and ~4 more per extra token; the native kernel (gemv_q4kr.cu) needs sm_80's
// mma.m16n8k16. On sm_70 one m8n8k4 is four HMMA.884 instructions for 4 weight values per
// thread, i.e. 1 instruction per value whatever T <= 8 is, so T = 4 costs about what T = 1 does.
//
// Numerics (all exact or fp32, as in the native kernel):
//   A = sc·q, exact in f16 (<= 945), from the nibble pair under 0x6400 (1024 + q, or 1024 + 16q)
//       by one f16 FMA with sc and -1024·sc (or sc/16 and -64·sc): exact before its one rounding;
//   t = Σ sc·q·x in the fp32 mma accumulators (f16 products are exact in them);
//   the mins: u = Σ_j m_j·S_j over the 32-value sub-blocks j, S_j = Σ x over sub-block j, summed
//       in fp32 once per block and split into two f16 numbers (hi + lo: 22 bits), so one more
//       m8n8k4 per two sub-blocks (A = 32·m, exact; B = S/32 as hi, lo) gives u to fp32 grade;
//   acc += d·t − dmin·u once per super-block (256 values), in fp32.
// The only rounding of note is the f16 output.
//
// Work layout (gemv_q4kr_volta.cu): a tile of 32 rows is 4 warps; lane L of a warp is row
// 8·(L/4 % 4) + (L % 4) + 4·(L / 16) of the tile in the mma's A operand (quad-pair layout), its
// token column the same number; the 4 warps take whole super-blocks round-robin and meet in
// shared memory. A block holds 1, 2 or 4 tiles, which share the activation sums.
#pragma once

#include <string>
#include <vector>

#include "ops/registry.h"  // host-only: the op tests and the benchmark include this header

namespace vi::cuda {

// Tiles of 32 rows per block (1, 2, 4) and the blocks per SM its registers are budgeted for.
// tiles == 0: chosen by shape.
struct GemvQ4krVoltaShape {
  int tiles = 0;
  int blocks = 0;
  bool operator==(const GemvQ4krVoltaShape& o) const { return tiles == o.tiles && blocks == o.blocks; }
};
// "m8n8k4, 2 tiles/block, 2 blocks/SM".
std::string gemv_q4kr_volta_shape_name(const GemvQ4krVoltaShape& s);
GemvQ4krVoltaShape gemv_q4kr_volta_default_shape(int64_t N, int64_t K);
// Every compiled shape, for the tests and the benchmark's --variants.
std::vector<GemvQ4krVoltaShape> gemv_q4kr_volta_shapes();

// Whether gemv_q4kr_volta can take this call (dtypes, T, K, alignment), on any device of sm_70
// or newer. Where it is worth running (m8n8k4 is a hardware instruction) is matmul.cu's call.
bool gemv_q4kr_volta_supports(const Tensor& x, const Tensor& w);
// x: [T, K] f16, T <= 8; w: [N, K] Q4_KR, K <= 24576; y: [T, N] f16.
void gemv_q4kr_volta(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y,
                     GemvQ4krVoltaShape shape = {});

}  // namespace vi::cuda
