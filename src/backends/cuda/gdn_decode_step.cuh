// CUDA gdn_decode_step (ops/gdn_decode_step.h): a decode round's GDN gates, recurrent delta
// rule and gated output norm in one launch per GDN layer.
#pragma once

#include "backends/cuda/gdn.cuh"

namespace vi::cuda {

constexpr int kDecodeMaxSeqs = 64;   // sequences per launch (their state pointers are a kernel parameter)
constexpr int kDecodeMaxCols = 128;  // value columns per pass: kDeltaRowGroups x 128 = 512 threads
constexpr int kDecodeMaxDv = 512;    // value head dim bound (the head's output waits in shared memory)

}  // namespace vi::cuda
