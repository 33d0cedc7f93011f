// The Q4_KT decode GEMV fed by the copy engine (sm_90, CUDA 12+): y[T, N] = x[T, K] · w[N, K]ᵀ for
// T <= 8 tokens of f16 activations; also the fused gate|up + SwiGLU on Q4_KTS and the deferred
// norm's consumers (gemv_q4kt.cuh), not its producer.
//
// Why: the register walk (q4kt_walk.cuh) keeps at most two super-blocks a warp in flight and
// issues each refill only after it has multiplied a buffer, so the bytes an SM has in flight
// (~28-57 KB) fall short of what the H200's copy rate needs at its load latency
// (docs/notes/gemv.md runs 21 and 32: an SM streams ~130 GB/s with 128 KB in flight, the GEMVs'
// SMs ~30-40). Earlier rings (runs 11, 30, 34) refilled from the warps that multiply, one small
// copy per unit, on the multiply chain. Here one producer warp per block does nothing but copy:
// whole stages of units (up to ~19 KB per copy) into a ring of shared-memory stages, ahead of the
// consumer warps by the whole ring and across tile boundaries (a block stays for several tiles).
// The consumers wait on a stage's mbarrier, read their units from shared memory, multiply them
// with the register walk's arithmetic (q4kr_mma.cuh) and release the stage.
//
// With 4 consumer warps (warp w takes a tile's super-blocks w, w + 4, ..., as the register walk's
// warps do) the sums meet in the same order: the outputs equal gemv_q4kt's bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/registry.h"

namespace vi::cuda {

struct Q4ktTmaShape {
  int consumers = 4;      // consumer warps a block (4 or 8); one more warp copies
  int per_warp = 2;       // units a consumer warp takes from each stage (a stage: consumers x per_warp units)
  bool x_shared = false;  // the activations copied into shared memory once per block
  int stages = 4;         // ring depth
  int blocks = 2;         // blocks a SM asked for (fewer where shared memory does not allow them)
};
std::string gemv_q4kt_tma_shape_name(const Q4ktTmaShape& s);
std::vector<Q4ktTmaShape> gemv_q4kt_tma_shapes();  // the compiled forms, for the tests and the benchmark

// Whether this build, device and call can take it (sm_90 code, Q4_KT or with swiglu Q4_KTS, f16 x
// of T <= 8, the ring and x within shared memory).
bool gemv_q4kt_tma_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w, const Q4ktTmaShape& s,
                            bool swiglu = false);
// x: [T, K] f16; w: [N, K] Q4_KT; y: [T, N] f16.
void gemv_q4kt_tma(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, const Q4ktTmaShape& s);
// h[T, N / 2] = silu(x · gateᵀ) ⊙ (x · upᵀ) for a gate|up w [N, K] in Q4_KTS.
void gemv_q4kt_tma_swiglu(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h,
                          const Q4ktTmaShape& s);

// Where the model's deferred-norm consumers (gemv_q4kt_deferred) take this kernel: VI_Q4KT_TMA=n
// routes the fused SwiGLU to gemv_q4kt_tma_shapes()[n - 1], 100 + n every consumer (read once per
// process); unset or 0, none (the default). Returns the shape for a call of this kind, or null.
// set_q4kt_tma_route (tests): n as the variable would, -1 back to the environment.
// gemv_q4kt_tma_launches counts the launches of every entry.
const Q4ktTmaShape* gemv_q4kt_tma_route(bool swiglu);
void set_q4kt_tma_route(int n);
uint64_t gemv_q4kt_tma_launches();

// The deferred norm's consumer (gemv_q4kt_deferred's arguments as pointers): u [T, K] f16, w Q4_KT
// (Q4_KTS with swiglu), outs: {y}, the split's parts or {h}; ss_in [T, 4] u64 totals, sums_in
// [T, K / 8] f16 sums16 or null. Returns false (nothing launched) where the route or shape cannot
// take the call, and for T > 1 (routed for one token only).
bool gemv_q4kt_tma_consume(const ops::Context& ctx, const Tensor& u, const Tensor& w, bool swiglu,
                           const std::vector<Tensor*>& outs, const void* ss_in, float inv_d, float eps,
                           const void* sums_in);

}  // namespace vi::cuda
