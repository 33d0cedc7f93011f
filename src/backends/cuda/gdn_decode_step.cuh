// CUDA gdn_decode_step (ops/gdn_decode_step.h): a decode or verify round's GDN gates,
// recurrent delta rule and gated output norm in one launch per GDN layer.
// This header is plain C++ (no CUDA types), so host code and tests can include it.
#pragma once

#include <cstdint>

#include "ops/registry.h"

namespace vi::cuda {

constexpr int kDecodeMaxSeqs = 64;   // sequences per launch (their state pointers are a kernel parameter)
constexpr int kDecodeMaxCols = 128;  // value columns per pass: kDeltaRowGroups x 128 = 512 threads
constexpr int kDecodeMaxDv = 512;    // value head dim bound (the head's output waits in shared memory)
// Tokens per sequence whose k, q, gates and outputs the kernels hold in shared memory at
// once (kMaxFusedGdnRows: a verify round's drafts in one chunk); more run in chunks.
constexpr int kDecodeStepTokens = 8;

// Blocks per (value head, sequence) in the cluster kernel (sm_90): each takes dv / 4 value
// columns (rounded up to a warp), so the 27B layer (48 heads of 128) runs as 192 blocks of
// 32 columns on the H200's 132 SMs instead of 48 blocks of 128 columns. 2, 4 or 8; a head
// takes the cluster kernel when its dv fits one pass per block (dv <= 128 x this).
constexpr int kDecodeClusterBlocks = 4;

// With dk = dv = 128 (the Qwen3.5 family) the cluster path takes the lean kernels (one token, and
// verify rounds of several): the same per-column arithmetic with the state loaded before the PDL
// wait and the row groups summed within a warp; VI_GDN_LEAN=0 (read once) keeps them off.
// Whether gdn_decode_step on ctx's device takes the cluster kernel for value head dim dv:
// the native profile on a device running sm_90 code, a CUDA 12+ build, dv within the bound
// above, and not turned off (environment VI_GDN_CLUSTER=0, read once, or the setter below).
// Otherwise it runs one block per (value head, sequence).
bool gdn_decode_uses_cluster(const ops::Context& ctx, int64_t dv);
// Tests and A/B runs: false forces the one-block-per-head kernel in this process; true returns
// to the default (still off where the cluster kernel does not apply). Process-wide.
void set_gdn_decode_cluster_allowed(bool allowed);

}  // namespace vi::cuda
