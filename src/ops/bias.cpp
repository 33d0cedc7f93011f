#include "ops/bias.h"
#include "ops/profiler.h"

namespace vi::ops {

OpTable<AddBiasFn>& add_bias_table() {
  static OpTable<AddBiasFn> table("add_bias");
  return table;
}

void add_bias(Context& ctx, const Tensor& x, const Tensor& bias, Tensor& out) {
  check_same_device("add_bias", ctx, {&x, &out});
  VI_CHECK(bias.numel() == x.cols() && bias.dtype() == DType::F32,
           "add_bias: bias {} {} does not match rows of {}", bias.shape_str(), dtype_name(bias.dtype()),
           x.shape_str());
  VI_CHECK(out.shape() == x.shape() && out.dtype() == x.dtype(), "add_bias: output {} does not match input {}",
           out.shape_str(), x.shape_str());
  VI_OP_SCOPE(ctx, "add_bias", x.dtype(), 2 * x.nbytes() + bias.nbytes(), "{}x{}", x.rows(), x.cols());
  add_bias_table().get(ctx.device, x.dtype())(ctx, x, bias, out);
}

}  // namespace vi::ops
