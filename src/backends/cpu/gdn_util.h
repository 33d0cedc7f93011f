// Small helpers shared by the CPU Gated DeltaNet kernels (gdn_*.cpp, norm_gdn.cpp):
// element conversion between the activation dtypes (f32/f16/bf16) and fp32, and the pool.
// Kernels are templated on the activation element type; all math is fp32.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "core/thread_pool.h"
#include "ops/registry.h"

namespace vi::cpu::gdn {

// Tag types naming the storage of one activation element.
struct F32 {
  using Storage = float;
  static float load(float x) { return x; }
  static float store(float x) { return x; }
};
struct F16 {
  using Storage = uint16_t;
  static float load(uint16_t x) { return fp16_to_fp32(x); }
  static uint16_t store(float x) { return fp32_to_fp16(x); }
};
struct BF16 {
  using Storage = uint16_t;
  static float load(uint16_t x) { return bf16_to_fp32(x); }
  static uint16_t store(float x) { return fp32_to_bf16(x); }
};

template <class E>
inline void load_row(const typename E::Storage* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = E::load(src[i]);
}
template <class E>
inline void store_row(const float* src, int64_t n, typename E::Storage* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = E::store(src[i]);
}

inline ThreadPool& pool_of(const ops::Context& ctx) {
  return ctx.pool ? *ctx.pool : ThreadPool::global();
}

// PyTorch's softplus with beta = 1, threshold = 20: the identity above the threshold.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace vi::cpu::gdn
