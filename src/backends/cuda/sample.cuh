// CUDA sampling (ops/sample.h). Two launches per call:
//  1. one block per (row, slice of kSampleSlice logits): penalties patched in shared memory,
//     the slice's max / arg-max / sum of exp (for greedy and its log-probability) and, for
//     sampling rows, the slice's top-k by a bitonic sort (logit descending, id ascending);
//  2. one block per row: the slices combined; for sampling rows the slices' candidates
//     sorted again, then top-p, min-p, temperature and the draw in fp64 by one thread, in
//     the same order of operations as the CPU op, so a seed picks the same token.
// The second sort holds at most kSampleMaxCands candidates, which bounds top_k by
// kSampleMaxCands / (number of slices): 67 for a 248K vocabulary, 107 for 152K.
#pragma once

#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

constexpr int kSampleSlice = 4096;      // logits per block in pass 1 (sorted in shared memory)
constexpr int kSampleMaxCands = 4096;   // candidates sorted per row in pass 2
constexpr int kSampleThreads = 1024;

}  // namespace vi::cuda
