// The deferred norm's fused kernels on CUDA (ops/deferred_norm.h): the Q4_KT decode GEMV as the
// producer (its epilogue adds to the residual and writes u and the sums of squares) and as the
// consumer (matmul, matmul_split, the fused SwiGLU; sums scaled by s before rounding). Other
// weights, and calls the GEMV does not take, run the op's pieces (which have CPU kernels only:
// models ask ops::deferred_norm_fused first).
#include "backends/cuda/gemv_q4kt.cuh"
#include "ops/deferred_norm.h"

namespace vi::cuda {
namespace {

bool add_deferred_norm_q4kt(ops::Context& ctx, const Tensor& a, const Tensor& w, Tensor& x, const Tensor& norm_w,
                            float w_offset, ops::DeferredNorm* out) {
  if (!gemv_q4kt_add_deferred_norm_supports(ctx, a, w, x)) return false;
  if (out != nullptr) gemv_q4kt_add_deferred_norm(ctx, a, w, x, norm_w, w_offset, *out);
  return true;
}

bool deferred_q4kt(ops::Context& ctx, const ops::DeferredNorm& in, const Tensor& w, ops::DeferredConsumer kind,
                   const std::vector<Tensor*>& outs, bool run) {
  const std::vector<Tensor*> none;
  if (!gemv_q4kt_deferred_supports(ctx, in, w, kind, kind == ops::DeferredConsumer::kSplit ? outs : none))
    return false;
  if (run) gemv_q4kt_deferred(ctx, in, w, kind, outs);
  return true;
}

[[maybe_unused]] const bool registered = [] {
  ops::matmul_add_deferred_norm_table().add(Device::CUDA, DType::Q4_KT, add_deferred_norm_q4kt);
  ops::matmul_deferred_table().add(Device::CUDA, DType::Q4_KT, deferred_q4kt);
  ops::matmul_deferred_table().add(Device::CUDA, DType::Q4_KTS, deferred_q4kt);  // the fused SwiGLU only
  return true;
}();

}  // namespace
}  // namespace vi::cuda
