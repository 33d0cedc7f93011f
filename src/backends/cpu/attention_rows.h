// The CPU attention loop shared by the contiguous and the paged op: fp32 math, exact
// two-pass softmax, one task per (query token, query head). Only the mapping from a key
// position to its cache row differs between the two, so paged attention is bit-identical
// to contiguous attention over the same keys. K/V rows may be f32, f16 (bits) or i8 with a
// per-(row, head) scale; i8 K rows hold Hadamard-rotated keys (ops/kv_quant.h), so the
// query is rotated the same way first.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_util.h"
#include "backends/cpu/simd.h"
#include "core/half.h"
#include "ops/kv_quant.h"

namespace vi::cpu {

// Widened f32 view of one cache row r [D] of kv head h (f32 rows are used in place).
// scale: [n_rows, Hkv] f32 for i8 rows, else unused.
template <class KV>
const float* widen_kv_row(const KV* base, const float* scale, int64_t r, int64_t h, int64_t Hkv, int64_t D,
                          float* tmp) {
  const KV* p = base + (r * Hkv + h) * D;
  if constexpr (std::is_same_v<KV, float>) {
    return p;
  } else if constexpr (std::is_same_v<KV, int8_t>) {
    const float s = scale[r * Hkv + h];
    for (int64_t i = 0; i < D; ++i) tmp[i] = s * static_cast<float>(p[i]);
    return tmp;
  } else {
    for (int64_t i = 0; i < D; ++i) tmp[i] = fp16_to_fp32(p[i]);
    return tmp;
  }
}

// q: [T, Hq, D] f32; k, v: cache rows [*, Hkv, D] of KT / VT (float, fp16 bits, int8);
// k_scale / v_scale: [*, Hkv] f32 for int8 rows (else null); out: [T, Hq, D] f32.
// row_of(s) gives the cache row holding key position s.
template <class KT, class VT, class RowOf>
void attention_rows(ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const float* k_scale,
                    const float* v_scale, int64_t q_pos0, float scale, Tensor& out, RowOf row_of) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k.dim(1);
  const int64_t group = Hq / Hkv, S = q_pos0 + T;
  const KT* kp = k.ptr<KT>();
  const VT* vp = v.ptr<VT>();
  const float* qp = q.ptr<float>();
  float* op = out.ptr<float>();
  pool(ctx).parallel_for(T * Hq, grain_for(S * D), [&](int64_t i0, int64_t i1, int) {
    std::vector<float> scores(static_cast<size_t>(S));
    std::vector<float> tmp(static_cast<size_t>(D)), qrot(static_cast<size_t>(D));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / Hq, h = i % Hq, hk = h / group;
      const int64_t n_keys = q_pos0 + t + 1;  // causal: keys 0 .. own position
      const float* qr = qp + i * D;
      if constexpr (std::is_same_v<KT, int8_t>) {  // keys are stored rotated: rotate q too
        for (int64_t d = 0; d < D; ++d) qrot[d] = qr[d];
        ops::hadamard_rotate(qrot.data(), D);
        qr = qrot.data();
      }
      float mx = -INFINITY;
      for (int64_t s = 0; s < n_keys; ++s) {
        scores[s] = simd::dot(qr, widen_kv_row(kp, k_scale, row_of(s), hk, Hkv, D, tmp.data()), D) * scale;
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
      for (int64_t s = 0; s < n_keys; ++s)
        simd::axpy(scores[s] * inv, widen_kv_row(vp, v_scale, row_of(s), hk, Hkv, D, tmp.data()), o, D);
    }
  });
}

}  // namespace vi::cpu
