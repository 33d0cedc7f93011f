// Uniform random test values, fast enough for the large tensors of the GPU tests (K/V pools of
// 16K rows: 16.8M values a pool, where std::mt19937 with uniform_real_distribution and a
// software f16 round took ~0.15 s a pool, most of an attention test's host time).
//
// splitmix64 (one 64-bit state; two 24-bit draws an output) seeded by the caller, so a test's
// process-wide generator still decides every value and a printed seed still replays a run.
// Values are lo + (hi - lo) u for u in [0, 1) on a 2^-24 grid; f16-rounded on request with
// round-to-nearest-even (the bits of vi::round_fp16).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/half.h"

namespace vi::testutil {

class FastUniform {
 public:
  explicit FastUniform(uint64_t seed) : state_(seed) {}

  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  // n values in [lo, hi) into p; f16: each rounded to the nearest f16 value (as round_fp16).
  void fill(float* p, int64_t n, float lo, float hi, bool f16) {
    const float w = hi - lo;
    int64_t i = 0;
    for (; i + 1 < n; i += 2) {
      const uint64_t r = next_u64();
      p[i] = value(static_cast<uint32_t>(r >> 40), lo, w, f16);
      p[i + 1] = value(static_cast<uint32_t>(r >> 16) & 0xffffffu, lo, w, f16);
    }
    if (i < n) p[i] = value(static_cast<uint32_t>(next_u64() >> 40), lo, w, f16);
  }

  // round_fp16 by bits where the value is a normal f16 (the common case: the mantissa rounded
  // to 10 bits, ties to even); elsewhere (subnormal, overflow, NaN) round_fp16 itself.
  static float round_f16(float x) {
    uint32_t b;
    std::memcpy(&b, &x, sizeof(b));
    const uint32_t a = b & 0x7fffffffu;
    if (a < 0x38800000u || a >= 0x477fe000u) return round_fp16(x);
    b += 0x0fffu + ((b >> 13) & 1u);
    b &= ~0x1fffu;
    float y;
    std::memcpy(&y, &b, sizeof(y));
    return y;
  }

 private:
  static float value(uint32_t bits24, float lo, float w, bool f16) {
    const float x = lo + w * (static_cast<float>(bits24) * 0x1p-24f);
    return f16 ? round_f16(x) : x;
  }

  uint64_t state_;
};

}  // namespace vi::testutil
