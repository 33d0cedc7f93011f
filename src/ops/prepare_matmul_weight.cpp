// prepare_matmul_weight entry point: shape/device checks, then the device's repack (or none).
#include "ops/prepare_matmul_weight.h"

#include "ops/op_checks.h"

namespace vi::ops {

OpTable<PrepareMatmulWeightFn>& prepare_matmul_weight_table() {
  static OpTable<PrepareMatmulWeightFn> table("prepare_matmul_weight");
  return table;
}

Tensor prepare_matmul_weight(Context& ctx, const Tensor& w, const std::vector<int64_t>& parts, MatmulInput input,
                             MatmulUse use) {
  check_same_device("prepare_matmul_weight", ctx, {&w});
  VI_CHECK(w.ndim() == 2, "op 'prepare_matmul_weight': weight {} must be 2-D [N, K]", describe(w));
  int64_t rows = 0;
  for (int64_t p : parts) {
    VI_CHECK(p >= 0, "op 'prepare_matmul_weight': a view of {} rows", p);
    rows += p;
  }
  VI_CHECK(parts.empty() || rows == w.dim(0), "op 'prepare_matmul_weight': views of {} rows in all for weight {}",
           rows, describe(w));
  VI_CHECK(use != MatmulUse::kSwiglu || (w.dim(0) % 2 == 0 && (parts.empty() || (parts.size() == 2 &&
                                                                                   parts[0] == w.dim(0) / 2))),
           "op 'prepare_matmul_weight': a SwiGLU gate|up stack must be [2F, K] with views {{F, F}}, got {} with {} "
           "views",
           describe(w), parts.size());
  // The CPU kernels read the file layouts directly: identity there, and for any dtype a
  // device has no repack for.
  if (!prepare_matmul_weight_table().supports(ctx.device, w.dtype())) return w;
  return prepare_matmul_weight_table().get(ctx.device, w.dtype())(ctx, w, parts, input, use);
}

}  // namespace vi::ops
