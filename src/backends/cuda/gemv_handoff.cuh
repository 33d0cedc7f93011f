// Hand-off between two decode kernels without a grid boundary: the kernel after a GEMV that
// counts its finished tiles starts on the parts of its input that are ready instead of waiting
// for the whole grid before it (pdl_wait), so its weight stream overlaps the first kernel's last
// partial wave and end (docs/notes/gemv.md, run 38). The receivers: the Q4_KT GEMVs
// (gemv_q4kt.cu) and the GDN conv step (gdn_conv_step.cu, which reads its few inputs from L2 by
// __ldcg instead of load_x_ordered).
//
// The producer grid writes an output column chunk's values, then every writing thread fences
// (__threadfence: its stores are in L2, the point of coherence) before the block barrier, and one
// thread adds 1 to the chunk's counter. The consumer, launched by PDL while the producer runs and
// never calling pdl_wait, reads a chunk's counter with a gpu-scope relaxed load (served by L2)
// ahead of time and, before it touches that chunk, spins until the counter reaches the number of
// blocks that write it; then it reads the chunk with ordered loads (load_x_ordered), which the
// compiler may not move above the spin and which go to L2 where the line is not in this SM's L1.
// No line of the chunk may be in that L1 from an older write of the same buffer. Where every
// grid that read the older contents finished before a later kernel was launched and waited
// (pdl_wait) on every SM, those lines are gone (what makes earlier grids' writes visible to a
// kernel's loads drops them). Where the older contents' last reader may run beside this grid
// (the consumer after a producer that took a hand-off itself: that producer starts while the
// SwiGLU before it still reads u), each warp's first wait ends with an acquire load
// (handoff_wait_acquire), which drops the SM's L1 lines: once any chunk is whole, every reader of
// the older contents has finished, so no such line comes back.
//
// Safe only where the receiver's other inputs are complete when it reads them and what it writes
// is no longer read by the grids it overlaps (gemv_q4kt.cu says how each receiver ensures both).
// Counters are zeroed per use (DeferredNorm::handoff is filled with the sums of squares) and never
// reset by the kernels. Without PDL the receiver simply runs after the writer: every counter is
// full at its first look. Likewise after any launch between them that does not go through
// pdl_launch (a library's kernel, a copy), which gemv_q4kt.cu's check does not see: the receiver
// then starts only once that work, and so the writer, has finished.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace vi::cuda {

// A gpu-scope relaxed load: L2's value, not L1's; ordered against the other asm below.
__device__ __forceinline__ unsigned handoff_load(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// One turn of a spin. A counter that never fills is a bug (a writer that did not count, a broken
// launch order): after 2^23 turns (each a sleep of ~128 ns and an L2 load: seconds) the kernel
// traps, so the call fails with a launch error instead of hanging the GPU.
constexpr unsigned kHandoffMaxSpins = 1u << 23;
__device__ __forceinline__ void handoff_backoff(unsigned& spins) {
  __nanosleep(128);
  if (++spins > kHandoffMaxSpins) __trap();
}

// Spins until *p reaches target (seen first as `seen`, a handoff_load issued earlier); every lane
// of the warp calls it with the same p.
__device__ __forceinline__ void handoff_wait(const unsigned* p, unsigned seen, unsigned target) {
  unsigned spins = 0;
  while (seen < target) {
    handoff_backoff(spins);
    seen = handoff_load(p);
  }
  __syncwarp();
}

// handoff_wait, then an acquire load of the same counter: the SM's L1 is invalidated after it
// (the PTX memory model's acquire), so no line loaded before it is read afterwards. Returns the
// count it read.
__device__ __forceinline__ unsigned handoff_wait_acquire(const unsigned* p, unsigned seen, unsigned target) {
  handoff_wait(p, seen, target);
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// 16 bytes of activations by a plain (coherent, L1-allocating) load that stays after the spin.
__device__ __forceinline__ uint4 load_x_ordered(const __half* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// Whether every one of counters c[0..n) has reached target (each lane loads every 32nd; the
// answer is the warp's).
__device__ __forceinline__ bool handoff_all_ready(const unsigned* c, int n, unsigned target) {
  bool ok = true;
  for (int i = threadIdx.x & 31; i < n; i += 32) ok = ok && handoff_load(c + i) >= target;
  return __all_sync(0xffffffffu, ok);
}
// Spins until every one of counters c[0..n) has reached target; every lane of the warp calls it.
__device__ __forceinline__ void handoff_wait_all(const unsigned* c, int n, unsigned target) {
  unsigned spins = 0;
  while (!handoff_all_ready(c, n, target)) handoff_backoff(spins);
}

// Stack rows [r0, r1) of a grid of n_tiles tiles of 16 rows that counts each tile in counter
// tile / 16 (so counter j is full at min(16, n_tiles - 16 j)): spins until every counter of those
// rows is full; every lane of the warp calls it.
__device__ __forceinline__ void handoff_wait_rows(const unsigned* c, int64_t r0, int64_t r1, int n_tiles) {
  const int j0 = static_cast<int>(r0 >> 8), j1 = static_cast<int>((r1 - 1) >> 8);
  unsigned spins = 0;
  for (;;) {
    bool ok = true;
    for (int j = j0 + (threadIdx.x & 31); j <= j1; j += 32)
      ok = ok && handoff_load(c + j) >= static_cast<unsigned>(min(16, n_tiles - 16 * j));
    if (__all_sync(0xffffffffu, ok)) return;
    handoff_backoff(spins);
  }
}

// The producer block's end: its stores made visible, then its chunk counted once. Every thread
// of the block calls it after its last store.
__device__ __forceinline__ void handoff_signal(unsigned* counter) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(counter, 1u);
}

}  // namespace vi::cuda
