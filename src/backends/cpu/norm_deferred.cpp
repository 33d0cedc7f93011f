// CPU pieces of the deferred norm (ops/deferred_norm.h), fp32: add_deferred_norm (x += o, then u
// and the fixed-point sum of squares of the new x, added to slot 0) and finish_deferred_norm
// (y = u · s).
#include <cmath>
#include <cstdint>

#include "backends/cpu/cpu_util.h"
#include "ops/deferred_norm.h"

namespace vi::cpu {
namespace {

// x² as the fixed-point words of ops/deferred_norm.h (the GPU producers encode the same way).
void add_square(float x, uint64_t& fine, uint64_t& coarse) {
  const float v = std::fmin(x * x, ops::kDeferredNormClamp);  // a NaN square becomes the clamp too
  if (v < ops::kDeferredNormFineLimit)
    fine += static_cast<uint64_t>(std::llrint(v * ops::kDeferredNormFineScale));
  else
    coarse += static_cast<uint64_t>(std::llrint(v * ops::kDeferredNormCoarseScale));
}

void add_deferred_norm_f32(ops::Context& ctx, Tensor& x, const Tensor& o, const Tensor& norm_w, float w_offset,
                           ops::DeferredNorm& out) {
  require_f32("add_deferred_norm", x, "x");
  const int64_t n = x.cols();
  const float* wp = norm_w.ptr<float>();
  pool(ctx).parallel_for(x.rows(), grain_for(n), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      float* xr = x.row<float>(r);
      const float* orow = o.row<float>(r);
      float* ur = out.u.row<float>(r);
      uint64_t fine = 0, coarse = 0;
      for (int64_t i = 0; i < n; ++i) {
        xr[i] = xr[i] + orow[i];
        add_square(xr[i], fine, coarse);
        ur[i] = xr[i] * (wp[i] + w_offset) / ops::kDeferredNormUnit;
      }
      uint64_t* ssr = reinterpret_cast<uint64_t*>(out.ss.row<int64_t>(r));
      ssr[0] += fine;
      ssr[1] += coarse;
    }
  });
}

void finish_deferred_norm_f32(ops::Context& ctx, const ops::DeferredNorm& in, Tensor& y) {
  require_f32("finish_deferred_norm", in.u, "u");
  const int64_t n = in.u.cols();
  pool(ctx).parallel_for(in.u.rows(), grain_for(n), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float sum = ops::deferred_norm_total(in.ss, r);
      const float s = ops::kDeferredNormUnit / std::sqrt(sum / static_cast<float>(n) + in.eps);
      const float* ur = in.u.row<float>(r);
      float* yr = y.row<float>(r);
      for (int64_t i = 0; i < n; ++i) yr[i] = ur[i] * s;
    }
  });
}

const bool registered = [] {
  ops::add_deferred_norm_table().add(Device::CPU, DType::F32, add_deferred_norm_f32);
  ops::finish_deferred_norm_table().add(Device::CPU, DType::F32, finish_deferred_norm_f32);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
