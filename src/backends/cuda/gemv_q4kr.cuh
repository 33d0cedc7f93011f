// The tensor-core decode GEMV for Q4_KR weights (native profile, sm_80+): y[T, N] =
// x[T, K] · w[N, K]ᵀ for T <= 8 tokens of f16 activations, w in the Q4_KR layout that
// ops::prepare_matmul_weight makes from Q4_K (core/dtype.h).
//
// Why a kernel of its own: the file-layout Q4_K GEMV (gemv_mma.cu) executes ~4.7 instructions
// per weight value (ncu on the H200: integer pipe 51% busy at 37% of DRAM bandwidth, 128
// registers with spills, 16 warps per SM), most of them unpacking 6-bit scales and pairing
// nibbles. Here lane c of a row group takes a whole sub-block (32 values, one scale and one
// min) at a time, so the scale is decoded once per 32 values, not per 8:
//   A = sc·q, exact in f16 (≤ 945), from the nibble pair under 0x6400 (1024 + q, or
//       1024 + 16q) by one f16 FMA; t = Σ sc·q·x over a super-block in the fp32 mma accumulators;
//   the mins through a second mma whose A holds m: u = Σ m·x;
//   acc += d·t − dmin·u once per super-block (256 values), in fp32.
// Every product and sum is exact or fp32, so the only rounding of note is the f16 output:
// closer to the CPU than dequantizing each weight to f16 (the other GEMVs).
//
// Work layout (gemv_q4kr.cu): a block owns a tile of 16 rows; its warps take whole super-blocks
// of K round-robin (lane (g, c): sub-block c of each half, rows g and g + 8), and their
// partial sums meet in shared memory. Routed: two super-blocks per warp loaded ahead into
// registers (sm_80+; every matrix up to 65535 rows), or, for the head, the weights streamed by
// bulk copies through a ring of shared-memory slots (sm_90). A one-half-ahead register kernel is
// kept as a measured variant (gemv_q4kr_shapes).
#pragma once

#include <string>
#include <vector>

#include "ops/registry.h"  // host-only: the op tests and the benchmark include this header

namespace vi::cuda {

// Which kernel, its parameter and the blocks of 4 warps per SM its registers are budgeted for:
// kRegisters (blocks 4 or 6); kDeep, param super-blocks per warp loaded ahead (2..4; blocks 3,
// or 4 for 2 ahead); kRing, param slots of the bulk-copy ring (2..4; sm_90 and CUDA 12+).
// kAuto: chosen by shape.
struct GemvQ4krShape {
  enum class Kernel { kAuto, kRegisters, kDeep, kRing };
  Kernel kernel = Kernel::kAuto;
  int param = 0;
  int blocks = 0;
  bool operator==(const GemvQ4krShape& o) const {
    return kernel == o.kernel && param == o.param && blocks == o.blocks;
  }
};
// "registers, 4 blocks/SM", "deep, 2 ahead, 3 blocks/SM", "bulk-copy ring, 2 slots".
std::string gemv_q4kr_shape_name(const GemvQ4krShape& s);
GemvQ4krShape gemv_q4kr_default_shape(const ops::Context& ctx, int64_t N, int64_t K);
// Every shape compiled and runnable on the current device, for the tests and the benchmark's
// --variants.
std::vector<GemvQ4krShape> gemv_q4kr_shapes(const ops::Context& ctx);

// Whether gemv_q4kr can take this call (profile, device, dtypes, T, alignment).
bool gemv_q4kr_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w);
// x: [T, K] f16, T <= 8; w: [N, K] Q4_KR; y: [T, N] f16.
void gemv_q4kr(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, GemvQ4krShape shape = {});
// h[T, F] = silu(x · w[0:F]ᵀ) ⊙ (x · w[F:2F]ᵀ) for a stacked gate|up w [2F, K] (where
// gemv_q4kr_supports(x, w)): ops::matmul_swiglu in one kernel, each product rounded to f16 as the
// unfused matmul stores it, then SiLU and the product as swiglu_halves computes them.
void gemv_q4kr_swiglu(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h);

}  // namespace vi::cuda
