// CPU kernels of the two Gated DeltaNet norms (ops/norm.h): l2_norm for q/k and
// gated_rms_norm for the output (MODEL_QWEN35 §5.2 step 6, §3.2). fp32 math per row.
#include <cmath>
#include <vector>

#include "backends/cpu/gdn_util.h"
#include "ops/norm.h"

namespace vi::cpu::gdn {
namespace {

// Rows per work item: GDN heads are 128 wide, so a few dozen rows make a worthwhile chunk.
constexpr int64_t kRowGrain = 32;

// x, y: [R, n] of E (y may alias x).
template <class E>
void l2_norm_cpu(ops::Context& ctx, const Tensor& x, float eps, float scale, Tensor& y) {
  using S = typename E::Storage;
  const int64_t R = x.rows(), n = x.cols();
  pool_of(ctx).parallel_for(R, kRowGrain, [&](int64_t r0, int64_t r1, int) {
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = r0; r < r1; ++r) {
      load_row<E>(x.row<S>(r), n, row.data());
      float ss = 0.0f;
      for (int64_t i = 0; i < n; ++i) ss += row[i] * row[i];
      // eps sits on the SUM of squares (HF's l2norm), unlike rms_norm's mean.
      const float f = scale / std::sqrt(ss + eps);
      for (int64_t i = 0; i < n; ++i) row[i] *= f;
      store_row<E>(row.data(), n, y.row<S>(r));
    }
  });
}

// x, z, y: [R, n] of E (y may alias x or z); w: [n] f32, used as is (no 1 + w).
template <class E>
void gated_rms_norm_cpu(ops::Context& ctx, const Tensor& x, const Tensor& z, const Tensor& w,
                        float eps, Tensor& y) {
  using S = typename E::Storage;
  const int64_t R = x.rows(), n = x.cols();
  const float* wp = w.ptr<float>();
  pool_of(ctx).parallel_for(R, kRowGrain, [&](int64_t r0, int64_t r1, int) {
    std::vector<float> row(static_cast<size_t>(n)), gate(static_cast<size_t>(n));
    for (int64_t r = r0; r < r1; ++r) {
      load_row<E>(x.row<S>(r), n, row.data());
      load_row<E>(z.row<S>(r), n, gate.data());
      float ss = 0.0f;
      for (int64_t i = 0; i < n; ++i) ss += row[i] * row[i];
      const float f = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
      // Normalise first, then weight, then gate: the order HF uses.
      for (int64_t i = 0; i < n; ++i) row[i] = wp[i] * (row[i] * f) * silu(gate[i]);
      store_row<E>(row.data(), n, y.row<S>(r));
    }
  });
}

const bool registered = [] {
  auto& l2 = ops::l2_norm_table();
  l2.add(Device::CPU, DType::F32, &l2_norm_cpu<F32>);
  l2.add(Device::CPU, DType::F16, &l2_norm_cpu<F16>);
  l2.add(Device::CPU, DType::BF16, &l2_norm_cpu<BF16>);
  auto& gated = ops::gated_rms_norm_table();
  gated.add(Device::CPU, DType::F32, &gated_rms_norm_cpu<F32>);
  gated.add(Device::CPU, DType::F16, &gated_rms_norm_cpu<F16>);
  gated.add(Device::CPU, DType::BF16, &gated_rms_norm_cpu<BF16>);
  return true;
}();

}  // namespace
}  // namespace vi::cpu::gdn
