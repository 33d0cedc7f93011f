// CPU attention through a block table: the loop of cpu/attention.cpp with each key row
// looked up in the pool, so results are bit-identical to attention over contiguous K/V.
#include "ops/paged_attention.h"

#include <cmath>
#include <vector>

#include "backends/cpu/cpu_util.h"
#include "backends/cpu/simd.h"
#include "core/half.h"

namespace vi::cpu {
namespace {

template <class KV>
void paged_attention_cpu(ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& block_table, int64_t bs, int64_t q_pos0, float scale, Tensor& out) {
  require_f32("paged_attention", q, "q");
  require_f32("paged_attention", out, "out");
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k.dim(1);
  const int64_t group = Hq / Hkv, S = q_pos0 + T;
  const KV* kp = k.ptr<KV>();
  const KV* vp = v.ptr<KV>();
  const int32_t* tbl = block_table.ptr<int32_t>();
  const float* qp = q.ptr<float>();
  float* op = out.ptr<float>();
  auto kv_row = [&](const KV* base, int64_t s, int64_t h, float* tmp) -> const float* {
    const int64_t row = static_cast<int64_t>(tbl[s / bs]) * bs + s % bs;
    const KV* r = base + (row * Hkv + h) * D;
    if constexpr (std::is_same_v<KV, float>) {
      return r;
    } else {
      for (int64_t i = 0; i < D; ++i) tmp[i] = fp16_to_fp32(r[i]);
      return tmp;
    }
  };
  pool(ctx).parallel_for(T * Hq, grain_for(S * D), [&](int64_t i0, int64_t i1, int) {
    std::vector<float> scores(static_cast<size_t>(S));
    std::vector<float> tmp(static_cast<size_t>(D));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / Hq, h = i % Hq, hk = h / group;
      const int64_t n_keys = q_pos0 + t + 1;
      const float* qr = qp + i * D;
      float mx = -INFINITY;
      for (int64_t s = 0; s < n_keys; ++s) {
        scores[s] = simd::dot(qr, kv_row(kp, s, hk, tmp.data()), D) * scale;
        mx = std::max(mx, scores[s]);
      }
      float sum = 0.0f;
      for (int64_t s = 0; s < n_keys; ++s) {
        scores[s] = std::exp(scores[s] - mx);
        sum += scores[s];
      }
      const float inv = 1.0f / sum;
      float* o = op + i * D;
      for (int64_t d = 0; d < D; ++d) o[d] = 0.0f;
      for (int64_t s = 0; s < n_keys; ++s) simd::axpy(scores[s] * inv, kv_row(vp, s, hk, tmp.data()), o, D);
    }
  });
}

const bool registered = [] {
  ops::paged_attention_table().add(Device::CPU, DType::F32, paged_attention_cpu<float>);
  ops::paged_attention_table().add(Device::CPU, DType::F16, paged_attention_cpu<uint16_t>);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
