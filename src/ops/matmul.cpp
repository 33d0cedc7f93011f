// matmul entry point: shape/dtype/device checks, then the (device, weight dtype) kernel.
#include "ops/matmul.h"

#include "ops/copy.h"
#include "ops/elementwise.h"
#include "ops/op_checks.h"
#include "ops/profiler.h"

namespace vi::ops {

OpTable<MatmulFn>& matmul_table() {
  static OpTable<MatmulFn> table("matmul");
  return table;
}

void matmul(Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  check_same_device("matmul", ctx, {&x, &w, &y});
  VI_CHECK(w.ndim() == 2, "op 'matmul': weight {} must be 2-D [N, K]", describe(w));
  VI_CHECK(x.ndim() >= 1 && x.cols() == w.dim(1),
           "op 'matmul': x {} and weight {} disagree on K ({} vs {})", describe(x), describe(w),
           x.cols(), w.dim(1));
  VI_CHECK(y.ndim() >= 1 && y.cols() == w.dim(0) && y.rows() == x.rows(),
           "op 'matmul': y {} must hold [{}, {}] for x {} and weight {}", describe(y), x.rows(),
           w.dim(0), describe(x), describe(w));
  VI_CHECK(matmul_act_dtype(x) == y.dtype() && !dtype_is_quantized(y.dtype()),
           "op 'matmul': x {} and y {} must share one unquantized activation dtype (or x Q8_KX, y f16)",
           describe(x), describe(y));
  // Bytes the op must move (evaluated only under a profiler): the weight as the file stores
  // it. A device layout may read a few percent more (Q4_KR: 148 bytes per 256 values, Q4_K
  // 144); MBU counts only what is needed.
  VI_OP_SCOPE_F(ctx, "matmul", w.dtype(),
                x.nbytes() + dtype_row_bytes(dtype_file_form(w.dtype()), w.dim(1)) * static_cast<size_t>(w.dim(0)) +
                    y.nbytes(),
                2.0 * w.dim(0) * w.dim(1) * x.rows(),
                "{}x{} T={}", w.dim(0), w.dim(1), x.rows());
  matmul_table().get(ctx.device, w.dtype())(ctx, x, w, y);
}

OpTable<MatmulSwigluFn>& matmul_swiglu_table() {
  static OpTable<MatmulSwigluFn> table("matmul_swiglu");
  return table;
}

void matmul_swiglu(Context& ctx, const Tensor& x, const Tensor& w, Tensor& gu, Tensor& h) {
  check_same_device("matmul_swiglu", ctx, {&x, &w, &gu, &h});
  VI_CHECK(w.ndim() == 2 && w.dim(0) % 2 == 0, "op 'matmul_swiglu': weight {} must be a stacked gate|up [2F, K]",
           describe(w));
  VI_CHECK(h.ndim() >= 1 && h.cols() * 2 == w.dim(0) && h.rows() == x.rows() && h.dtype() == matmul_act_dtype(x),
           "op 'matmul_swiglu': h {} must hold [{}, {}] of x's dtype for x {} and weight {}", describe(h), x.rows(),
           w.dim(0) / 2, describe(x), describe(w));
  VI_CHECK(x.ndim() >= 1 && x.cols() == w.dim(1), "op 'matmul_swiglu': x {} and weight {} disagree on K",
           describe(x), describe(w));
  if (matmul_swiglu_table().supports(ctx.device, w.dtype())) {
    const MatmulSwigluFn fn = matmul_swiglu_table().get(ctx.device, w.dtype());
    if (fn(ctx, x, w, nullptr)) {
      VI_OP_SCOPE_F(ctx, "matmul_swiglu", w.dtype(),
                    x.nbytes() + dtype_row_bytes(dtype_file_form(w.dtype()), w.dim(1)) * static_cast<size_t>(w.dim(0)) +
                        h.nbytes(),
                    2.0 * w.dim(0) * w.dim(1) * x.rows(), "{}x{} T={}", w.dim(0), w.dim(1), x.rows());
      fn(ctx, x, w, &h);
      return;
    }
  }
  matmul(ctx, x, w, gu);
  swiglu_halves(ctx, gu, h);
}

OpTable<MatmulSplitFn>& matmul_split_table() {
  static OpTable<MatmulSplitFn> table("matmul_split");
  return table;
}

void matmul_split(Context& ctx, const Tensor& x, const Tensor& w, Tensor& all, const std::vector<Tensor*>& parts) {
  check_same_device("matmul_split", ctx, {&x, &w, &all});
  VI_CHECK(!parts.empty() && parts.size() <= kSplitMaxParts, "op 'matmul_split': {} parts (1 to {})", parts.size(),
           kSplitMaxParts);
  int64_t width = 0;
  for (const Tensor* p : parts) {
    check_same_device("matmul_split", ctx, {p});
    VI_CHECK(p->ndim() == 2 && p->dim(0) == x.rows() && p->dtype() == matmul_act_dtype(x),
             "op 'matmul_split': part {} must be [{}, w] of x's activation dtype {}", describe(*p), x.rows(),
             dtype_name(matmul_act_dtype(x)));
    width += p->dim(1);
  }
  VI_CHECK(w.ndim() == 2 && width == w.dim(0), "op 'matmul_split': parts {} rows wide in all, weight {}", width,
           describe(w));
  VI_CHECK(all.ndim() == 2 && all.dim(0) == x.rows() && all.dim(1) == w.dim(0) && all.dtype() == matmul_act_dtype(x),
           "op 'matmul_split': all {} must be [{}, {}] {}", describe(all), x.rows(), w.dim(0),
           dtype_name(matmul_act_dtype(x)));
  if (matmul_split_table().supports(ctx.device, w.dtype())) {
    const MatmulSplitFn fn = matmul_split_table().get(ctx.device, w.dtype());
    VI_CHECK(x.ndim() >= 1 && x.cols() == w.dim(1), "op 'matmul_split': x {} and weight {} disagree on K",
             describe(x), describe(w));
    if (fn(ctx, x, w, parts, false)) {
      VI_OP_SCOPE_F(ctx, "matmul_split", w.dtype(),
                    x.nbytes() + dtype_row_bytes(dtype_file_form(w.dtype()), w.dim(1)) * static_cast<size_t>(w.dim(0)) +
                        all.nbytes(),
                    2.0 * w.dim(0) * w.dim(1) * x.rows(), "{}x{} T={} into {}", w.dim(0), w.dim(1), x.rows(),
                    parts.size());
      fn(ctx, x, w, parts, true);
      return;
    }
  }
  matmul(ctx, x, w, all);
  split_cols(ctx, all, parts);
}

bool matmul_split_direct(Context& ctx, const Tensor& x, const Tensor& w, const std::vector<Tensor*>& parts) {
  if (!matmul_split_table().supports(ctx.device, w.dtype())) return false;
  return matmul_split_table().get(ctx.device, w.dtype())(ctx, x, w, parts, false);
}

OpTable<MatmulInputDtypeFn>& matmul_input_dtype_table() {
  static OpTable<MatmulInputDtypeFn> table("matmul_input_dtype");
  return table;
}

DType matmul_input_dtype(Context& ctx, const Tensor& w, int64_t T) {
  if (!matmul_input_dtype_table().supports(ctx.device, w.dtype())) return ctx.act;
  return matmul_input_dtype_table().get(ctx.device, w.dtype())(ctx, w, T);
}

}  // namespace vi::ops
