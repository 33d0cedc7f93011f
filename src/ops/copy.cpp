#include "ops/copy.h"
#include "ops/profiler.h"

namespace vi::ops {

OpTable<CopyFn>& copy_table() {
  static OpTable<CopyFn> table("copy");
  return table;
}

void copy(Context& ctx, const Tensor& src, Tensor& dst) {
  check_same_device("copy", ctx, {&src, &dst});
  VI_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(), "copy: {} {} into {} {}", src.shape_str(),
           dtype_name(src.dtype()), dst.shape_str(), dtype_name(dst.dtype()));
  if (src.numel() == 0 || src.data() == dst.data()) return;
  VI_OP_SCOPE(ctx, "copy", src.dtype(), 2 * src.nbytes(), "{}x{}", src.rows(), src.cols());
  copy_table().get(ctx.device, src.dtype())(ctx, src, dst);
}

}  // namespace vi::ops
