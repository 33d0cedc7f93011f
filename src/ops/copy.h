// Copies a tensor's contents into another of the same dtype and element count
// (gathering cache rows, compacting logits rows). Shapes may differ in layout only.
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// dst <- src; same dtype and numel; both contiguous.
void copy(Context& ctx, const Tensor& src, Tensor& dst);
using CopyFn = void (*)(Context&, const Tensor& src, Tensor& dst);
OpTable<CopyFn>& copy_table();  // keyed by src dtype

}  // namespace vi::ops
