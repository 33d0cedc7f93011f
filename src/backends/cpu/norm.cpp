// CPU rms_norm: y = x * rsqrt(mean(x²) + eps) * (w + w_offset), fp32 math, rows in parallel;
// add_rms_norm: the residual add x += o first, then the same norm of the new x (the same
// arithmetic in the same order, so it equals add then rms_norm bit for bit).
// (The Gated DeltaNet norms are in norm_gdn.cpp.)
#include "ops/norm.h"

#include <cmath>

#include "backends/cpu/cpu_util.h"
#include "backends/cpu/simd.h"

namespace vi::cpu {
namespace {

void rms_norm_f32(ops::Context& ctx, const Tensor& x, const Tensor& w, float eps, float w_offset, Tensor& y) {
  require_f32("rms_norm", x, "x");
  const int64_t n = x.cols();
  const float* wp = w.ptr<float>();
  pool(ctx).parallel_for(x.rows(), grain_for(n), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x.row<float>(r);
      float* yr = y.row<float>(r);
      const float ss = simd::dot(xr, xr, n);
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * inv) * (wp[i] + w_offset);
    }
  });
}

void add_rms_norm_f32(ops::Context& ctx, Tensor& x, const Tensor& o, const Tensor& w, float eps, float w_offset,
                      Tensor& y) {
  require_f32("add_rms_norm", x, "x");
  const int64_t n = x.cols();
  const float* wp = w.ptr<float>();
  pool(ctx).parallel_for(x.rows(), grain_for(n), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      float* xr = x.row<float>(r);
      const float* orow = o.row<float>(r);
      float* yr = y.row<float>(r);  // may be orow: o's row is read in full before y's is written
      for (int64_t i = 0; i < n; ++i) xr[i] = xr[i] + orow[i];
      const float ss = simd::dot(xr, xr, n);
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * inv) * (wp[i] + w_offset);
    }
  });
}

const bool registered = [] {
  ops::rms_norm_table().add(Device::CPU, DType::F32, rms_norm_f32);
  ops::add_rms_norm_table().add(Device::CPU, DType::F32, add_rms_norm_f32);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
