// Entry points and tables of the two Gated DeltaNet norms declared in ops/norm.h:
// l2_norm (q/k) and gated_rms_norm (output). rms_norm lives in ops/norm.cpp.
#include "ops/norm.h"
#include "ops/profiler.h"

namespace vi::ops {

namespace {

bool is_float_activation(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

}  // namespace

OpTable<L2NormFn>& l2_norm_table() {
  static OpTable<L2NormFn> table("l2_norm");
  return table;
}

OpTable<GatedRmsNormFn>& gated_rms_norm_table() {
  static OpTable<GatedRmsNormFn> table("gated_rms_norm");
  return table;
}

void l2_norm(Context& ctx, const Tensor& x, float eps, float scale, Tensor& y) {
  check_same_device("l2_norm", ctx, {&x, &y});
  VI_CHECK(x.ndim() >= 1 && x.cols() >= 1, "op 'l2_norm': x {} has no rows to normalise",
           x.shape_str());
  VI_CHECK(is_float_activation(x.dtype()), "op 'l2_norm': x dtype {} is not f32/f16/bf16",
           dtype_name(x.dtype()));
  VI_CHECK(y.rows() == x.rows() && y.cols() == x.cols(),
           "op 'l2_norm': y {} must hold the rows of x {}", y.shape_str(), x.shape_str());
  VI_CHECK(y.dtype() == x.dtype(), "op 'l2_norm': y dtype {} differs from x dtype {}",
           dtype_name(y.dtype()), dtype_name(x.dtype()));
  VI_CHECK(eps > 0.0f, "op 'l2_norm': eps {} must be > 0 (a zero row would divide by zero)", eps);
  VI_OP_SCOPE(ctx, "l2_norm", x.dtype(), x.nbytes() + y.nbytes(), "{}x{}", x.rows(), x.cols());
  l2_norm_table().get(ctx.device, x.dtype())(ctx, x, eps, scale, y);
}

void gated_rms_norm(Context& ctx, const Tensor& x, const Tensor& z, const Tensor& w, float eps,
                    Tensor& y) {
  check_same_device("gated_rms_norm", ctx, {&x, &z, &w, &y});
  VI_CHECK(x.ndim() >= 1 && x.cols() >= 1, "op 'gated_rms_norm': x {} has no rows to normalise",
           x.shape_str());
  VI_CHECK(is_float_activation(x.dtype()), "op 'gated_rms_norm': x dtype {} is not f32/f16/bf16",
           dtype_name(x.dtype()));
  const int64_t n = x.cols();
  VI_CHECK(z.rows() == x.rows() && z.cols() == n,
           "op 'gated_rms_norm': gate z {} must hold the rows of x {}", z.shape_str(), x.shape_str());
  VI_CHECK(y.rows() == x.rows() && y.cols() == n,
           "op 'gated_rms_norm': y {} must hold the rows of x {}", y.shape_str(), x.shape_str());
  VI_CHECK(z.dtype() == x.dtype() && y.dtype() == x.dtype(),
           "op 'gated_rms_norm': z ({}) and y ({}) must have the dtype of x ({})",
           dtype_name(z.dtype()), dtype_name(y.dtype()), dtype_name(x.dtype()));
  VI_CHECK(w.ndim() == 1 && w.dim(0) == n && w.dtype() == DType::F32,
           "op 'gated_rms_norm': weight {} must be [{}] f32, got {} {}",
           w.name().empty() ? "w" : w.name(), n, w.shape_str(), dtype_name(w.dtype()));
  VI_CHECK(eps > 0.0f, "op 'gated_rms_norm': eps {} must be > 0", eps);
  VI_OP_SCOPE(ctx, "gated_rms_norm", x.dtype(), x.nbytes() + z.nbytes() + w.nbytes() + y.nbytes(), "{}x{}", x.rows(), n);
  gated_rms_norm_table().get(ctx.device, x.dtype())(ctx, x, z, w, eps, y);
}

}  // namespace vi::ops
