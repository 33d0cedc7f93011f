#include "ops/registry.h"

namespace vi::ops {

void check_same_device(const char* op, const Context& ctx, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    VI_CHECK(t->device() == ctx.device, "op '{}': tensor {} is on {} but the op runs on {}", op,
             t->name().empty() ? t->shape_str() : t->name(), device_name(t->device()),
             device_name(ctx.device));
  }
}

}  // namespace vi::ops
