// One block's walk over its Q4_KT tile in the tensor-core decode GEMV (gemv_q4kt.cu): where each
// warp's loads start, the super-blocks loaded ahead, and the multiply of every super-block the
// warp owns, apart from the kernel's PDL wait and its end (so a kernel with another end walks
// its tiles with the same loads and arithmetic, in the same order).
//
// A block of 4 warps per 16-row tile. Warp w takes the tile's super-blocks w,
// w + 4, ...: units one fixed distance apart, so every load is a pointer plus an immediate. Two
// of them stay loaded ahead; a buffer is refilled right after it is multiplied. start() issues
// the first two loads (before pdl_wait: weights are no kernel's output), run() the rest.
// SWIGLU: w is a stacked gate|up [2F, K] and y the SwiGLU output h [T, F]; block b takes gate
// rows 8b .. 8b + 7 as its rows g and the matching up rows F + 8b .. as its rows g + 8, as the
// Q4_KR kernel does (so h equals its h bit for bit): half b % 2 of gate tile b / 2 and of up
// tile F / 16 + b / 2, i.e. loads k = b % 2 and 2 + b % 2 of each unit (still 512 contiguous
// bytes per warp-wide load) and one scale word and one (d, dmin) of each.
// XSUM: the mins' term of each super-block from the activations' sums (mins_from_sums, two
// mmas) instead of 16 mmas over the activations; t's products and order are unchanged.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/q4kr_mma.cuh"
#include "core/dtype.h"

namespace vi::cuda {

// PAIR: the warp's super-blocks multiplied two at a time with their mma steps interleaved
// (mma_half_pair), the refills after both; the same sums bit for bit.
template <bool SWIGLU, bool PAIR = false, bool XSUM = false>
struct Q4ktTileWalk {
  static constexpr int kDepth = 2;
  static constexpr size_t kStep = 4 * kQ4ktUnitBytes;  // to the warp's next super-block
  struct Sb {
    HalfSb h[2];
    uint2 sw, dd;
  };

  // Row g's bytes from unit pointer a, row g + 8's from b (the same unit unless SWIGLU).
  const uint8_t *pqa, *pqb;  // quants: loads half, 2 + half of row g's unit
  const uint8_t *psa, *psb;  // scale and min word(s)
  const uint8_t *pda, *pdb;  // (d, dmin)
  const __half* xs;          // token g's activations at this warp's first super-block, lane's sub-block
  const __half* ps;          // XSUM: token g's sums of the activations at this warp's first super-block
  int n_mine;                // super-blocks this warp multiplies
  Sb buf[kDepth];

  // w: Q4_KT [N, K] (SWIGLU: gate|up [2F, K]); x: [n_tok, K] f16; blk: the block's work
  // index (blockIdx.x of a one-GEMV launch): its tile, or with SWIGLU its half tile. sums
  // (XSUM): [n_tok, K / 8] f16, x's sums as ops::DeferredNorm::sums16 lays them out.
  __device__ __forceinline__ Q4ktTileWalk(const uint8_t* w, const __half* x, int n_tok, int64_t N, int n_sb,
                                          int64_t K, int64_t blk, const __half* sums = nullptr) {
    const int lane = threadIdx.x & 31, g = lane >> 2;
    const int warp = threadIdx.x >> 5;
    xs = x + static_cast<int64_t>(min(g, n_tok - 1)) * K + 256 * warp + 32 * (lane & 3);
    ps = XSUM ? sums + static_cast<int64_t>(min(g, n_tok - 1)) * (K / 8) + 32 * warp : nullptr;
    n_mine = warp < n_sb ? (n_sb - warp + 3) / 4 : 0;
    const int half = SWIGLU ? static_cast<int>(blk & 1) : 0;
    const int64_t tile = SWIGLU ? blk / 2 : blk;
    const uint8_t* a = w + (tile * n_sb + warp) * kQ4ktUnitBytes;
    const uint8_t* b = SWIGLU ? a + (N / 32) * int64_t(n_sb) * kQ4ktUnitBytes : a;
    pqa = a + 512 * half + 16 * lane;
    pqb = b + 512 * (SWIGLU ? half : 1) + 16 * lane;
    psa = a + 2048 + 8 * lane + 4 * half;
    psb = b + 2048 + 8 * lane + 4 * half + (SWIGLU ? 0 : 4);
    pda = a + 2304 + 8 * g + 4 * half;
    pdb = b + 2304 + 8 * g + 4 * half + (SWIGLU ? 0 : 4);
  }

  // Only super-blocks sb0 .. sb0 + len - 1 of the tile (a part of a tile split by K, the deferred
  // norm producer's, gemv_q4kt.cu): warp w takes sb0 + w, sb0 + w + 4, ... Called before start().
  __device__ __forceinline__ void take_part(int sb0, int len) {
    const int warp = threadIdx.x >> 5;
    n_mine = warp < len ? (len - warp + 3) / 4 : 0;
    shift(static_cast<size_t>(sb0) * kQ4ktUnitBytes, 256 * sb0);
  }

  __device__ __forceinline__ void load_sb(int d, Sb& s) const {
    const size_t off = static_cast<size_t>(d) * kStep;
    s.h[0].q[0] = __ldcs(reinterpret_cast<const uint4*>(pqa + off));
    s.h[0].q[1] = __ldcs(reinterpret_cast<const uint4*>(pqb + off));
    s.h[1].q[0] = __ldcs(reinterpret_cast<const uint4*>(pqa + off + 1024));
    s.h[1].q[1] = __ldcs(reinterpret_cast<const uint4*>(pqb + off + 1024));
    if constexpr (SWIGLU) {
      s.sw = make_uint2(__ldcs(reinterpret_cast<const uint32_t*>(psa + off)),
                        __ldcs(reinterpret_cast<const uint32_t*>(psb + off)));
      s.dd = make_uint2(__ldcs(reinterpret_cast<const uint32_t*>(pda + off)),
                        __ldcs(reinterpret_cast<const uint32_t*>(pdb + off)));
    } else {  // both rows' words side by side: one 8-byte load each
      s.sw = __ldcs(reinterpret_cast<const uint2*>(psa + off));
      s.dd = __ldcs(reinterpret_cast<const uint2*>(pda + off));
    }
  }

  // The first kDepth super-blocks' loads.
  __device__ __forceinline__ void start() {
#pragma unroll
    for (int j = 0; j < kDepth; ++j)
      if (j < n_mine) load_sb(j, buf[j]);
  }

  // Every super-block of the warp multiplied into acc (rows g: acc[0..1], g + 8: acc[2..3]).
  __device__ __forceinline__ void run(uint32_t magic, float acc[4]) {
    if constexpr (PAIR)
      run_pairs(magic, acc);
    else
      run_singles(magic, acc);
  }

  // One super-block at a time, each buffer refilled right after it is multiplied.
  __device__ __forceinline__ void run_singles(uint32_t magic, float acc[4]) {
    for (int i0 = 0; i0 < n_mine; i0 += kDepth) {
#pragma unroll
      for (int j = 0; j < kDepth; ++j) {
        if (i0 + j < n_mine) {
          multiply(buf[j], xs + 1024 * j, XSUM ? ps + 128 * j : nullptr, magic, acc);
          if (i0 + j + kDepth < n_mine) load_sb(j + kDepth, buf[j]);
        }
      }
      advance(kDepth);
    }
  }

  // Super-block s (its activations at x, XSUM: their sums at p) multiplied into acc. The word of
  // row g (.x) and g + 8 (.y) holds (sc, m) of sub-block c in bytes 0, 1 and of sub-block 4 + c
  // in bytes 2, 3.
  __device__ __forceinline__ void multiply(const Sb& s, const __half* x, const __half* p, uint32_t magic,
                                           float acc[4]) const {
    float t[4], u[4];
    if constexpr (XSUM) {
      const uint4 sums = load_sb_sums(p);  // used after both halves: its latency hides behind them
      mma_half<true, false>(s.h[0], s.sw.x, s.sw.y, s.sw.x, s.sw.y, x, 0x4040u, 0x4141u, magic, t, u);
      mma_half<false, false>(s.h[1], s.sw.x, s.sw.y, s.sw.x, s.sw.y, x + 128, 0x4242u, 0x4343u, magic, t, u);
      mins_from_sums(s.sw.x, s.sw.y, sums, u);
    } else {
      mma_half<true>(s.h[0], s.sw.x, s.sw.y, s.sw.x, s.sw.y, x, 0x4040u, 0x4141u, magic, t, u);
      mma_half<false>(s.h[1], s.sw.x, s.sw.y, s.sw.x, s.sw.y, x + 128, 0x4242u, 0x4343u, magic, t, u);
    }
    const uint32_t dd[2] = {s.dd.x, s.dd.y};
    apply_scales(dd, t, u, acc);
  }

  // The load and activation cursors n super-blocks of this warp on.
  __device__ __forceinline__ void advance(int n) { shift(n * kStep, n * 1024); }

  // Every load cursor `bytes` on, the activations' `vals` values on (their sums' vals / 8).
  __device__ __forceinline__ void shift(size_t bytes, int vals) {
    pqa += bytes;
    pqb += bytes;
    psa += bytes;
    psb += bytes;
    pda += bytes;
    pdb += bytes;
    xs += vals;
    if constexpr (XSUM) ps += vals / 8;
  }

  // Buffers 0 and 1 multiplied together while both hold a super-block, then both refilled (each
  // refill goes out one super-block later than in run_singles: the interleaved chains pay for it
  // on the wide matrices, not on the 5120-row ones, docs/notes/gemv.md run 31).
  __device__ __forceinline__ void run_pairs(uint32_t magic, float acc[4]) {
    static_assert(kDepth == 2, "pairs of the two buffers");
    for (int i0 = 0; i0 < n_mine; i0 += 2) {
      if (i0 + 1 < n_mine) {
        float t[2][4], u[2][4];
        const uint32_t sw[2][2] = {{buf[0].sw.x, buf[0].sw.y}, {buf[1].sw.x, buf[1].sw.y}};
        const HalfSb* h0[2] = {&buf[0].h[0], &buf[1].h[0]};
        const HalfSb* h1[2] = {&buf[0].h[1], &buf[1].h[1]};
        const __half* x0[2] = {xs, xs + 1024};
        const __half* x1[2] = {xs + 128, xs + 1024 + 128};
        if constexpr (XSUM) {
          const uint4 sums[2] = {load_sb_sums(ps), load_sb_sums(ps + 128)};
          mma_half_pair<true, false>(h0, sw, x0, 0x4040u, 0x4141u, magic, t, u);
          mma_half_pair<false, false>(h1, sw, x1, 0x4242u, 0x4343u, magic, t, u);
#pragma unroll
          for (int j = 0; j < 2; ++j) mins_from_sums(sw[j][0], sw[j][1], sums[j], u[j]);
        } else {
          mma_half_pair<true>(h0, sw, x0, 0x4040u, 0x4141u, magic, t, u);
          mma_half_pair<false>(h1, sw, x1, 0x4242u, 0x4343u, magic, t, u);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint32_t dd[2] = {buf[j].dd.x, buf[j].dd.y};
          apply_scales(dd, t[j], u[j], acc);
        }
        if (i0 + 2 < n_mine) load_sb(2, buf[0]);
        if (i0 + 3 < n_mine) load_sb(3, buf[1]);
      } else {
        multiply(buf[0], xs, ps, magic, acc);  // the odd last one
      }
      advance(2);
    }
  }
};

}  // namespace vi::cuda
