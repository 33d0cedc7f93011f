// rope entry point: checks, then the (device, x dtype) kernel.
#include "ops/rope.h"

#include "ops/op_checks.h"
#include "ops/profiler.h"

namespace vi::ops {

OpTable<RopeFn>& rope_table() {
  static OpTable<RopeFn> table("rope");
  return table;
}

void rope(Context& ctx, Tensor& x, const Tensor& pos, int rot_dim, float theta) {
  check_same_device("rope", ctx, {&x});
  VI_CHECK(pos.device() == Device::CPU || pos.device() == ctx.device,
           "op 'rope': positions {} must be in host memory or on {}", describe(pos), device_name(ctx.device));
  VI_CHECK(x.ndim() == 3, "op 'rope': x {} must be [T, H, head_dim]", describe(x));
  VI_CHECK(pos.dtype() == DType::I32 && pos.ndim() == 1 && pos.dim(0) == x.dim(0),
           "op 'rope': positions {} must be [{}] i32 for x {}", describe(pos), x.dim(0), describe(x));
  VI_CHECK(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= x.dim(2),
           "op 'rope': rot_dim {} must be even and in (0, head_dim = {}] for x {}", rot_dim, x.dim(2),
           describe(x));
  VI_CHECK(theta > 0.0f, "op 'rope': theta {} must be positive", theta);
  VI_OP_SCOPE(ctx, "rope", x.dtype(), 2 * x.nbytes(), "T={} H={} D={} rot={}", x.dim(0), x.dim(1), x.dim(2), rot_dim);
  rope_table().get(ctx.device, x.dtype())(ctx, x, pos, rot_dim, theta);
}

}  // namespace vi::ops
