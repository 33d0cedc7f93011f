// The CPU attention loop shared by the contiguous and the paged op: fp32 math, exact
// two-pass softmax, one task per (query token, query head). Only the mapping from a key
// position to its cache row differs between the two, so paged attention is bit-identical
// to contiguous attention over the same keys.
#pragma once

#include <cmath>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_util.h"
#include "backends/cpu/simd.h"
#include "core/half.h"

namespace vi::cpu {

// q: [T, Hq, D] f32; k, v: cache rows [*, Hkv, D] of KV (float or fp16 bits);
// out: [T, Hq, D] f32. row_of(s) gives the cache row holding key position s.
template <class KV, class RowOf>
void attention_rows(ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos0,
                    float scale, Tensor& out, RowOf row_of) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k.dim(1);
  const int64_t group = Hq / Hkv, S = q_pos0 + T;
  const KV* kp = k.ptr<KV>();
  const KV* vp = v.ptr<KV>();
  const float* qp = q.ptr<float>();
  float* op = out.ptr<float>();
  // Widened f32 view of one K or V row [D] (f32 rows are used in place).
  auto kv_row = [&](const KV* base, int64_t s, int64_t h, float* tmp) -> const float* {
    const KV* r = base + (row_of(s) * Hkv + h) * D;
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
      const int64_t n_keys = q_pos0 + t + 1;  // causal: keys 0 .. own position
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

}  // namespace vi::cpu
