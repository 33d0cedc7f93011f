// CPU pieces of the deferred norm (ops/deferred_norm.h), fp32: add_deferred_norm (x += o, then u
// and the per-part sums of squares of the new x, each part's squares added in row order) and
// finish_deferred_norm (y = u · s, the parts' sums added in order).
#include <cmath>

#include "backends/cpu/cpu_util.h"
#include "ops/deferred_norm.h"

namespace vi::cpu {
namespace {

void add_deferred_norm_f32(ops::Context& ctx, Tensor& x, const Tensor& o, const Tensor& norm_w, float w_offset,
                           ops::DeferredNorm& out) {
  require_f32("add_deferred_norm", x, "x");
  const int64_t n = x.cols(), parts = n / ops::kDeferredNormPartRows;
  const float* wp = norm_w.ptr<float>();
  pool(ctx).parallel_for(x.rows(), grain_for(n), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      float* xr = x.row<float>(r);
      const float* orow = o.row<float>(r);
      float* ur = out.u.row<float>(r);
      float* ssr = out.ss.row<float>(r);
      for (int64_t p = 0; p < parts; ++p) {
        float s = 0.0f;
        for (int64_t i = p * ops::kDeferredNormPartRows; i < (p + 1) * ops::kDeferredNormPartRows; ++i) {
          xr[i] = xr[i] + orow[i];
          s += xr[i] * xr[i];
          ur[i] = xr[i] * (wp[i] + w_offset) / ops::kDeferredNormUnit;
        }
        ssr[p] = s;
      }
    }
  });
}

void finish_deferred_norm_f32(ops::Context& ctx, const ops::DeferredNorm& in, Tensor& y) {
  require_f32("finish_deferred_norm", in.u, "u");
  const int64_t n = in.u.cols(), parts = in.ss.cols();
  pool(ctx).parallel_for(in.u.rows(), grain_for(n), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* ssr = in.ss.row<float>(r);
      float sum = 0.0f;
      for (int64_t p = 0; p < parts; ++p) sum += ssr[p];
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
