// CPU bias add over rows (fp32).
#include "ops/bias.h"

namespace vi::cpu {
namespace {

void add_bias_f32(ops::Context&, const Tensor& x, const Tensor& bias, Tensor& out) {
  const float* b = bias.ptr<float>();
  const int64_t n = x.cols();
  for (int64_t r = 0; r < x.rows(); ++r) {
    const float* xr = x.row<float>(r);
    float* o = out.row<float>(r);
    for (int64_t i = 0; i < n; ++i) o[i] = xr[i] + b[i];
  }
}

const bool registered = [] {
  ops::add_bias_table().add(Device::CPU, DType::F32, add_bias_f32);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
