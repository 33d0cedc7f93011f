// CPU rotary embedding, NeoX half-split pairing, partial rot_dim, in place on f32.
// The angles follow Hugging Face exactly in fp32: inv_freq[j] = 1 / theta^((2j) / rot_dim)
// with the exponent divided in fp32, angle = float(pos) * inv_freq[j], then cos/sin.
#include "ops/rope.h"

#include <cmath>
#include <vector>

#include "backends/cpu/cpu_util.h"

// HF rounds q*cos and rotate_half(q)*sin separately before adding: no fused multiply-add.
#pragma GCC optimize("fp-contract=off")

namespace vi::cpu {
namespace {

void rope_f32(ops::Context& ctx, Tensor& x, const Tensor& pos, int rot_dim, float theta) {
  require_f32("rope", x, "x");
  const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2);
  const int half = rot_dim / 2;
  std::vector<float> inv_freq(half);
  for (int j = 0; j < half; ++j) {
    const float e = static_cast<float>(2 * j) / static_cast<float>(rot_dim);
    inv_freq[j] = 1.0f / std::pow(theta, e);
  }
  // [T, half] cos and sin, shared by every head of a token.
  std::vector<float> cs(static_cast<size_t>(T) * half), sn(static_cast<size_t>(T) * half);
  const int32_t* p = pos.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t) {
    for (int j = 0; j < half; ++j) {
      const float a = static_cast<float>(p[t]) * inv_freq[j];
      cs[t * half + j] = std::cos(a);
      sn[t * half + j] = std::sin(a);
    }
  }
  float* xp = x.ptr<float>();
  pool(ctx).parallel_for(T * H, grain_for(rot_dim), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      float* h = xp + r * D;
      const float* c = cs.data() + (r / H) * half;
      const float* s = sn.data() + (r / H) * half;
      for (int j = 0; j < half; ++j) {
        const float x1 = h[j], x2 = h[j + half];
        // Rounded like PyTorch's q*cos + rotate_half(q)*sin: two products, then the sum.
        const float a1 = x1 * c[j], b1 = x2 * s[j];
        const float a2 = x2 * c[j], b2 = x1 * s[j];
        h[j] = a1 - b1;
        h[j + half] = a2 + b2;
      }
    }
  });
}

const bool registered = [] {
  ops::rope_table().add(Device::CPU, DType::F32, rope_f32);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
