// CUDA rotary embedding (ops/rope.h): NeoX half-split pairing, partial rot_dim, in place.
#pragma once

#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

// cos and sin of the angle of frequency j (< rot_dim / 2) at position pos, as HF computes
// them in fp32: inv_freq = 1 / theta^(2j / rot_dim), angle = float(pos) * inv_freq. Every
// kernel that rotates takes them from here, so fused ones round as the rope op does.
// In two halves for kernels that compute the frequency before pdl_wait (it needs no input)
// and the angle after it: rope_cos_sin(pos, j, ...) = rope_cos_sin_at(pos, rope_inv_freq(j, ...)).
__device__ __forceinline__ float rope_inv_freq(int j, int rot_dim, float theta) {
  return 1.0f / powf(theta, static_cast<float>(2 * j) / static_cast<float>(rot_dim));
}
__device__ __forceinline__ void rope_cos_sin_at(int32_t pos, float inv_freq, float& c, float& s) {
  const float a = __fmul_rn(static_cast<float>(pos), inv_freq);
  c = cosf(a);
  s = sinf(a);
}
__device__ __forceinline__ void rope_cos_sin(int32_t pos, int j, int rot_dim, float theta, float& c, float& s) {
  rope_cos_sin_at(pos, rope_inv_freq(j, rot_dim, theta), c, s);
}

// The pair (x[j], x[j + rot_dim/2]) rotated, products and sums rounded separately (never
// fused), like PyTorch's q*cos + rotate_half(q)*sin.
__device__ __forceinline__ float2 rope_rotate(float x1, float x2, float c, float s) {
  return make_float2(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)), __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
}

}  // namespace vi::cuda
