// Tensor-core decode GEMV on Q4_KT weights: see gemv_q4kt.cuh for the plan, core/dtype.h for the
// layout and q4kr_mma.cuh for the arithmetic.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cp_async.cuh"
#include "backends/cuda/deferred_scale.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/env_switch.h"
#include "backends/cuda/gemv_out.cuh"
#include "backends/cuda/gemv_q4kt.cuh"
#include "backends/cuda/gemv_q4kt_tma.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/q4kr_bits.cuh"
#include "backends/cuda/q4kr_mma.cuh"
#include "backends/cuda/q4kr_tiles.cuh"
#include "backends/cuda/q4kt_walk.cuh"
#include "backends/cuda/workspace.cuh"
#include "ops/copy.h"
#include "ops/deferred_norm.h"
#include "ops/memory.h"

namespace vi::cuda {
namespace {

// One warp per unit (tile, super-block): lane L gathers its bytes from the Q4_KR rows: rows
// 16t..16t+15 for tile t, or with PAIRED (Q4_KTS, core/dtype.h) gate rows 8t..8t+7 and up rows
// F+8t..F+8t+7 of the stacked [2F, K] (F = 8 x the tile count).
template <bool PAIRED>
__global__ void q4kt_from_q4kr_kernel(const uint8_t* __restrict__ w, size_t row_bytes, uint8_t* __restrict__ out,
                                      int n_sb, int64_t units) {
  const int64_t unit = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (unit >= units) return;
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int64_t tile = unit / n_sb, F = 8 * (units / n_sb);
  const int sb = static_cast<int>(unit % n_sb), pos = sb & 3;
  const uint8_t* r[2];
  for (int h = 0; h < 2; ++h) {
    const int64_t row = PAIRED ? h * F + 8 * tile + g : tile * 16 + g + 8 * h;
    r[h] = w + static_cast<size_t>(row) * row_bytes + static_cast<size_t>(sb >> 2) * kQ4krBlkBytes;
  }
  uint8_t* u = out + unit * kQ4ktUnitBytes;
  for (int k = 0; k < 4; ++k)
    *reinterpret_cast<uint4*>(u + 512 * k + 16 * lane) =
        *reinterpret_cast<const uint4*>(r[k & 1] + 128 * pos + 64 * (k >> 1) + 16 * c);
  uint32_t words[2];
  for (int h = 0; h < 2; ++h) {
    const uint8_t* sm = r[h] + kQ4krSmOff + 16 * pos;  // sc[0..3], m[0..3], sc[4..7], m[4..7]
    words[h] = uint32_t(sm[c]) | uint32_t(sm[4 + c]) << 8 | uint32_t(sm[8 + c]) << 16 | uint32_t(sm[12 + c]) << 24;
  }
  *reinterpret_cast<uint2*>(u + 2048 + 8 * lane) = make_uint2(words[0], words[1]);
  if (c == 0)
    *reinterpret_cast<uint2*>(u + 2304 + 8 * g) =
        make_uint2(*reinterpret_cast<const uint32_t*>(r[0] + kQ4krDmOff + 4 * pos),
                   *reinterpret_cast<const uint32_t*>(r[1] + kQ4krDmOff + 4 * pos));
}

// The deferred norm's part in a launch (ops/deferred_norm.h): kNormConsume scales each token's
// sums by s[t] before they are rounded; kNormConsumeSums does too and takes the mins' term from
// the producer's sums of u (XSUM in q4kt_walk.cuh); kNormProduce ends the GEMV with the residual
// add, u, the tile's sums of squares (added to the token's fixed-point total by atomics) and, if
// asked, the tile's sum of u per token, instead of writing y. What either needs beyond the GEMV's
// own operands (the totals; the residual and norm-weight rows of the tile) is copied into shared
// memory by cp.async when the block starts and read at its end (read from L2 after the loop it
// cost a round trip per block).
enum : int { kNormNone = 0, kNormConsume = 1, kNormProduce = 2, kNormConsumeSums = 3 };
constexpr bool consumes(int norm) { return norm == kNormConsume || norm == kNormConsumeSums; }
constexpr int kSsWords = 2 * ops::kDeferredNormSlots;  // u64 words per token
static_assert(kSsWords == 4, "a token's words are two 16-byte copies");
struct NormArgs {
  const unsigned long long* ss_in;  // consume: [T, kSsWords] the totals
  float inv_d, eps;                 // consume: 1 / d, the norm's eps
  const __half* sums_in;            // consume with sums: [T, K / 8] u's sums16 (ops/deferred_norm.h)
  __half* x;                        // produce: the residual [T, N], read and written
  const float* w;                   // produce: norm weight [N] f32
  float w_offset;                   // produce
  __half* u;                        // produce: [T, N]
  unsigned long long* ss;           // produce: [T, kSsWords], added to
  __half* sums;                     // produce: [T, N / 8] u's sums16, or null
  // produce, with halves (part_counts set): tiles split_from .. are split by K into two halves,
  // blocks split_from + 2 j and + 1 taking tile split_from + j; the halves' sums meet through
  // part_sums [n_split, 2, 128] f32 and part_counts [n_split] (zero between launches).
  int64_t split_from;
  float* part_sums;
  unsigned* part_counts;
};

// Consume. A thread's sums at the end are for tokens of its warp's parity (store_tile_sums and
// write_swiglu_sums give thread k of a 128-thread block token 2 (k & 3) + ((k >> 5) & 1)), so
// lane j < 4 of each warp stages token 2 j + parity's words and computes its s: no block
// barrier, and the copies land while the loop runs.
struct ConsumeStage {
  uint4 words[4][4][2];  // [warp][lane j][two 16-byte halves]
};
__device__ __forceinline__ void stage_totals(const NormArgs& na, int n_tok, ConsumeStage& st) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = 2 * (lane >> 1) + (warp & 1);
  if (lane < 8 && t < n_tok)  // lanes 2j, 2j + 1: the two halves of token 2 j + parity
    cp_async16(&st.words[warp][lane >> 1][lane & 1], na.ss_in + static_cast<int64_t>(t) * kSsWords + 2 * (lane & 1),
               true);
  cp_async_commit();
}

// After the loop: s[t] = unit · rsqrt(total · inv_d + eps) for this warp's tokens into s_warp[t].
__device__ __forceinline__ void warp_scales(const NormArgs& na, int n_tok, const ConsumeStage& st, float* s_warp) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = 2 * lane + (warp & 1);
  cp_async_wait<0>();
  __syncwarp();
  if (lane < 4 && t < n_tok) {
    s_warp[t] = deferred_norm_scale(st.words[warp][lane][0], st.words[warp][lane][1], na.inv_d, na.eps);
  }
  __syncwarp();
}

// Produce: the tile's rows of the norm weight (before pdl_wait: a weight) and of the residual
// (after it) into shared memory: 64 bytes, and 32 bytes a token. 16-byte aligned for the copies,
// wherever the kernel's other shared variables put it.
struct alignas(16) ProduceStage {
  __half x[8][16];
  float w[16];
};
__device__ __forceinline__ void stage_norm_weight(const NormArgs& na, ProduceStage& st, int64_t tile) {
  if (threadIdx.x < 4) cp_async16(st.w + 4 * threadIdx.x, na.w + tile * 16 + 4 * threadIdx.x, true);
}
__device__ __forceinline__ void stage_residual(const NormArgs& na, int64_t N, int n_tok, ProduceStage& st,
                                               int64_t tile) {
  const int tok = threadIdx.x >> 1, h = threadIdx.x & 1;
  if (tok < n_tok) cp_async16(&st.x[tok][8 * h], na.x + static_cast<int64_t>(tok) * N + tile * 16 + 8 * h, true);
  cp_async_commit();
}

// The producer's halved tiles: half `part` of tile `tile` puts its sums of slot i of every lane
// (s_own, thread 32 i + l) into part_sums; the second half to arrive adds the other half's to
// its own (s_own and s_pair, the slot i ^ 2 of the same lane) and returns true to go on with
// the epilogue, the first returns false. a + b is the same bits in either order, so which half
// arrives last does not change the result. The last arrival leaves the counter at zero.
__device__ __forceinline__ bool meet_halves(const NormArgs& na, int64_t tile, int part, float& s_own, float& s_pair) {
  __shared__ unsigned arrived;
  const int64_t j = tile - na.split_from;
  na.part_sums[(2 * j + part) * 128 + threadIdx.x] = s_own;
  __threadfence();  // the sums before the count
  __syncthreads();
  if (threadIdx.x == 0) {
    arrived = atomicAdd(na.part_counts + j, 1u);
    if (arrived == 1) na.part_counts[j] = 0;  // both halves are in
  }
  __syncthreads();
  if (arrived == 0) return false;
  __threadfence();
  const float* other = na.part_sums + (2 * j + (part ^ 1)) * 128;
  s_own += __ldcg(other + threadIdx.x);
  s_pair += __ldcg(other + (threadIdx.x ^ 64));  // slot i ^ 2 of the same lane
  return true;
}

// Produce, after the loop: the tile's row sums o rounded to f16 as matmul stores them, then
// x[t, n] = f16(x + o) as add_rms_norm rounds it, u = f16(x · (w_offset + w) / unit), and each
// x² in fixed point (ops/deferred_norm.h) added over the 8 rows a warp holds of one token (lanes
// 4g + c, g the row: three shuffles) and to slot `half` of the token's total by one atomic per
// word. Integer sums: any order of blocks gives the same bits. With na.sums, each thread also
// computes the u of the row 8 away (the same code as the thread that owns it, so the same bits),
// and the 16 rows' u of each token are added in a fixed order (the pair, then three shuffles)
// and written once as sums16's (hi, lo) pair: no barrier, no atomics. Every thread of the block
// calls it. part: -1 for a whole tile, else the half of a halved tile (meet_halves).
__device__ __forceinline__ void finish_deferred_tile(const float acc[4], const NormArgs& na, const ProduceStage& st,
                                                     int64_t N, int n_tok, int64_t tile, int part) {
  __shared__ float red[4][4][32];
  cp_async_wait<0>();  // the staged rows: visible to every thread after stash_tile_sums' barrier
  stash_tile_sums(acc, red);
  const int i = threadIdx.x / 32, l = threadIdx.x % 32;
  const int r = (l >> 2) + 8 * (i >> 1), tok = 2 * (l & 3) + (i & 1);
  // The tile's sums of accumulator slot i of lane l (row r) and of slot i ^ 2 (row r ^ 8).
  float s_own = 0.0f, s_pair = 0.0f;
#pragma unroll
  for (int wv = 0; wv < 4; ++wv) {
    s_own += red[wv][i][l];
    s_pair += red[wv][i ^ 2][l];
  }
  if (part >= 0 && !meet_halves(na, tile, part, s_own, s_pair)) return;
  // Row rr's new residual value xn and its u from its sum.
  auto row_u = [&](float sum, int rr, __half& xn) {
    const float o = __half2float(__float2half_rn(sum));
    xn = __float2half_rn(__half2float(st.x[tok][rr]) + o);
    return __float2half_rn(__half2float(xn) * (st.w[rr] + na.w_offset) * (1.0f / ops::kDeferredNormUnit));
  };
  const int64_t at = static_cast<int64_t>(tok) * N + tile * 16 + r;
  unsigned long long fine = 0, coarse = 0;
  float u16 = 0.0f;  // with na.sums: u of rows r and r ^ 8
  if (tok < n_tok) {
    __half xn;
    const __half un = row_u(s_own, r, xn);
    na.x[at] = xn;
    na.u[at] = un;
    if (na.sums != nullptr) {
      __half xn8;
      const __half u8 = row_u(s_pair, r ^ 8, xn8);
      u16 = __half2float(un) + __half2float(u8);  // the partner adds the same two: one sum, commutative
    }
    const float xf = __half2float(xn);
    const float v = fminf(xf * xf, ops::kDeferredNormClamp);  // a NaN square becomes the clamp too
    if (v < ops::kDeferredNormFineLimit)
      fine = __float2ull_rn(v * ops::kDeferredNormFineScale);
    else
      coarse = __float2ull_rn(v * ops::kDeferredNormCoarseScale);
  }
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) {
    fine += __shfl_xor_sync(0xffffffffu, fine, o);
    coarse += __shfl_xor_sync(0xffffffffu, coarse, o);
  }
  if ((l >> 2) == 0 && tok < n_tok) {
    unsigned long long* w = na.ss + static_cast<int64_t>(tok) * kSsWords + 2 * (i >> 1);
    if (fine) atomicAdd(w, fine);
    if (coarse) atomicAdd(w + 1, coarse);
  }
  if (na.sums != nullptr) {  // warps i and i ^ 2 hold the same sums: i < 2 writes them
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) u16 += __shfl_xor_sync(0xffffffffu, u16, o);
    if ((l >> 2) == 0 && i < 2 && tok < n_tok) {
      // / 16: exact, and keeps hi inside f16 for any 16 f16 values.
      *reinterpret_cast<__half2*>(na.sums + static_cast<int64_t>(tok) * (N / 8) +
                                  ops::deferred_norm_sums_index(tile)) = f16_hi_lo(u16 * (1.0f / 16.0f));
    }
  }
}

// A block of 4 warps per 16-row tile, walking it as q4kt_walk.cuh describes. MINB: blocks per
// SM the registers are budgeted for. SWIGLU: the fused gate|up + SwiGLU (q4kt_walk.cuh). NORM:
// the deferred norm's part (above; produce only without SWIGLU). PAIR: super-blocks two at a time.
// PAIRED: with SWIGLU, w is Q4_KTS, whose tile b holds the block's gate rows (its rows g) and up
// rows (g + 8): the block walks one whole tile as the plain GEMV does, and the same sums meet the
// same SwiGLU epilogue (h equals the Q4_KT kernel's bit for bit).
// STREAM (not the producer): the grid is smaller than the work (n_work tiles, or SWIGLU work
// items). kStride: block b takes items b, b + gridDim.x, ...; each next item's first loads go out
// before the warps' sums of the current one meet, so a block pays its start (the first loads'
// round trip, its launch) once instead of once per item. Each item's loads, products and epilogue
// are the one-item kernel's: the same outputs bit for bit.
// kTickets (more than two items a block: n_work > 2 G, G = gridDim.x): block b's first two items
// are b and b + G, every later one 2 G + a ticket drawn from a counter, so the blocks that finish
// first take the rest instead of a fixed block taking a fifth item late. Thread 0 draws the item
// after next when an item starts (the atomic's round trip hides behind the walk) and puts it in
// shared memory after the walk, before the barrier that ends the item: every thread reads it one
// item later, when it re-aims. A block draws while its next item exists: n_work - G draws in all
// (the items past 2 G, and one past the end a block). Whoever draws the last one resets the
// counter for the next launch (which draws only after its pdl_wait, so after this grid is done).
// (Drawing the second item too, for launches of one to two waves, cost a barrier after the first
// walk and lost: docs/notes/gemv.md run 42.)
enum : int { kOneItem = 0, kStride = 1, kTickets = 2 };
struct StreamTickets {
  unsigned* counter;  // kTickets: zero at the launch, zero after it
  int draws;          // tickets the launch draws in all
};

template <int MINB, bool SWIGLU, int NORM = kNormNone, bool PAIR = false, bool PAIRED = false, int STREAM = kOneItem>
__global__ void __launch_bounds__(128, MINB)
    gemv_q4kt_kernel(const uint8_t* __restrict__ w, const __half* __restrict__ x, GemvOut out, int n_tok, int64_t N,
                     int n_sb, int64_t K, uint32_t magic, NormArgs na, int64_t n_work, StreamTickets tickets) {
  static_assert(!(SWIGLU && NORM == kNormProduce), "the producer writes the residual, not h");
  static_assert(SWIGLU || !PAIRED, "Q4_KTS is read by the fused SwiGLU only");
  static_assert(STREAM == kOneItem || NORM != kNormProduce, "the producer's epilogue is bound to blockIdx.x");
  using Walk = Q4ktTileWalk<SWIGLU && !PAIRED, PAIR, NORM == kNormConsumeSums>;
  int64_t blk = blockIdx.x;
  [[maybe_unused]] int part = -1;  // the producer's halved tiles: which half this block takes
  if constexpr (NORM == kNormProduce) {
    if (na.part_counts != nullptr && blk >= na.split_from) {
      const int64_t j = blk - na.split_from;
      blk = na.split_from + j / 2;
      part = static_cast<int>(j & 1);
    }
  }
  Walk walk(w, x, n_tok, N, n_sb, K, blk, na.sums_in);
  if constexpr (NORM == kNormProduce) {
    if (part >= 0) walk.take_part(part == 0 ? 0 : n_sb / 2, part == 0 ? n_sb / 2 : n_sb - n_sb / 2);
  }
  walk.start();
  [[maybe_unused]] __shared__ ProduceStage produce;
  [[maybe_unused]] __shared__ ConsumeStage consume;
  if constexpr (NORM == kNormProduce) stage_norm_weight(na, produce, blk);
  pdl_wait();
  pdl_trigger();
  if constexpr (NORM == kNormProduce) stage_residual(na, N, n_tok, produce, blk);
  if constexpr (consumes(NORM)) stage_totals(na, n_tok, consume);
  // kTickets: s_after[i & 1] is the id of the block's item i + 2 (n_work: none), written by thread
  // 0 during item i. Items are below 2^31 (N / 16).
  [[maybe_unused]] __shared__ int s_after[2];
  [[maybe_unused]] int parity = 0;  // kTickets: i & 1 of the item being walked
  [[maybe_unused]] bool first = true;
  for (;;) {
    [[maybe_unused]] unsigned drawn = ~0u;  // kTickets, thread 0: the ticket drawn for this item
    if constexpr (STREAM == kTickets) {
      if (threadIdx.x == 0) {
        const int64_t nxt = first ? blk + gridDim.x : int64_t(s_after[parity ^ 1]);
        if (nxt < n_work) drawn = atomicAdd(tickets.counter, 1u);
      }
    }
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    walk.run(magic, acc);
    [[maybe_unused]] int64_t next = blk + gridDim.x;
    if constexpr (STREAM == kTickets) {
      if (drawn != ~0u) {
        s_after[parity] = static_cast<int>(min(2 * int64_t(gridDim.x) + drawn, n_work));
        if (drawn + 1 == static_cast<unsigned>(tickets.draws)) *tickets.counter = 0u;
      }
      if (!first) next = s_after[parity ^ 1];
    }
    // One item: blockIdx.x read again at the end rather than held through the walk (a register).
    [[maybe_unused]] const int64_t at = STREAM != kOneItem ? blk : int64_t(blockIdx.x);
    if constexpr (STREAM != kOneItem) {
      if (next < n_work) {
        walk = Walk(w, x, n_tok, N, n_sb, K, next, na.sums_in);
        walk.start();
      }
    }
    if constexpr (NORM == kNormProduce) {
      finish_deferred_tile(acc, na, produce, N, n_tok, blk, part);
    } else if constexpr (consumes(NORM)) {
      __shared__ float s_warp[4][8];
      warp_scales(na, n_tok, consume, s_warp[threadIdx.x >> 5]);
      finish_gemv_out_tile<SWIGLU>(acc, out, N, n_tok, at, s_warp[threadIdx.x >> 5]);
    } else {
      finish_gemv_out_tile<SWIGLU>(acc, out, N, n_tok, at);
    }
    if constexpr (STREAM == kOneItem) {
      break;
    } else {
      if (next >= n_work) break;
      blk = next;
      if constexpr (STREAM == kTickets) {
        parity ^= 1;
        first = false;
      }
      __syncthreads();  // every warp has read the shared sums (and s_after) of this item before the next are stashed
    }
  }
}

// Blocks of `per_sm` a SM that the device holds at once: one wave of a launch.
int64_t wave_slots(int per_sm) { return int64_t(current_device().sm_count) * per_sm; }

// The streaming shapes' switch (set_q4kt_stream_default) and their launches, for the tests.
std::atomic<int> g_stream_override{-1};
std::atomic<uint64_t> g_stream_launches{0};
// The streaming launches' tickets: the switch (set_q4kt_tickets_default) and the launches that drew.
std::atomic<int> g_tickets_override{-1};
std::atomic<uint64_t> g_ticket_launches{0};

// A streaming launch takes tickets where they are switched on and every block has a second item.
bool takes_tickets(int64_t work, int64_t grid) { return gemv_q4kt_tickets_default() && work > 2 * grid; }

template <int MINB, bool SWIGLU, int NORM = kNormNone, bool PAIR = false, bool PAIRED = false, int STREAM = kOneItem>
void launch(const ops::Context& ctx, const Tensor& x, const Tensor& w, const GemvOut& out, const NormArgs& na = {}) {
  const int64_t N = w.dim(0), K = w.dim(1);
  const int64_t work = N / 16;  // tiles; SWIGLU: F / 8 items of 8 gate + 8 up rows
  int64_t blocks = STREAM != kOneItem ? std::min(work, wave_slots(MINB)) : work;
  if (NORM == kNormProduce && na.part_counts != nullptr) blocks = na.split_from + 2 * (work - na.split_from);
  StreamTickets tickets{nullptr, 0};
  if (STREAM == kTickets) {
    VI_CHECK(work > 2 * blocks && work < (int64_t(1) << 31), "gemv_q4kt: tickets for {} items on {} blocks", work,
             blocks);
    tickets.draws = static_cast<int>(work - blocks);
    tickets.counter =
        static_cast<unsigned*>(thread_workspace_zeroed(ctx, WorkspaceSlot::kGemvStreamTickets, sizeof(unsigned)));
    g_ticket_launches.fetch_add(1, std::memory_order_relaxed);
  }
  VI_CUDA_CHECK(pdl_launch(gemv_q4kt_kernel<MINB, SWIGLU, NORM, PAIR, PAIRED, STREAM>,
                           dim3(static_cast<unsigned>(blocks)),
                           dim3(128), 0, stream_of(ctx), w.ptr<uint8_t>(), x.ptr<__half>(), out,
                           static_cast<int>(x.rows()), N, static_cast<int>(K / kQKK), K, kQ4krMagic, na, work,
                           tickets));
}
// The producer's halved tiles: the switch (set_q4kt_halves_default) and the launches that halved.
std::atomic<int> g_halves_override{-1};
std::atomic<uint64_t> g_halved_launches{0};

// The kernel of `shape`'s blocks a SM and pair form, in the STREAM form given.
template <bool SWIGLU, int NORM, bool PAIRED, int STREAM>
void launch_shape(const ops::Context& ctx, const Tensor& x, const Tensor& w, const GemvOut& out, Q4ktShape shape,
                  const NormArgs& na) {
  switch (2 * shape.blocks + (shape.pair ? 1 : 0)) {
    case 6: launch<3, SWIGLU, NORM, false, PAIRED, STREAM>(ctx, x, w, out, na); return;
    case 8: launch<4, SWIGLU, NORM, false, PAIRED, STREAM>(ctx, x, w, out, na); return;
    case 7: launch<3, SWIGLU, NORM, true, PAIRED, STREAM>(ctx, x, w, out, na); return;
    case 9: launch<4, SWIGLU, NORM, true, PAIRED, STREAM>(ctx, x, w, out, na); return;
    default: VI_FAIL("gemv_q4kt: no kernel for {}", gemv_q4kt_shape_name(shape));
  }
}

template <bool SWIGLU, int NORM = kNormNone, bool PAIRED = false>
void launch_for(const ops::Context& ctx, const Tensor& x, const Tensor& w, const GemvOut& out, Q4ktShape shape,
                const NormArgs& na = {}) {
  // Streaming pays only where the work is more than one wave (the one-wave launch is the same
  // work in the same order), and the producer never streams.
  const bool stream = NORM != kNormProduce && shape.stream && w.dim(0) / 16 > wave_slots(shape.blocks);
  if constexpr (NORM != kNormProduce) {
    if (stream) {
      g_stream_launches.fetch_add(1, std::memory_order_relaxed);
      if (takes_tickets(w.dim(0) / 16, wave_slots(shape.blocks))) {
        launch_shape<SWIGLU, NORM, PAIRED, kTickets>(ctx, x, w, out, shape, na);
      } else {
        launch_shape<SWIGLU, NORM, PAIRED, kStride>(ctx, x, w, out, shape, na);
      }
      return;
    }
  }
  launch_shape<SWIGLU, NORM, PAIRED, kOneItem>(ctx, x, w, out, shape, na);
}

// The fused SwiGLU on either gate|up layout: Q4_KT (half tiles) or Q4_KTS (paired whole tiles).
template <int NORM = kNormNone>
void launch_swiglu(const ops::Context& ctx, const Tensor& x, const Tensor& w, const GemvOut& out, Q4ktShape shape,
                   const NormArgs& na = {}) {
  if (w.dtype() == DType::Q4_KTS)
    launch_for<true, NORM, true>(ctx, x, w, out, shape, na);
  else
    launch_for<true, NORM>(ctx, x, w, out, shape, na);
}

// The consumer's NormArgs for the deferred norm `in`; sums_in set where the producer wrote sums16.
NormArgs consume_args(const ops::DeferredNorm& in) {
  NormArgs na{};
  na.ss_in = in.ss.ptr<unsigned long long>();
  na.inv_d = 1.0f / static_cast<float>(in.u.cols());
  na.eps = in.eps;
  const bool sums = in.sums_written && in.sums16.data() != nullptr && in.sums16.dtype() == DType::F16 &&
                    in.sums16.ndim() == 2 && in.sums16.rows() == in.u.rows() && in.u.cols() % 256 == 0 &&
                    in.sums16.cols() == in.u.cols() / 8 && is_aligned(in.sums16.data(), 16);
  na.sums_in = sums ? in.sums16.ptr<__half>() : nullptr;
  return na;
}

// VI_DEFER_SUMS=0: producers write no sums16, so consumers run the mins' 16 mmas (A/B runs).
bool sums_on() {
  static const bool on = env_switch_on("VI_DEFER_SUMS");
  return on;
}

}  // namespace

Tensor q4kt_from_q4kr(ops::Context& ctx, const Tensor& w) {
  return repack_q4kr_tiles(ctx, w, DType::Q4_KT, q4kt_from_q4kr_kernel<false>);
}

Tensor q4kts_from_q4kr(ops::Context& ctx, const Tensor& w) {
  VI_CHECK(w.ndim() == 2 && w.dim(0) % 16 == 0, "Q4_KTS from Q4_KR: needs a stacked gate|up [2F, K] with F % 8 == 0, "
           "got {}", w.shape_str());
  return repack_q4kr_tiles(ctx, w, DType::Q4_KTS, q4kt_from_q4kr_kernel<true>);
}

std::string gemv_q4kt_shape_name(Q4ktShape s) {
  return fmt::format("tiled, 2 ahead{}, {} blocks/SM{}", s.pair ? ", in pairs" : "", s.blocks,
                     s.stream ? ", streaming" : "");
}

bool gemv_q4kt_stream_default(int64_t T) {
  // Measured on the H200 (docs/notes/gemv.md run 40): at T = 1 every streamed GEMV of the 27B
  // round is shorter (0.15 ms a round at 8K); at T = 4 the fused gate|up is 63 us a round slower
  // and the rest gain about as much as the kernels after them lose.
  static const int env = env_switch_forced("VI_Q4KT_STREAM");
  const int o = g_stream_override.load(std::memory_order_relaxed);
  const int mode = o >= 0 ? o : env;
  return mode < 0 ? T == 1 : mode == 1;
}
void set_q4kt_stream_default(int on) { g_stream_override.store(on, std::memory_order_relaxed); }
uint64_t gemv_q4kt_streaming_launches() { return g_stream_launches.load(std::memory_order_relaxed); }
bool gemv_q4kt_tickets_default() {
  // On unless switched off: the gate|up stack ~20 us a round shorter on the H100; with the
  // producer's halves 0.07-0.09 ms off the 8K round on the H100 and the H200 (docs/notes/gemv.md
  // run 42).
  static const int env = env_switch_forced("VI_Q4KT_TICKETS");
  const int o = g_tickets_override.load(std::memory_order_relaxed);
  return (o >= 0 ? o : env) != 0;
}
void set_q4kt_tickets_default(int on) { g_tickets_override.store(on, std::memory_order_relaxed); }
uint64_t gemv_q4kt_ticket_launches() { return g_ticket_launches.load(std::memory_order_relaxed); }

int64_t gemv_q4kt_halved_tiles(int64_t N, int64_t K, int blocks) {
  // On unless switched off: with the streaming launches' tickets, 0.07-0.09 ms off the 8K round on
  // the H100 and the H200, 0.09-0.13 ms at 128K on the H200 (docs/notes/gemv.md runs 41 and 42).
  static const int env = env_switch_forced("VI_Q4KT_HALVES");
  const int o = g_halves_override.load(std::memory_order_relaxed);
  if ((o >= 0 ? o : env) == 0) return 0;
  // Whole tiles fill blocks - 1 slots of every SM; the tiles past them are halved so that their
  // halves take one more slot on as many SMs, not a whole tile on fewer (320 tiles on 132 SMs at
  // 3 a SM: 2 whole tiles and a half on 112 SMs, 2 on 20, instead of 3 on 56 and 2 on 76). Halves
  // of at least 4 super-blocks, so every warp has one.
  const int64_t sms = current_device().sm_count, tiles = N / 16, n_sb = K / kQKK;
  if (blocks < 2 || n_sb < 8 || tiles > blocks * sms || tiles <= (blocks - 1) * sms) return 0;
  const int64_t halved = tiles - (blocks - 1) * sms;
  return tiles + halved <= blocks * sms ? halved : 0;
}
void set_q4kt_halves_default(int on) { g_halves_override.store(on, std::memory_order_relaxed); }
uint64_t gemv_q4kt_halved_launches() { return g_halved_launches.load(std::memory_order_relaxed); }

int gemv_q4kt_default_blocks(int64_t N) {
  // 3 blocks a SM where the tiles fit one wave of them, which spreads a one-wave matrix over more
  // SMs (on the H200, 320 tiles: FFN down 17.0 us against 21.1 at 4, docs/notes/gemv.md run 18);
  // 4 where they do not: the multi-wave matrices (gate|up 33.2 us against 35.2, the head 204
  // against 226), and a 5120-row matrix on fewer than 107 SMs, where 3 a SM would leave tiles for
  // a second wave (on 94 SMs of an H100: FFN down 21.4 us at 4 against 30.6 at 3, run 46).
  return N / 16 <= 3 * int64_t(current_device().sm_count) ? 3 : 4;
}

Q4ktShape gemv_q4kt_default_shape(int64_t N, int64_t T) {
  return Q4ktShape{gemv_q4kt_default_blocks(N), false, gemv_q4kt_stream_default(T)};
}

Q4ktShape gemv_q4kt_swiglu_default_shape(int64_t N, int64_t T) {
  static const bool pair = env_switch_on("VI_Q4KT_PAIR");
  static const int blocks = [] {  // VI_Q4KT_SWIGLU_BLOCKS: 3 or 4 (the compiled counts); unset: the default
    const char* v = std::getenv("VI_Q4KT_SWIGLU_BLOCKS");
    if (v == nullptr || *v == 0) return 0;
    VI_CHECK(std::strcmp(v, "3") == 0 || std::strcmp(v, "4") == 0, "VI_Q4KT_SWIGLU_BLOCKS={}: give 3 or 4", v);
    return std::atoi(v);
  }();
  return Q4ktShape{blocks ? blocks : gemv_q4kt_default_shape(N).blocks, pair, gemv_q4kt_stream_default(T)};
}

std::vector<Q4ktShape> gemv_q4kt_shapes() {
  return {{3, false}, {4, false}, {3, true}, {4, true}, {3, false, true}, {4, false, true}, {3, true, true},
          {4, true, true}};
}

namespace {
// Everything gemv_q4kt's kernels need of a call but the weight's dtype.
bool q4kt_call_ok(const ops::Context& ctx, const Tensor& x, const Tensor& w) {
  if (!sm80_code(ctx)) return false;
  if (x.dtype() != DType::F16 || x.rows() < 1 || x.rows() > 8) return false;
  return w.dim(1) < (int64_t(1) << 31) && is_aligned(w.data(), 16) && is_aligned(x.data(), 16) &&
         (x.cols() * 2) % 16 == 0;
}
}  // namespace

bool gemv_q4kt_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w) {
  return w.dtype() == DType::Q4_KT && q4kt_call_ok(ctx, x, w);
}

void gemv_q4kt(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, Q4ktShape shape) {
  launch_for<false>(ctx, x, w, gemv_out_whole(y, w.dim(0)),
                    shape.blocks == 0 ? gemv_q4kt_default_shape(w.dim(0), x.rows()) : shape);
}

bool gemv_q4kt_split_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w,
                              const std::vector<Tensor*>& parts) {
  if (!gemv_q4kt_supports(ctx, x, w) || parts.empty() || parts.size() > ops::kSplitMaxParts) return false;
  return std::all_of(parts.begin(), parts.end(),
                     [](const Tensor* p) { return p->dim(1) % kTiledRows == 0 && p->dim(1) > 0; });
}

void gemv_q4kt_split(const ops::Context& ctx, const Tensor& x, const Tensor& w, const std::vector<Tensor*>& parts) {
  launch_for<false>(ctx, x, w, gemv_out_parts(parts, w.dim(0), x.rows(), "gemv_q4kt_split"),
                    gemv_q4kt_default_shape(w.dim(0), x.rows()));
}

bool gemv_q4kt_swiglu_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w) {
  const bool layout =
      (w.dtype() == DType::Q4_KT && w.dim(0) % 32 == 0) || (w.dtype() == DType::Q4_KTS && w.dim(0) % 16 == 0);
  return layout && q4kt_call_ok(ctx, x, w);
}

void gemv_q4kt_swiglu(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h, Q4ktShape shape) {
  const int64_t rows_mult = w.dtype() == DType::Q4_KTS ? 16 : 32;  // whole tiles of pairs, or of each half
  VI_CHECK(w.dim(0) % rows_mult == 0 && h.cols() * 2 == w.dim(0) && h.rows() == x.rows(),
           "gemv_q4kt_swiglu: h [{}, {}] does not match x rows {} and a {} gate|up weight of {} rows "
           "(a multiple of {})",
           h.rows(), h.cols(), x.rows(), dtype_name(w.dtype()), w.dim(0), rows_mult);
  launch_swiglu(ctx, x, w, gemv_out_whole(h, w.dim(0) / 2),
                shape.blocks == 0 ? gemv_q4kt_swiglu_default_shape(w.dim(0), x.rows()) : shape);
}

bool gemv_q4kt_add_deferred_norm_supports(const ops::Context& ctx, const Tensor& a, const Tensor& w, const Tensor& x) {
  return gemv_q4kt_supports(ctx, a, w) && x.dtype() == DType::F16 && x.ndim() == 2 && x.rows() == a.rows() &&
         x.cols() == w.dim(0) && w.dim(0) % 16 == 0 && is_aligned(x.data(), 16);
}

void gemv_q4kt_add_deferred_norm(const ops::Context& ctx, const Tensor& a, const Tensor& w, Tensor& x,
                                 const Tensor& norm_w, float w_offset, ops::DeferredNorm& out) {
  NormArgs na{};
  na.x = x.ptr<__half>();
  na.w = norm_w.ptr<float>();
  na.w_offset = w_offset;
  na.u = out.u.ptr<__half>();
  na.ss = out.ss.ptr<unsigned long long>();
  const Tensor& s16 = out.sums16;
  const bool sums = sums_on() && s16.data() != nullptr && s16.dtype() == DType::F16 && s16.ndim() == 2 &&
                    s16.rows() == a.rows() && w.dim(0) % 256 == 0 && s16.cols() == w.dim(0) / 8 &&
                    is_aligned(s16.data(), 4);
  na.sums = sums ? s16.ptr<__half>() : nullptr;
  const Q4ktShape shape = gemv_q4kt_default_shape(w.dim(0), a.rows());
  const int64_t halved = gemv_q4kt_halved_tiles(w.dim(0), w.dim(1), shape.blocks);
  na.split_from = w.dim(0) / 16 - halved;
  if (halved > 0) {
    na.part_sums = static_cast<float*>(
        thread_workspace(ctx, WorkspaceSlot::kGemvHalfSums, static_cast<size_t>(halved) * 2 * 128 * sizeof(float)));
    na.part_counts = static_cast<unsigned*>(
        thread_workspace_zeroed(ctx, WorkspaceSlot::kGemvHalfCounts, static_cast<size_t>(halved) * sizeof(unsigned)));
    g_halved_launches.fetch_add(1, std::memory_order_relaxed);
  }
  launch_for<false, kNormProduce>(ctx, a, w, GemvOut{}, shape, na);
  out.sums_written = sums;
}

bool gemv_q4kt_deferred_supports(const ops::Context& ctx, const ops::DeferredNorm& in, const Tensor& w,
                                 ops::DeferredConsumer kind, const std::vector<Tensor*>& parts) {
  // The totals are staged in 16-byte copies (ss rows of kSsWords u64, 16-byte aligned).
  if (kind == ops::DeferredConsumer::kSwiglu) {
    if (!gemv_q4kt_swiglu_supports(ctx, in.u, w)) return false;
  } else if (!gemv_q4kt_supports(ctx, in.u, w)) {
    return false;
  }
  if (w.dim(1) != in.u.cols()) return false;
  if (in.ss.cols() != kSsWords || !is_aligned(in.ss.data(), 16)) return false;
  switch (kind) {
    case ops::DeferredConsumer::kMatmul: return true;
    case ops::DeferredConsumer::kSwiglu: return true;
    case ops::DeferredConsumer::kSplit: return parts.empty() || gemv_q4kt_split_supports(ctx, in.u, w, parts);
  }
  return false;
}

void gemv_q4kt_deferred(const ops::Context& ctx, const ops::DeferredNorm& in, const Tensor& w,
                        ops::DeferredConsumer kind, const std::vector<Tensor*>& outs) {
  const NormArgs na = consume_args(in);
  const int64_t T = in.u.rows();
  if (kind == ops::DeferredConsumer::kSwiglu)
    VI_CHECK(outs.at(0)->cols() * 2 == w.dim(0) && outs.at(0)->rows() == in.u.rows(),
             "gemv_q4kt_deferred: h [{}, {}] for a gate|up weight of {} rows and {} tokens", outs.at(0)->rows(),
             outs.at(0)->cols(), w.dim(0), in.u.rows());
  // VI_Q4KT_TMA=n: the copy-engine kernel where it takes the call (gemv_q4kt_tma.cuh).
  if (gemv_q4kt_tma_route(kind == ops::DeferredConsumer::kSwiglu) != nullptr &&
      gemv_q4kt_tma_consume(ctx, in.u, w, kind == ops::DeferredConsumer::kSwiglu, outs, na.ss_in, na.inv_d, na.eps,
                            na.sums_in))
    return;
  auto run = [&](auto swiglu, const GemvOut& out) {
    constexpr bool kSwiglu = decltype(swiglu)::value;
    if (na.sums_in != nullptr) {
      if constexpr (kSwiglu)
        launch_swiglu<kNormConsumeSums>(ctx, in.u, w, out, gemv_q4kt_swiglu_default_shape(w.dim(0), T), na);
      else
        launch_for<false, kNormConsumeSums>(ctx, in.u, w, out, gemv_q4kt_default_shape(w.dim(0), T), na);
    } else if constexpr (kSwiglu) {
      launch_swiglu<kNormConsume>(ctx, in.u, w, out, gemv_q4kt_swiglu_default_shape(w.dim(0), T), na);
    } else {
      launch_for<false, kNormConsume>(ctx, in.u, w, out, gemv_q4kt_default_shape(w.dim(0), T), na);
    }
  };
  switch (kind) {
    case ops::DeferredConsumer::kMatmul:
      run(std::false_type{}, gemv_out_whole(*outs.at(0), w.dim(0)));
      break;
    case ops::DeferredConsumer::kSplit:
      run(std::false_type{}, gemv_out_parts(outs, w.dim(0), in.u.rows(), "gemv_q4kt_deferred"));
      break;
    case ops::DeferredConsumer::kSwiglu:
      run(std::true_type{}, gemv_out_whole(*outs.at(0), w.dim(0) / 2));
      return;
  }
}

}  // namespace vi::cuda
