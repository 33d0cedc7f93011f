// Helpers shared by the Gated DeltaNet op tests (test_gdn_*.cpp): seeded random tensors,
// tensor <-> std::vector copies, and error measures against double-precision references.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "core/tensor.h"

namespace vi::gdn_test {

// A fresh seed per run, printed so that a failure can be replayed (VI_TEST_SEED fixes it).
inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("VI_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32);
}

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  double normal(double sd = 1.0) { return std::normal_distribution<double>(0.0, sd)(gen); }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
  int64_t integer(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
  }
  std::vector<float> normals(int64_t n, double sd = 1.0) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = static_cast<float>(normal(sd));
    return v;
  }
  std::vector<float> uniforms(int64_t n, double lo, double hi) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = static_cast<float>(uniform(lo, hi));
    return v;
  }
};

// Rounds values to what a tensor of dtype t stores, so references see the same inputs.
inline std::vector<float> rounded(std::vector<float> v, DType t) {
  for (auto& x : v) {
    if (t == DType::F16) x = round_fp16(x);
    if (t == DType::BF16) x = round_bf16(x);
  }
  return v;
}

inline Tensor make(DType t, const std::vector<int64_t>& shape, const std::vector<float>& v) {
  Tensor out = Tensor::empty(t, shape);
  EXPECT_EQ(out.numel(), static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::F32) out.ptr<float>()[i] = v[i];
    else if (t == DType::F16) out.ptr<uint16_t>()[i] = fp32_to_fp16(v[i]);
    else if (t == DType::BF16) out.ptr<uint16_t>()[i] = fp32_to_bf16(v[i]);
  }
  return out;
}

inline Tensor zeros(DType t, const std::vector<int64_t>& shape) {
  Tensor out = Tensor::empty(t, shape);
  std::fill_n(out.ptr<uint8_t>(), out.nbytes(), 0);
  return out;
}

inline std::vector<float> values(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t.dtype() == DType::F32) v[i] = t.ptr<float>()[i];
    else if (t.dtype() == DType::F16) v[i] = fp16_to_fp32(t.ptr<uint16_t>()[i]);
    else if (t.dtype() == DType::BF16) v[i] = bf16_to_fp32(t.ptr<uint16_t>()[i]);
  }
  return v;
}

// Largest |a - b| divided by the largest |b| (b is the reference): one scale for the whole
// tensor, so near-zero reference entries do not blow the measure up.
template <class A, class B>
double max_rel_err(const std::vector<A>& a, const std::vector<B>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// Largest elementwise |a - b| / (atol + |b|).
template <class A, class B>
double max_mixed_err(const std::vector<A>& a, const std::vector<B>& b, double atol) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double r = static_cast<double>(b[i]);
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - r) / (atol + std::abs(r)));
  }
  return worst;
}

// Whether two tensors hold the same bytes (the fused ops against the ops they stand for).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

}  // namespace vi::gdn_test
