// One warp's walk over its super-blocks of a Q4_KT tile with the weights in shared memory
// (sm_90): the register walk's (q4kt_walk.cuh) super-blocks, loads and arithmetic in the same
// order, so the same sums bit for bit, with each unit brought in by the copy engine into a ring
// of SLOTS shared-memory slots of the warp's own instead of into registers.
//
// Why: the register walk keeps two super-blocks ahead, but every weight load of a warp is
// tracked on one scoreboard and a wait on it waits for all of them (docs/notes/gemv.md run 21).
// Here each slot has its own mbarrier, a warp waits for the one slot it multiplies next while
// the others stay in flight, and no registers are held for them, so more warps fit per SM.
// Measured (run 30): that occupancy pays on matrices of many waves of blocks (34816 x 5120: 30.9
// against 33.5 us at 5 blocks per SM); on the one-wave 5120-row matrices the wait, the shared
// loads and lane 0's refill per super-block cost more than the scoreboard (+15-25%) at 4 warps a
// tile. The ring's ~80 registers also let 8 warps share a tile there in one wave (3 blocks of
// 256 threads per SM), each with half the super-blocks.
//
// Lane 0 initialises the warp's SLOTS barriers and issues its first SLOTS units before the
// kernel's PDL wait (weights are no kernel's output), then refills slot s with unit i + SLOTS
// once the warp has multiplied unit i: one bulk copy of the whole 2368-byte unit.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include <algorithm>

#include "backends/cuda/bulk_copy.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/q4kr_mma.cuh"
#include "core/dtype.h"

namespace vi::cuda {

// Shared memory of `warps` warps' rings of `slots` units.
constexpr int q4kt_ring_bytes(int warps, int slots) { return warps * slots * static_cast<int>(kQ4ktUnitBytes); }

// WARPS: the warps that split a tile's super-blocks (4 as in the register walk, or 8: each warp
// then takes every eighth super-block, so the sums differ from the 4-warp walk's in order).
template <int SLOTS, int WARPS = 4>
struct Q4ktRingWalk {
  static constexpr int kSlotBytes = static_cast<int>(kQ4ktUnitBytes);
  static constexpr size_t kStep = WARPS * kQ4ktUnitBytes;  // to the warp's next super-block of the tile
  static constexpr int kXStep = 256 * WARPS;                // activations between them
  static_assert(SLOTS >= 2, "at least two slots");

  const uint8_t* a;   // the unit of the warp's first super-block
  uint8_t* ring;      // the warp's SLOTS x kSlotBytes of shared memory, 16-byte aligned
  uint64_t* bar;      // the warp's SLOTS barriers
  const __half* xs;   // token g's activations at the warp's first super-block, lane's sub-block
  int n_mine;         // super-blocks the warp multiplies
  uint64_t policy;    // lane 0's L2 policy for the copies (evict first)

  // Warp `wt` (0..WARPS-1) of a tile whose first unit is `tile`: super-blocks wt, wt + WARPS, ...
  // x: [n_tok, K] f16. ring, bar: this warp's own.
  __device__ __forceinline__ Q4ktRingWalk(const uint8_t* tile, const __half* x, int n_tok, int n_sb, int64_t K,
                                          int wt, uint8_t* ring_, uint64_t* bar_)
      : ring(ring_), bar(bar_) {
    const int lane = threadIdx.x & 31, g = lane >> 2;
    xs = x + static_cast<int64_t>(min(g, n_tok - 1)) * K + 256 * wt + 32 * (lane & 3);
    n_mine = wt < n_sb ? (n_sb - wt + WARPS - 1) / WARPS : 0;
    a = tile + static_cast<size_t>(wt) * kQ4ktUnitBytes;
  }

#ifdef VI_BULK_COPY
  // Lane 0: unit i of this warp into slot i % SLOTS.
  __device__ __forceinline__ void issue(int i) {
    const int s = i % SLOTS;
    mbar_expect_tx(&bar[s], kSlotBytes);
    bulk_copy_hint(ring + s * kSlotBytes, a + static_cast<size_t>(i) * kStep, kSlotBytes, &bar[s], policy);
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

  // Every super-block of the warp multiplied into acc, as Q4ktTileWalk::run does (rows g:
  // acc[0..1], g + 8: acc[2..3]).
  __device__ __forceinline__ void run(uint32_t magic, float acc[4]) {
#ifdef VI_BULK_COPY
    const int lane = threadIdx.x & 31, g = lane >> 2;
    for (int i = 0; i < n_mine; ++i) {
      const int s = i % SLOTS;
      mbar_wait(&bar[s], static_cast<uint32_t>(i / SLOTS) & 1u);
      const uint8_t* slot = ring + s * kSlotBytes;
      auto q = [&](int off) { return *reinterpret_cast<const uint4*>(slot + off + 16 * lane); };
      HalfSb h0, h1;
      h0.q[0] = q(0);
      h0.q[1] = q(512);
      h1.q[0] = q(1024);
      h1.q[1] = q(1536);
      const uint2 sw = *reinterpret_cast<const uint2*>(slot + 2048 + 8 * lane);
      const uint2 dd = *reinterpret_cast<const uint2*>(slot + 2304 + 8 * g);
      float t[4], u[4];
      mma_half<true>(h0, sw.x, sw.y, sw.x, sw.y, xs + kXStep * i, 0x4040u, 0x4141u, magic, t, u);
      mma_half<false>(h1, sw.x, sw.y, sw.x, sw.y, xs + kXStep * i + 128, 0x4242u, 0x4343u, magic, t, u);
      const uint32_t dm[2] = {dd.x, dd.y};
      apply_scales(dm, t, u, acc);
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

// Host: a ring kernel's dynamic shared memory (above 48 KB it must be allowed per kernel) and a
// carveout that fits `minb` blocks per SM, so the rest of the SM's 256 KB stays L1, which holds
// the activations every warp reads again. Call once per kernel, before its first launch.
template <class Kernel>
void prepare_ring_kernel(Kernel* kernel, size_t smem, int minb) {
  VI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaFuncAttributes attr{};
  VI_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  const size_t per_sm = current_device().smem_per_sm;
  const size_t want = static_cast<size_t>(minb) * (smem + attr.sharedSizeBytes + 1024);
  const int percent = per_sm == 0 ? 100 : static_cast<int>(std::min<size_t>(100, (want * 100 + per_sm - 1) / per_sm));
  VI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent));
}

}  // namespace vi::cuda
