// CUDA matmul: the dispatch between the tensor-core GEMVs (gemv_q4kr.cu, gemv_mma.cu, and
// gemv_q4kr_volta.cu in the volta profile), the CUDA-core GEMV (gemv_simt.cu) and the prefill
// GEMM path (gemm_path.cu). See matmul.cuh.
#include <algorithm>

#include "backends/cuda/device.cuh"
#include "backends/cuda/gemm_path.cuh"
#include "backends/cuda/gemv_mma.cuh"
#include "backends/cuda/gemv_q4ki.cuh"
#include "backends/cuda/gemv_q4kr.cuh"
#include "backends/cuda/gemv_q4kr_volta.cuh"
#include "backends/cuda/gemv_q4kt.cuh"
#include "backends/cuda/gemv_simt.cuh"
#include "backends/cuda/matmul.cuh"
#include "ops/copy.h"
#include "ops/matmul.h"
#include "ops/memory.h"

namespace vi::cuda {
namespace {

template <DType W>
void matmul_cuda(ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t n_tok = x.rows();
  if (n_tok == 0 || w.dim(0) == 0) return;
  if (gemv_q4kr_supports(ctx, x, w)) {  // decode on tensor cores (native profile, sm_80+)
    gemv_q4kr(ctx, x, w, y);
    return;
  }
  // Volta profile, Q4_KR, T <= 8: m8n8k4 tensor cores, where that is a hardware instruction
  // (sm_70-75). From sm_80 ptxas turns each m8n8k4 into a CUDA-core subroutine (~70
  // instructions for what is 4 HMMAs on a V100), slower than gemv_simt: a volta profile forced
  // onto such a GPU keeps gemv_simt; tests and the benchmark call gemv_q4kr_volta directly.
  if (volta_profile(ctx) && current_device().cc < 80 && gemv_q4kr_volta_supports(x, w)) {
    gemv_q4kr_volta(ctx, x, w, y);
    return;
  }
  if (gemv_mma_supports(ctx, x, w)) {
    gemv_mma(ctx, x, w, y);
    return;
  }
  dispatch_act("matmul", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (std::is_same_v<T, __half> && n_tok > kGemvMaxTokens) {
      gemm_path(ctx, x, w, y);
    } else {
      gemv_simt(ctx, x, w, y);
    }
  });
}

// The tiled layouts Q4_KT, Q8_0T and Q4_KTS, made only for the native profile with f16
// activations on sm_80+ code (prepare_matmul_weight.cu): the tensor-core GEMV up to 8 tokens,
// dequantized tiles and a GEMM beyond (and where the GEMV cannot take a call: always on Q4_KTS,
// whose rows the GEMV would write out of order; the model reads it through matmul_swiglu and the
// halves of matmul_split).
void matmul_tiled(ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  if (x.rows() == 0 || w.dim(0) == 0) return;
  if (gemv_q4kt_supports(ctx, x, w)) {
    gemv_q4kt(ctx, x, w, y);
    return;
  }
  if (w.dtype() == DType::Q8_0T && gemv_mma_supports(ctx, x, w)) {
    gemv_mma(ctx, x, w, y);
    return;
  }
  VI_CHECK(x.dtype() == DType::F16,
           "matmul: weight '{}' is in a tiled layout ({}), which is read with f16 activations only, got {}", w.name(),
           dtype_name(w.dtype()), dtype_name(x.dtype()));
  gemm_path(ctx, x, w, y);
}

// Q4_KI, made for the projections add_rms_norm feeds (prepare_matmul_weight.cu): the int8 GEMV
// up to kGemvMaxTokens rows, on x's Q8_KX blocks or on f16 x quantized first (one more kernel);
// dequantized tiles and a GEMM beyond.
bool q4ki_gemv_takes(ops::Context& ctx, const Tensor& x) {
  return x.rows() >= 1 && x.rows() <= kGemvMaxTokens && gemv_q4ki_available(ctx) &&
         (x.dtype() == DType::Q8_KX || x.dtype() == DType::F16);
}

Tensor q8kx_of(ops::Context& ctx, const Tensor& x) {
  if (x.dtype() == DType::Q8_KX) return x;
  Tensor q = ops::empty(ctx, DType::Q8_KX, {x.rows(), x.cols()});
  quantize_q8kx(ctx, x, q);
  return q;
}

void matmul_q4ki(ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  if (x.rows() == 0 || w.dim(0) == 0) return;
  if (q4ki_gemv_takes(ctx, x)) {
    gemv_q4ki(ctx, q8kx_of(ctx, x), w, y);
    return;
  }
  VI_CHECK(x.dtype() == DType::F16,
           "matmul: weight '{}' (Q4_KI) takes {} activations of {} rows; int8 blocks (Q8_KX) only up to {} rows "
           "where its GEMV runs, f16 otherwise",
           w.name(), dtype_name(x.dtype()), x.rows(), kGemvMaxTokens);
  gemm_path(ctx, x, w, y);
}

DType matmul_input_dtype_q4ki(ops::Context& ctx, const Tensor&, int64_t T) {
  return T >= 1 && T <= kGemvMaxTokens && gemv_q4ki_available(ctx) && ctx.act == DType::F16 ? DType::Q8_KX : ctx.act;
}

// The fused gate|up GEMV + SwiGLU where a tensor-core decode GEMV takes the call (the dispatch
// of matmul_cuda: Q4_KT, Q4_KR, then gemv_mma's dtypes).
bool matmul_swiglu_cuda(ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor* h) {
  if (x.rows() == 0) return false;
  if (w.dtype() == DType::Q4_KI) {
    if (!q4ki_gemv_takes(ctx, x) || w.dim(0) % 32 != 0) return false;
    if (h != nullptr) gemv_q4ki_swiglu(ctx, q8kx_of(ctx, x), w, *h);
    return true;
  }
  if (w.dtype() == DType::Q4_KT || w.dtype() == DType::Q4_KTS) {
    if (!gemv_q4kt_swiglu_supports(ctx, x, w)) return false;
    if (h != nullptr) gemv_q4kt_swiglu(ctx, x, w, *h);
    return true;
  }
  if (gemv_q4kr_supports(ctx, x, w)) {
    if (h != nullptr) gemv_q4kr_swiglu(ctx, x, w, *h);
    return true;
  }
  if (gemv_mma_swiglu_supports(ctx, x, w)) {
    if (h != nullptr) gemv_mma_swiglu(ctx, x, w, *h);
    return true;
  }
  return false;
}

// A stacked Q4_KT projection whose parts the decode GEMV writes straight into their tensors; the
// two halves of a Q4_KTS gate|up stack (the prefill of an MLP whose gate and up have no row
// views), each by the GEMMs a matmul of its view runs.
bool matmul_split_cuda(ops::Context& ctx, const Tensor& x, const Tensor& w, const std::vector<Tensor*>& parts,
                       bool run) {
  if (w.dtype() == DType::Q4_KTS) {
    const int64_t F = w.dim(0) / 2;
    if (x.dtype() != DType::F16 || x.rows() == 0 || parts.size() != 2 || parts[0]->dim(1) != F ||
        parts[1]->dim(1) != F)
      return false;
    if (run) gemm_path_q4kts_halves(ctx, x, w, *parts[0], *parts[1]);
    return true;
  }
  if (w.dtype() == DType::Q4_KI) {
    const bool tiles = std::all_of(parts.begin(), parts.end(),
                                   [](const Tensor* p) { return p->dim(1) % kTiledRows == 0 && p->dim(1) > 0; });
    if (!q4ki_gemv_takes(ctx, x) || !tiles || parts.size() > ops::kSplitMaxParts) return false;
    if (run) gemv_q4ki_split(ctx, q8kx_of(ctx, x), w, parts);
    return true;
  }
  if (x.rows() == 0 || !gemv_q4kt_split_supports(ctx, x, w, parts)) return false;
  if (run) gemv_q4kt_split(ctx, x, w, parts);
  return true;
}

template <DType W>
void add_matmul() {
  ops::matmul_table().add(Device::CUDA, W, matmul_cuda<W>);
}

[[maybe_unused]] const bool registered = [] {
  add_matmul<DType::F32>();
  add_matmul<DType::F16>();
  add_matmul<DType::BF16>();
  add_matmul<DType::Q8_0>();
  add_matmul<DType::Q4_0>();
  add_matmul<DType::Q4_1>();
  add_matmul<DType::Q4_K>();
  add_matmul<DType::Q5_K>();
  add_matmul<DType::Q6_K>();
  add_matmul<DType::Q8_0R>();
  add_matmul<DType::Q4_KR>();
  for (DType t : {DType::Q4_KT, DType::Q8_0T, DType::Q4_KTS})
    ops::matmul_table().add(Device::CUDA, t, matmul_tiled);
  ops::matmul_split_table().add(Device::CUDA, DType::Q4_KT, matmul_split_cuda);
  ops::matmul_split_table().add(Device::CUDA, DType::Q4_KTS, matmul_split_cuda);
  ops::matmul_table().add(Device::CUDA, DType::Q4_KI, matmul_q4ki);
  ops::matmul_split_table().add(Device::CUDA, DType::Q4_KI, matmul_split_cuda);
  ops::matmul_input_dtype_table().add(Device::CUDA, DType::Q4_KI, matmul_input_dtype_q4ki);
  for (DType t : {DType::Q4_KI, DType::Q4_KT, DType::Q4_KTS, DType::Q4_KR, DType::Q8_0T, DType::Q8_0R, DType::Q4_K,
                  DType::Q5_K, DType::F16})
    ops::matmul_swiglu_table().add(Device::CUDA, t, matmul_swiglu_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
