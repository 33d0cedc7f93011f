// Matmul weights in the layout a device's matmul kernels read fastest, made once at load.
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// w: [N, K] weight on ctx's device, as loaded (file layout). Returns w itself when the device
// has no better layout for its dtype and shape (always on the CPU), otherwise a new tensor of
// the same shape whose dtype names the device layout (on CUDA: Q8_0 -> Q8_0R when K % 256 == 0,
// same bytes per row; Q4_K -> Q4_KR when K % 1024 == 0, 148 bytes per 256 values instead of
// 144). A prepared weight is meant for ops::matmul on that device; other ops may not read it
// (CUDA's embedding does). The caller keeps the original where it also needs it elsewhere (a
// token embedding tied to the output head stays unprepared).
Tensor prepare_matmul_weight(Context& ctx, const Tensor& w);
using PrepareMatmulWeightFn = Tensor (*)(Context&, const Tensor& w);
// Keyed by w's dtype; a (device, dtype) without an entry keeps the file layout.
OpTable<PrepareMatmulWeightFn>& prepare_matmul_weight_table();

}  // namespace vi::ops
