// Matmul weights in the layout a device's matmul kernels read fastest, made once at load.
#pragma once

#include "ops/registry.h"

namespace vi::ops {

// w: [N, K] weight on ctx's device, as loaded (file layout). Returns w itself when the device
// has no better layout for its dtype and shape (always on the CPU), otherwise a new tensor of
// the same shape whose dtype names the device layout (on CUDA: Q8_0 -> Q8_0R when K % 256 == 0,
// same bytes per row; Q4_K -> Q4_KR when K % 1024 == 0, 148 bytes per 256 values instead of
// 144, or -> Q4_KT, the same bytes in 16-row tiles, where the tensor-core GEMV reads it). A
// prepared weight is meant for ops::matmul on that device; other ops may not read it (CUDA's
// embedding reads the row layouts, not Q4_KT). The caller keeps the original where it also needs
// it elsewhere (a token embedding tied to the output head stays unprepared).
// parts: the row counts of the row views the caller will take of the result (a stack of
// projections), summing to N; empty: none. A layout that stores rows in tiles
// (dtype_info(t).row_tile, e.g. Q4_KT on CUDA in the native profile with f16 activations) is
// chosen only where every view begins and ends on a tile.
// input: what writes the weight's activations. kNorm: ops::add_rms_norm, which can write them as
// int8 blocks (ops::matmul_input_dtype), so with ctx.int8_act a layout for int8 activations may
// be chosen (CUDA, native profile: Q4_K -> Q4_KI); every matmul op still takes activations of
// ctx.act.
// use: how the caller reads the result. kRows: matmul ops on the whole and on the row views at
// parts. kSwiglu: w is a stacked SwiGLU gate|up [2F, K] (parts empty or {F, F}) that the caller
// never views: it reads it through matmul_swiglu, matmul_swiglu_deferred, matmul, and
// matmul_split into its two halves. A device may then store gate and up rows side by side (CUDA,
// native profile: Q4_K -> Q4_KTS), whose rows no slice can address (dtype_info(t).row_tile == 0).
enum class MatmulInput { kAny, kNorm };
enum class MatmulUse { kRows, kSwiglu };
Tensor prepare_matmul_weight(Context& ctx, const Tensor& w, const std::vector<int64_t>& parts = {},
                             MatmulInput input = MatmulInput::kAny, MatmulUse use = MatmulUse::kRows);
using PrepareMatmulWeightFn = Tensor (*)(Context&, const Tensor& w, const std::vector<int64_t>& parts,
                                         MatmulInput input, MatmulUse use);
// Keyed by w's dtype; a (device, dtype) without an entry keeps the file layout.
OpTable<PrepareMatmulWeightFn>& prepare_matmul_weight_table();

}  // namespace vi::ops
