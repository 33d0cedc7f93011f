// One block's walk over its Q4_KT tile with the weights in shared memory (gemv_q4kt.cu, sm_90):
// the tile walk of q4kt_walk.cuh (the same warps, super-blocks, loads and arithmetic in the
// same order, so the same outputs bit for bit) with each warp's units brought in by the copy
// engine into a ring of SLOTS shared-memory slots of its own instead of into registers.
//
// Why (docs/notes/gemv.md run 21): the register walk keeps two super-blocks ahead, but every
// weight load of a warp is tracked on one scoreboard, and a wait on it waits for all of them:
// the first use of buffer j + 1 also waits for the refill of buffer j that went out just before,
// so a warp pays about one full load latency per super-block. Here each slot has its own
// mbarrier, a warp waits for the one slot it multiplies next while the other SLOTS - 1 stay in
// flight, and no registers are held for them (so more blocks fit per SM).
//
// Per warp: lane 0 initialises the warp's SLOTS barriers and issues its first SLOTS units before
// the kernel's PDL wait (weights are no kernel's output), then refills slot s with unit i + SLOTS
// once the warp has multiplied unit i. A plain slot is the whole 2368-byte unit (one bulk copy).
// SWIGLU (block b: half b % 2 of gate tile b / 2 and of its up tile, see q4kt_walk.cuh): a slot
// holds the block's two 512-byte quant runs of the gate unit and its 320 bytes of scale words
// and (d, dmin) (both halves' words: a 16-byte multiple the copy engine can move; the other
// half's words are read by the neighbour block, which runs at the same time and finds them in
// L2), then the same of the up unit: 2688 bytes in six copies.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/bulk_copy.cuh"
#include "backends/cuda/q4kr_mma.cuh"
#include "core/dtype.h"

namespace vi::cuda {

// Shared-memory bytes of one warp's slot.
template <bool SWIGLU>
constexpr int q4kt_ring_slot_bytes() {
  return SWIGLU ? 2 * (1024 + 320) : static_cast<int>(kQ4ktUnitBytes);
}

// XAHEAD: each super-block's activations are loaded while the one before is multiplied (32 more
// registers), not at the start of its own multiply.
template <bool SWIGLU, int SLOTS, bool XAHEAD = false>
struct Q4ktRingWalk {
  static constexpr int kSlotBytes = q4kt_ring_slot_bytes<SWIGLU>();
  static constexpr size_t kStep = 4 * kQ4ktUnitBytes;  // to the warp's next super-block
  static_assert(kSlotBytes % 16 == 0 && SLOTS >= 2, "slots of whole 16-byte copies, at least two");

  const uint8_t *a, *b;  // unit of the warp's first super-block: row g's tile (a), row g + 8's (b)
  uint8_t* ring;         // this warp's SLOTS x kSlotBytes, 16-byte aligned
  uint64_t* bar;         // this warp's SLOTS barriers
  const __half* xs;      // as Q4ktTileWalk's
  int n_mine, half;
  uint64_t policy;  // lane 0's L2 policy for the copies (evict first)

  // ring_all: 4 x SLOTS x kSlotBytes of shared memory for the block; bars_all: 4 x SLOTS.
  __device__ __forceinline__ Q4ktRingWalk(const uint8_t* w, const __half* x, int n_tok, int64_t N, int n_sb,
                                          int64_t K, int64_t blk, uint8_t* ring_all, uint64_t* bars_all) {
    const int lane = threadIdx.x & 31, g = lane >> 2;
    const int warp = threadIdx.x >> 5;
    xs = x + static_cast<int64_t>(min(g, n_tok - 1)) * K + 256 * warp + 32 * (lane & 3);
    n_mine = warp < n_sb ? (n_sb - warp + 3) / 4 : 0;
    half = SWIGLU ? static_cast<int>(blk & 1) : 0;
    const int64_t tile = SWIGLU ? blk / 2 : blk;
    a = w + (tile * n_sb + warp) * kQ4ktUnitBytes;
    b = SWIGLU ? a + (N / 32) * int64_t(n_sb) * kQ4ktUnitBytes : a;
    ring = ring_all + static_cast<size_t>(warp) * SLOTS * kSlotBytes;
    bar = bars_all + warp * SLOTS;
  }

#ifdef VI_BULK_COPY
  // Lane 0: unit i of this warp into slot i % SLOTS.
  __device__ __forceinline__ void issue(int i) {
    const int s = i % SLOTS;
    uint8_t* dst = ring + s * kSlotBytes;
    const size_t off = static_cast<size_t>(i) * kStep;
    mbar_expect_tx(&bar[s], kSlotBytes);
    if constexpr (SWIGLU) {
      const uint8_t* src[2] = {a + off, b + off};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        uint8_t* d = dst + r * (1024 + 320);
        bulk_copy_hint(d, src[r] + 512 * half, 512, &bar[s], policy);
        bulk_copy_hint(d + 512, src[r] + 1024 + 512 * half, 512, &bar[s], policy);
        bulk_copy_hint(d + 1024, src[r] + 2048, 320, &bar[s], policy);
      }
    } else {
      bulk_copy_hint(dst, a + off, kSlotBytes, &bar[s], policy);
    }
  }
#endif

  // The warp's barriers and its first SLOTS units (every lane calls it; lane 0 works).
  __device__ __forceinline__ void start() {
#ifdef VI_BULK_COPY
    if ((threadIdx.x & 31) == 0) {
      policy = l2_evict_first_policy();
      for (int s = 0; s < SLOTS; ++s) mbar_init(&bar[s], 1);
      mbar_init_fence();
      for (int i = 0; i < SLOTS && i < n_mine; ++i) issue(i);
    }
    __syncwarp();
#else
    __trap();
#endif
  }

  // Every super-block of the warp multiplied into acc, as Q4ktTileWalk::run does.
  __device__ __forceinline__ void run(uint32_t magic, float acc[4]) {
#ifdef VI_BULK_COPY
    const int lane = threadIdx.x & 31, g = lane >> 2;
    uint4 xv[2][4];  // XAHEAD: the activations of the super-block multiplied next, both halves
    if constexpr (XAHEAD) {
      if (n_mine > 0) {
        load_x_half(xs, xv[0]);
        load_x_half(xs + 128, xv[1]);
      }
    }
    for (int i = 0; i < n_mine; ++i) {
      const int s = i % SLOTS;
      uint4 xn[2][4];
      if constexpr (XAHEAD) {
        if (i + 1 < n_mine) {
          load_x_half(xs + 1024 * (i + 1), xn[0]);
          load_x_half(xs + 1024 * (i + 1) + 128, xn[1]);
        }
      }
      mbar_wait(&bar[s], static_cast<uint32_t>(i / SLOTS) & 1u);
      const uint8_t* slot = ring + s * kSlotBytes;
      HalfSb h0, h1;
      uint2 sw, dd;
      auto q = [&](int off) { return *reinterpret_cast<const uint4*>(slot + off + 16 * lane); };
      if constexpr (SWIGLU) {
        constexpr int kUp = 1024 + 320;
        h0.q[0] = q(0);
        h0.q[1] = q(kUp);
        h1.q[0] = q(512);
        h1.q[1] = q(kUp + 512);
        auto u32 = [&](int off) { return *reinterpret_cast<const uint32_t*>(slot + off); };
        sw = make_uint2(u32(1024 + 8 * lane + 4 * half), u32(kUp + 1024 + 8 * lane + 4 * half));
        dd = make_uint2(u32(1024 + 256 + 8 * g + 4 * half), u32(kUp + 1024 + 256 + 8 * g + 4 * half));
      } else {
        h0.q[0] = q(0);
        h0.q[1] = q(512);
        h1.q[0] = q(1024);
        h1.q[1] = q(1536);
        sw = *reinterpret_cast<const uint2*>(slot + 2048 + 8 * lane);
        dd = *reinterpret_cast<const uint2*>(slot + 2304 + 8 * g);
      }
      float t[4], u[4];
      if constexpr (XAHEAD) {
        mma_half_x<true>(h0, sw.x, sw.y, sw.x, sw.y, xv[0], 0x4040u, 0x4141u, magic, t, u);
        mma_half_x<false>(h1, sw.x, sw.y, sw.x, sw.y, xv[1], 0x4242u, 0x4343u, magic, t, u);
      } else {
        mma_half<true>(h0, sw.x, sw.y, sw.x, sw.y, xs + 1024 * i, 0x4040u, 0x4141u, magic, t, u);
        mma_half<false>(h1, sw.x, sw.y, sw.x, sw.y, xs + 1024 * i + 128, 0x4242u, 0x4343u, magic, t, u);
      }
      const uint32_t dm[2] = {dd.x, dd.y};
      apply_scales(dm, t, u, acc);
      if constexpr (XAHEAD) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int k = 0; k < 4; ++k) xv[h][k] = xn[h][k];
      }
      // Every lane's reads of slot s are done (their values went into the mmas above): refill it.
      __syncwarp();
      if (lane == 0 && i + SLOTS < n_mine) {
        fence_proxy_async_shared();
        issue(i + SLOTS);
      }
    }
#else
    (void)magic, (void)acc;
    __trap();
#endif
  }
};

}  // namespace vi::cuda
