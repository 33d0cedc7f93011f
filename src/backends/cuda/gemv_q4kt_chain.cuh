// A chain of dependent Q4_KT decode GEMVs in one persistent launch (an experiment toward a decode
// step with fewer kernel boundaries; docs/notes/gemv.md run 27): y_s = x_s · w_sᵀ for s = 0, 1,
// ..., where x_s may be an earlier step's y. A fixed grid of blocks (blocks_per_sm per SM, all
// resident) walks each step's 16-row tiles as gemv_q4kt's kernel does (q4kt_walk.cuh: the same
// loads and arithmetic, so every y equals gemv_q4kt's bit for bit), and the steps meet at a grid
// barrier (a counter in global memory) instead of a kernel boundary. With prefetch, each block
// issues the first loads of its next step's tile before it waits at the barrier (weights are no
// step's output), as a kernel launched early by PDL does before pdl_wait.
#pragma once

#include <vector>

#include "ops/registry.h"  // host-only: the benchmark includes this header

namespace vi::cuda {

// One GEMV of the chain: x [T, K] f16 (T <= 8), w [N, K] Q4_KT, y [T, N] f16.
struct Q4ktChainStep {
  const Tensor* x;
  const Tensor* w;
  Tensor* y;
};

constexpr int kQ4ktChainMaxSteps = 48;
constexpr int kQ4ktChainWords = 64;  // the barrier's device words (two 128-byte lines)

// Whether the chain can run: the sm_80 code, every step as gemv_q4kt_supports, y [T, N], at most
// kQ4ktChainMaxSteps steps, and blocks_per_sm (3 or 4) blocks of the kernel resident per SM.
bool gemv_q4kt_chain_supports(const ops::Context& ctx, const std::vector<Q4ktChainStep>& steps, int blocks_per_sm);
// Runs the steps in order in one launch. words: kQ4ktChainWords device uint32 the call resets
// (in stream order) and the launch's barriers count on; no other launch may use them at the same
// time. flag_barrier: blocks wait on a flag the last to arrive sets, not on the count. The
// grid must be resident as a whole: where CUDA 12+ runs it, the launch is cooperative (it fails
// instead of waiting forever when it does not fit); run nothing else on the device beside it.
void gemv_q4kt_chain(const ops::Context& ctx, const std::vector<Q4ktChainStep>& steps, int blocks_per_sm,
                     bool prefetch, bool flag_barrier, unsigned* words);

}  // namespace vi::cuda
