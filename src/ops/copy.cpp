#include "ops/copy.h"
#include "ops/op_checks.h"
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

OpTable<SplitColsFn>& split_cols_table() {
  static OpTable<SplitColsFn> table("split_cols");
  return table;
}

void split_cols(Context& ctx, const Tensor& src, const std::vector<Tensor*>& dsts) {
  VI_CHECK(dsts.size() != 0 && dsts.size() <= kSplitMaxParts, "op 'split_cols': {} parts (1 to {})", dsts.size(),
           kSplitMaxParts);
  VI_CHECK(src.ndim() == 2 && !dtype_is_quantized(src.dtype()), "op 'split_cols': src {} must be 2-D, unquantized",
           describe(src));
  int64_t width = 0;
  for (const Tensor* d : dsts) {
    check_same_device("split_cols", ctx, {&src, d});
    VI_CHECK(d->ndim() == 2 && d->dtype() == src.dtype() && d->dim(0) == src.dim(0),
             "op 'split_cols': part {} must be [{}, w] {} like src {}", describe(*d), src.dim(0), dtype_name(src.dtype()),
             describe(src));
    VI_CHECK(d->data() != src.data() || d->numel() == 0, "op 'split_cols': part {} aliases src", describe(*d));
    width += d->dim(1);
  }
  VI_CHECK(width == src.dim(1), "op 'split_cols': parts {} columns wide in all, src {}", width, describe(src));
  if (src.numel() == 0) return;
  VI_OP_SCOPE(ctx, "split_cols", src.dtype(), 2 * src.nbytes(), "{}x{} into {}", src.dim(0), src.dim(1), dsts.size());
  split_cols_table().get(ctx.device, src.dtype())(ctx, src, dsts.data(), dsts.size());
}

}  // namespace vi::ops
