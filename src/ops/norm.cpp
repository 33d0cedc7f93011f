// rms_norm and add_rms_norm entry points: checks, then the (device, x dtype) kernel. The Gated DeltaNet norms
// (l2_norm, gated_rms_norm) have their entry points in ops/norm_gdn.cpp.
#include "ops/norm.h"

#include "ops/op_checks.h"
#include "ops/profiler.h"

namespace vi::ops {

OpTable<RmsNormFn>& rms_norm_table() {
  static OpTable<RmsNormFn> table("rms_norm");
  return table;
}

void rms_norm(Context& ctx, const Tensor& x, const Tensor& w, float eps, float w_offset, Tensor& y) {
  check_same_device("rms_norm", ctx, {&x, &w, &y});
  VI_CHECK(x.ndim() >= 1 && same_shape(x, y) && x.dtype() == y.dtype(),
           "op 'rms_norm': y {} must match x {}", describe(y), describe(x));
  VI_CHECK(w.dtype() == DType::F32 && w.ndim() == 1 && w.dim(0) == x.cols(),
           "op 'rms_norm': weight {} must be [{}] f32 to match x {}", describe(w), x.cols(), describe(x));
  VI_OP_SCOPE(ctx, "rms_norm", x.dtype(), x.nbytes() + w.nbytes() + y.nbytes(), "{}x{}", x.rows(), x.cols());
  rms_norm_table().get(ctx.device, x.dtype())(ctx, x, w, eps, w_offset, y);
}

OpTable<AddRmsNormFn>& add_rms_norm_table() {
  static OpTable<AddRmsNormFn> table("add_rms_norm");
  return table;
}

void add_rms_norm(Context& ctx, Tensor& x, const Tensor& o, const Tensor& w, float eps, float w_offset, Tensor& y) {
  check_same_device("add_rms_norm", ctx, {&x, &o, &w, &y});
  VI_CHECK(x.ndim() >= 1 && same_shape(x, o) && x.dtype() == o.dtype(), "op 'add_rms_norm': o {} must match x {}",
           describe(o), describe(x));
  // y may be Q8_KX blocks where a device writes them (ops::matmul_input_dtype): CUDA, f16 x.
  const bool q8 = y.dtype() == DType::Q8_KX && x.dtype() == DType::F16 && ctx.device == Device::CUDA;
  VI_CHECK(y.ndim() >= 1 && y.rows() == x.rows() && y.cols() == x.cols() && (x.dtype() == y.dtype() || q8),
           "op 'add_rms_norm': y {} must match x {} (or be Q8_KX of f16 x on cuda)", describe(y), describe(x));
  VI_CHECK(x.numel() == 0 || x.data() != y.data(), "op 'add_rms_norm': y {} must not alias x (the residual stream)",
           describe(y));
  VI_CHECK(w.dtype() == DType::F32 && w.ndim() == 1 && w.dim(0) == x.cols(),
           "op 'add_rms_norm': weight {} must be [{}] f32 to match x {}", describe(w), x.cols(), describe(x));
  // Reads x, o, w; writes x and y.
  VI_OP_SCOPE(ctx, "add_rms_norm", x.dtype(), 4 * x.nbytes() + w.nbytes(), "{}x{}", x.rows(), x.cols());
  add_rms_norm_table().get(ctx.device, x.dtype())(ctx, x, o, w, eps, w_offset, y);
}

}  // namespace vi::ops
