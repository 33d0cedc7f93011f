// The tensor-core decode GEMV on Q4_KT weights (native profile, sm_80+): y[T, N] = x[T, K] · w[N, K]ᵀ
// for T <= 8 tokens of f16 activations, w in the tiled layout of core/dtype.h that
// ops::prepare_matmul_weight makes from Q4_K (through Q4_KR) where N % 16 == 0.
//
// Why a layout of its own: the warps of the Q4_KR GEMVs (gemv_q4kr.cu) multiply 16-row tiles,
// and each of their loads spans 8 rows of the row layout, so one warp-wide 16-byte load touches
// 8 cache lines (the scale and min loads 8 lines for 128 or 32 bytes): about 72 L1 wavefronts
// per super-block of a tile where contiguous bytes take about 20. ncu on the H200 (34816 x 5120,
// T = 1): L1/TEX throughput 69% at 56% of DRAM bandwidth, L2 hit rate 20% (sectors requested
// twice). In Q4_KT a warp's bytes for one tile and super-block are one 2368-byte run in lane
// order: 4 quant loads of 16 bytes, one 8-byte scale load and one 8-byte d/dmin load per lane,
// each over contiguous memory. The arithmetic is the Q4_KR kernels' (q4kr_mma.cuh), in the same
// order, so the outputs equal theirs bit for bit (docs/notes/gemv.md run 18).
//
// Work layout: a block of 4 warps per tile, warp w taking the tile's super-blocks w, w + 4, ...,
// two loaded ahead (the Q4_KR deep kernel's scheme), the warps' sums meeting in shared memory.
// The fused gate|up + SwiGLU gives a block 8 gate rows and the matching 8 up rows (half of a
// gate tile and of its up tile), as the Q4_KR kernel does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/deferred_norm.h"
#include "ops/registry.h"  // host-only: the op tests and the benchmark include this header

namespace vi::cuda {

// w: Q4_KR [N, K] with N % 16 == 0. Returns the same matrix as Q4_KT.
Tensor q4kt_from_q4kr(ops::Context& ctx, const Tensor& w);
// w: a stacked gate|up [2F, K] in Q4_KR with F % 8 == 0. Returns it as Q4_KTS (gate and up rows
// paired in each tile), which only the fused SwiGLU (and matmul's GEMM path) reads.
Tensor q4kts_from_q4kr(ops::Context& ctx, const Tensor& w);

// How a launch walks its tiles: `blocks` of 4 warps per SM its registers are budgeted for (3: 147
// registers, 165-168 in pairs; 4: 126-128), and whether each warp multiplies its super-blocks one
// at a time or, `pair`, two at a time with their mma steps interleaved (four independent mma
// chains a warp instead of two; the same sums bit for bit: docs/notes/gemv.md run 31).
// `stream`: blocks stay for several tiles (a grid of SMs x blocks, block b taking tiles b, b + G,
// ...), each next tile's first loads issued before the current tile's sums meet; taken only
// where the tiles are more than one wave, never by the deferred norm's producer; the same outputs
// bit for bit (docs/notes/gemv.md run 40: at T = 1 every streamed GEMV of the 27B round is
// shorter, 0.15 ms a round at 8K on the H200; at T = 4 the fused gate|up loses 63 us a round).
struct Q4ktShape {
  int blocks = 0;  // 0: the default shape for the call
  bool pair = false;
  bool stream = false;
};
inline bool operator==(Q4ktShape a, Q4ktShape b) {
  return a.blocks == b.blocks && a.pair == b.pair && a.stream == b.stream;
}
std::string gemv_q4kt_shape_name(Q4ktShape s);
// Whether the default shapes of a call of T tokens stream: for T = 1 only, unless the environment
// sets VI_Q4KT_STREAM=1 (every T) or 0 (never), read once per process. set_q4kt_stream_default
// (tests): 1 every T, 0 never, -1 back to the environment; gemv_q4kt_streaming_launches counts the
// launches that streamed.
bool gemv_q4kt_stream_default(int64_t T);
void set_q4kt_stream_default(int on);
uint64_t gemv_q4kt_streaming_launches();
// Whether a streaming launch of more than two items a block hands its items past the second out
// by tickets (the blocks that finish first take them) instead of the fixed stride b, b + G, ...:
// on unless VI_Q4KT_TICKETS=0 (read once per process) or set_q4kt_tickets_default(0) (tests: 1
// on, -1 back to the environment). The same outputs bit for bit. gemv_q4kt_ticket_launches
// counts the launches that drew tickets.
bool gemv_q4kt_tickets_default();
void set_q4kt_tickets_default(int on);
uint64_t gemv_q4kt_ticket_launches();
// The deferred norm's producer on a matrix of one wave of tiles or a little more than blocks - 1
// (the 5120-row matrices: 320 tiles on 132 SMs at 3 blocks a SM): how many of its last tiles are
// split by K into two halves, each taken by a block of its own, so that every SM holds about the
// same work; the halves' sums meet in the second to finish (a + b in either order: the same bits;
// not the one-tile kernel's, whose 4 warps' sums meet in one order). On by default (with the
// streaming tickets 0.07-0.09 ms off the 8K round on the H100 and the H200, docs/notes/gemv.md run
// 42): VI_Q4KT_HALVES=0 (read once per process) or set_q4kt_halves_default(0) turns it off (tests:
// 1 on, -1 back to the environment); 0 also where it does not fit. gemv_q4kt_halved_launches
// counts the launches that halved tiles.
int64_t gemv_q4kt_halved_tiles(int64_t N, int64_t K, int blocks);
void set_q4kt_halves_default(int on);
uint64_t gemv_q4kt_halved_launches();
// The blocks a SM of an N-row matrix's default shape on the current device: 3 where its N / 16
// tiles fit one wave of 3 a SM (4 would leave SMs idle), else 4. Sized from the usable SM count,
// so a card of fewer SMs (or an SM partition) keeps a one-wave matrix in one wave.
int gemv_q4kt_default_blocks(int64_t N);
// The plain GEMV's (and its split form's, the deferred norm's producer's and matmul consumers')
// shape for an N-row matrix and T tokens: gemv_q4kt_default_blocks; one super-block at a time
// (pairs measured slower on the 5120-row matrices).
Q4ktShape gemv_q4kt_default_shape(int64_t N, int64_t T = 1);
// The fused gate|up + SwiGLU's: the same blocks, in pairs (34816 x 5120: 33.2 against 34.9 us at
// T = 1 on the H200) unless the environment sets VI_Q4KT_PAIR=0 (read once per process).
// VI_Q4KT_SWIGLU_BLOCKS=3 or 4 sets its blocks per SM for an A/B of whole rounds: on the H100 the
// Q4_KTS stack took 37.6 us at 3 against 38.9 at 4 (2026-12-06 22:44; 37.4 / 38.6 at 19:07), yet
// an 8K round on 94 of its SMs 0.09 ms longer at 3 (2026-12-07 02:22); not timed on an H200.
Q4ktShape gemv_q4kt_swiglu_default_shape(int64_t N, int64_t T = 1);
std::vector<Q4ktShape> gemv_q4kt_shapes();  // every compiled shape, for the tests and the benchmark

// Whether gemv_q4kt can take this call (profile, device, dtypes, T, alignment). Not on Q4_KTS,
// whose rows are not in order.
bool gemv_q4kt_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w);
// x: [T, K] f16, T <= 8; w: [N, K] Q4_KT; y: [T, N] f16.
void gemv_q4kt(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, Q4ktShape shape = {});
// h[T, F] = silu(x · w[0:F]ᵀ) ⊙ (x · w[F:2F]ᵀ) for a stacked gate|up w [2F, K] in Q4_KT with
// F % 16 == 0, or in Q4_KTS (each block then reads one whole tile): the sums, roundings and
// SwiGLU of gemv_q4kr_swiglu, so h equals its h bit for bit in both layouts.
// matmul_split on Q4_KT: the kernel writes each part's rows into the part's own [T, w] tensor
// (parts of whole 16-row tiles, at most kSplitMaxParts).
bool gemv_q4kt_split_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w,
                              const std::vector<Tensor*>& parts);
void gemv_q4kt_split(const ops::Context& ctx, const Tensor& x, const Tensor& w, const std::vector<Tensor*>& parts);
bool gemv_q4kt_swiglu_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w);
void gemv_q4kt_swiglu(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h, Q4ktShape shape = {});

// The deferred norm (ops/deferred_norm.h) on Q4_KT. Producer: x += a · wᵀ, then out's u, the
// sums of squares added to out.ss and, where out has a sums16 (and VI_DEFER_SUMS is not 0), u's
// sums16 (setting out.sums_written), from the GEMV's epilogue (a [T, K] f16, w [d, K], x [T, d]
// f16).
bool gemv_q4kt_add_deferred_norm_supports(const ops::Context& ctx, const Tensor& a, const Tensor& w, const Tensor& x);
void gemv_q4kt_add_deferred_norm(const ops::Context& ctx, const Tensor& a, const Tensor& w, Tensor& x,
                                 const Tensor& norm_w, float w_offset, ops::DeferredNorm& out);
// Consumers: the GEMV, its split form and the fused SwiGLU on u, each token's sums scaled by its
// s before rounding (outs: {y}, the parts, {h}; parts may be empty for the check alone); the
// mins' term from in.sums16 where in.sums_written, else from u itself.
bool gemv_q4kt_deferred_supports(const ops::Context& ctx, const ops::DeferredNorm& in, const Tensor& w,
                                 ops::DeferredConsumer kind, const std::vector<Tensor*>& parts);
void gemv_q4kt_deferred(const ops::Context& ctx, const ops::DeferredNorm& in, const Tensor& w,
                        ops::DeferredConsumer kind, const std::vector<Tensor*>& outs);

}  // namespace vi::cuda
