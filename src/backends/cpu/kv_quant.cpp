// CPU quantizing scatter of new K/V rows into an int8 pool (ops/kv_quant.h): per row and
// kv head, optionally Hadamard-rotate, then scale = max|x| / 127 and round to nearest.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_util.h"
#include "core/half.h"
#include "ops/kv_quant.h"

namespace vi::cpu {
namespace {

template <class X>
void kv_write_i8_cpu(ops::Context& ctx, const Tensor& x, Tensor& kv, Tensor& scale, const Tensor& row_idx,
                     bool rotate) {
  const int32_t* rows = row_idx.ptr<int32_t>();
  const int64_t T = x.dim(0), Hkv = kv.dim(1), D = kv.dim(2);
  const X* xp = x.ptr<X>();
  int8_t* qp = kv.ptr<int8_t>();
  float* sp = scale.ptr<float>();
  pool(ctx).parallel_for(T * Hkv, grain_for(4 * D), [&](int64_t i0, int64_t i1, int) {
    std::vector<float> tmp(static_cast<size_t>(D));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / Hkv, h = i % Hkv, r = rows[t];
      const X* src = xp + t * Hkv * D + h * D;
      for (int64_t d = 0; d < D; ++d) {
        if constexpr (std::is_same_v<X, float>) tmp[d] = src[d];
        else tmp[d] = fp16_to_fp32(src[d]);
      }
      if (rotate) ops::hadamard_rotate(tmp.data(), D);
      float amax = 0.0f;
      for (int64_t d = 0; d < D; ++d) amax = std::max(amax, std::fabs(tmp[d]));
      const float s = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      int8_t* dst = qp + (r * Hkv + h) * D;
      for (int64_t d = 0; d < D; ++d)
        dst[d] = static_cast<int8_t>(std::clamp(std::nearbyint(tmp[d] * inv), -127.0f, 127.0f));
      sp[r * Hkv + h] = s;
    }
  });
}

const bool registered = [] {
  ops::paged_kv_write_i8_table().add(Device::CPU, DType::F32, kv_write_i8_cpu<float>);
  ops::paged_kv_write_i8_table().add(Device::CPU, DType::F16, kv_write_i8_cpu<uint16_t>);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
