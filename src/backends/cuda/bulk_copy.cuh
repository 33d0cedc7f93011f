// The copy engine's bulk copies (cp.async.bulk, sm_90, CUDA 12+) from global into shared
// memory, and the mbarriers their completion is counted on (in bytes). A copy holds no
// registers and no scoreboard of the issuing thread: a thread waits on the barrier of the one
// slot it needs, not on every load it has in flight (docs/notes/gemv.md run 21: a register
// load of the next buffer made the first use of this one wait for both).
//
// VI_BULK_COPY is defined where the helpers exist (device code for sm_90+ built with CUDA 12+);
// callers compile their bulk-copy kernels under it and trap elsewhere.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && __CUDACC_VER_MAJOR__ >= 12
#define VI_BULK_COPY 1
#endif

namespace vi::cuda {

#ifdef VI_BULK_COPY
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// A barrier that completes a phase after `count` arrivals and the bytes they announced.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// After mbar_init: the barriers visible to the copy engine (and, past a warp or block barrier,
// to the other threads).
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// One arrival that announces `bytes` more to come from bulk copies in this phase.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// Spins until the phase of parity `parity` (0 for the first use, then alternating) completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  }
}
// bytes from global src to shared dst (both 16-byte aligned, bytes a multiple of 16); their
// arrival counts on bar.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}
// An L2 policy for bytes read once (weights streamed by a decode GEMV): evict them first.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
// bulk_copy with an L2 cache policy.
__device__ __forceinline__ void bulk_copy_hint(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                               uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}
// Orders this thread's earlier shared-memory accesses (and, through a warp or block barrier
// before it, those of the threads it synchronized with) before its later bulk copies into the
// same bytes: a slot's reads before its refill.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
#endif

}  // namespace vi::cuda
