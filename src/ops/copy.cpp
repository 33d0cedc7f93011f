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

OpTable<CopyBatchFn>& copy_batch_table() {
  static OpTable<CopyBatchFn> table("copy_batch");
  return table;
}

void copy_batch(Context& ctx, const std::vector<Tensor>& srcs, const std::vector<Tensor>& dsts) {
  VI_CHECK(srcs.size() == dsts.size(), "copy_batch: {} sources, {} destinations", srcs.size(), dsts.size());
  if (srcs.empty()) return;
  double bytes = 0;
  for (size_t i = 0; i < srcs.size(); ++i) {
    check_same_device("copy_batch", ctx, {&srcs[i], &dsts[i]});
    VI_CHECK(srcs[i].dtype() == dsts[i].dtype() && srcs[i].numel() == dsts[i].numel(),
             "copy_batch: pair {}: {} {} into {} {}", i, srcs[i].shape_str(), dtype_name(srcs[i].dtype()),
             dsts[i].shape_str(), dtype_name(dsts[i].dtype()));
    bytes += 2.0 * static_cast<double>(srcs[i].nbytes());
  }
  VI_OP_SCOPE(ctx, "copy_batch", srcs[0].dtype(), bytes, "{} tensors", srcs.size());
  copy_batch_table().get(ctx.device, srcs[0].dtype())(ctx, srcs.data(), dsts.data(), srcs.size());
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
