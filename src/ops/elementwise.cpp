// Element-wise op entry points (add, swiglu, swiglu_halves, sigmoid_mul, softmax): checks, then kernels.
#include "ops/elementwise.h"

#include "ops/op_checks.h"
#include "ops/profiler.h"

namespace vi::ops {

OpTable<BinaryFn>& add_table() {
  static OpTable<BinaryFn> table("add");
  return table;
}
OpTable<BinaryFn>& swiglu_table() {
  static OpTable<BinaryFn> table("swiglu");
  return table;
}
OpTable<UnaryFn>& swiglu_halves_table() {
  static OpTable<UnaryFn> table("swiglu_halves");
  return table;
}
OpTable<BinaryFn>& sigmoid_mul_table() {
  static OpTable<BinaryFn> table("sigmoid_mul");
  return table;
}
OpTable<UnaryFn>& softmax_table() {
  static OpTable<UnaryFn> table("softmax");
  return table;
}

namespace {
void check_binary(const char* op, const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_device(op, ctx, {&a, &b, &out});
  VI_CHECK(a.numel() == b.numel() && a.cols() == b.cols() && a.dtype() == b.dtype(),
           "op '{}': operands {} and {} must match", op, describe(a), describe(b));
  VI_CHECK(a.numel() == out.numel() && a.cols() == out.cols() && a.dtype() == out.dtype(),
           "op '{}': out {} must match the operands {}", op, describe(out), describe(a));
}
}  // namespace

void add(Context& ctx, const Tensor& a, const Tensor& b, Tensor& out) {
  check_binary("add", ctx, a, b, out);
  VI_OP_SCOPE(ctx, "add", a.dtype(), 3 * a.nbytes(), "{}x{}", a.rows(), a.cols());
  add_table().get(ctx.device, a.dtype())(ctx, a, b, out);
}

void swiglu(Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out) {
  check_binary("swiglu", ctx, gate, up, out);
  VI_OP_SCOPE(ctx, "swiglu", gate.dtype(), 3 * gate.nbytes(), "{}x{}", gate.rows(), gate.cols());
  swiglu_table().get(ctx.device, gate.dtype())(ctx, gate, up, out);
}

void swiglu_halves(Context& ctx, const Tensor& gu, Tensor& out) {
  check_same_device("swiglu_halves", ctx, {&gu, &out});
  VI_CHECK(gu.ndim() >= 1 && gu.cols() % 2 == 0 && out.cols() * 2 == gu.cols() && out.rows() == gu.rows() &&
               out.dtype() == gu.dtype(),
           "op 'swiglu_halves': out {} must be gu {} with half the columns", describe(out), describe(gu));
  const auto* g0 = static_cast<const uint8_t*>(gu.data());
  const auto* o0 = static_cast<const uint8_t*>(out.data());
  VI_CHECK(gu.numel() == 0 || o0 + out.nbytes() <= g0 || g0 + gu.nbytes() <= o0,
           "op 'swiglu_halves': out {} overlaps gu {}", describe(out), describe(gu));
  VI_OP_SCOPE(ctx, "swiglu_halves", gu.dtype(), gu.nbytes() + out.nbytes(), "{}x{}", out.rows(), out.cols());
  swiglu_halves_table().get(ctx.device, gu.dtype())(ctx, gu, out);
}

void sigmoid_mul(Context& ctx, const Tensor& x, const Tensor& gate, Tensor& out) {
  check_binary("sigmoid_mul", ctx, x, gate, out);
  VI_OP_SCOPE(ctx, "sigmoid_mul", x.dtype(), 3 * x.nbytes(), "{}x{}", x.rows(), x.cols());
  sigmoid_mul_table().get(ctx.device, x.dtype())(ctx, x, gate, out);
}

void softmax(Context& ctx, const Tensor& x, Tensor& out) {
  check_same_device("softmax", ctx, {&x, &out});
  VI_CHECK(x.numel() == out.numel() && x.cols() == out.cols() && x.dtype() == out.dtype(),
           "op 'softmax': out {} must match x {}", describe(out), describe(x));
  VI_OP_SCOPE(ctx, "softmax", x.dtype(), 2 * x.nbytes(), "{}x{}", x.rows(), x.cols());
  softmax_table().get(ctx.device, x.dtype())(ctx, x, out);
}

}  // namespace vi::ops
