// Copies a tensor's contents into another of the same dtype and element count
// (gathering cache rows, compacting logits rows). Shapes may differ in layout only.
#pragma once

#include <vector>

#include "ops/registry.h"

namespace vi::ops {

// dst <- src; same dtype and numel; both contiguous.
void copy(Context& ctx, const Tensor& src, Tensor& dst);
using CopyFn = void (*)(Context&, const Tensor& src, Tensor& dst);
OpTable<CopyFn>& copy_table();  // keyed by src dtype

// dsts[i] <- srcs[i] for every i, in one launch where the device can (restoring a recurrent
// state of many layers, a few tensors each: one copy call each cost a launch apiece). Each
// pair: same dtype and numel, contiguous, not overlapping; the tensors' handles are not
// changed, their contents are.
void copy_batch(Context& ctx, const std::vector<Tensor>& srcs, const std::vector<Tensor>& dsts);
using CopyBatchFn = void (*)(Context&, const Tensor* srcs, const Tensor* dsts, size_t n);
OpTable<CopyBatchFn>& copy_batch_table();  // keyed by the first src's dtype (any: bytes are copied)

// The column blocks of a row-major src [R, C] into contiguous tensors: dsts[i][r, :] =
// src[r, c_i : c_i + dsts[i].cols()], c_i the widths of the parts before i. What a stacked
// projection's output (several matrices multiplied as one) becomes when each part is needed on
// its own for more than one row. Unquantized dtypes; every dst [R, w_i] of src's dtype, the
// widths summing to C; 1 to kSplitMaxParts parts, none aliasing src.
constexpr size_t kSplitMaxParts = 8;
void split_cols(Context& ctx, const Tensor& src, const std::vector<Tensor*>& dsts);
// dsts: n parts (a pointer and a count: the backends are also compiled as C++17).
using SplitColsFn = void (*)(Context&, const Tensor& src, Tensor* const* dsts, size_t n);
OpTable<SplitColsFn>& split_cols_table();  // keyed by src dtype

}  // namespace vi::ops
