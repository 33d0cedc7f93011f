// A streamed input: a kernel that reads a buffer while the grid before it still writes it, value
// by value, instead of waiting for that whole grid (pdl_wait). The buffer is filled with the
// poison mark (ops::poison: every bit set, a NaN no arithmetic on numbers writes) before its
// writer runs; the writer stores each value once; the reader loads from L2 (where every store
// lands; L1 may hold an older line) and loads again while any value it got is still the mark.
// Each value is checked on its own, so neither the writer's store width nor any order between
// its stores matters, and the writer needs no fence or counter.
//
// The reader may skip pdl_wait only where every other input it reads was complete before the
// writer started, and where nothing it writes is read by the writer after the reader's first
// write: gemv_q4kt.cu says why the down projection after the fused SwiGLU meets both.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace vi::cuda {

// 16 bytes from L2, not L1; asm volatile, so the compiler neither merges nor hoists reloads.
__device__ __forceinline__ uint4 load_l2_16(const __half* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Whether any of the 32 halves in v is the poison mark 0xFFFF. First one NaN test of their sum
// (a sum of f16 values is NaN only where one of them is NaN or infinities of both signs meet, so a
// clean input costs 16 adds and a test); only then the exact test of every half.
__device__ __forceinline__ bool any_poisoned(const uint4 v[4]) {
  __half2 s[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2* h = reinterpret_cast<const __half2*>(&v[i]);
    s[i] = __hadd2(__hadd2(h[0], h[1]), __hadd2(h[2], h[3]));
  }
  const __half2 all = __hadd2(__hadd2(s[0], s[1]), __hadd2(s[2], s[3]));
  if (!__hisnan(__low2half(all)) && !__hisnan(__high2half(all))) return false;
  bool marked = false;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t w[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) marked = marked || (w[j] & 0xFFFFu) == 0xFFFFu || (w[j] >> 16) == 0xFFFFu;
  }
  return marked;
}

// A spin that never ends is a bug (a writer that never stores a value, a buffer not poisoned
// the way the caller says, an input that really holds the mark): after 2^23 turns (each a sleep
// of ~128 ns and a reload: seconds) the kernel traps, so the call fails with a launch error
// instead of hanging the GPU.
constexpr unsigned kStreamedMaxSpins = 1u << 23;

// 4 × 16 bytes of activations at p (32 halves; every lane of the warp calls it), loaded again
// until none is the mark.
__device__ __forceinline__ void load_x_polled(const __half* p, uint4 v[4]) {
  unsigned spins = 0;
  for (;;) {
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = load_l2_16(p + 8 * i);
    if (!__any_sync(0xffffffffu, any_poisoned(v))) return;
    __nanosleep(128);
    if (++spins > kStreamedMaxSpins) __trap();
  }
}

}  // namespace vi::cuda
