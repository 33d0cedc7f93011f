// Helpers for the CUDA op tests: random host inputs, moving them to the GPU in the
// activation dtype under test, and comparing a GPU result with the CPU reference op.
// The CPU backend (fp32) is the reference; f16 inputs are rounded to f16 on the host
// first, so both sides see the same values and only the op's own rounding differs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/env_switch.h"
#include "backends/cuda/hwinfo.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/tensor.h"
#include "ops/memory.h"
#include "unit/fast_uniform.h"

namespace vi::cudatest {

// The process's random source: a fresh seed per run unless VI_TEST_SEED is set, printed on first
// use so a failure can be replayed (with the same --gtest_filter: the draws follow the tests).
inline std::mt19937& rng() {
  static std::mt19937 g([] {
    const char* env = std::getenv("VI_TEST_SEED");
    const unsigned seed = env ? static_cast<unsigned>(std::strtoul(env, nullptr, 10)) : std::random_device{}();
    std::printf("[ seed     ] %u (replay: VI_TEST_SEED=%u and the same --gtest_filter)\n", seed, seed);
    return seed;
  }());
  return g;
}

// A host f32 tensor of NaN: uploaded as an op's output, every value the kernel fails to write
// stays NaN and fails the comparison.
inline Tensor nan_f32(const std::vector<int64_t>& shape) {
  Tensor t = Tensor::empty(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = NAN;
  return t;
}

// A host block table [n_blocks] i32: a random permutation of the pool's blocks (so paged
// kernels cannot get away with reading rows in order).
inline Tensor shuffled_table(int64_t n_blocks) {
  std::vector<int32_t> perm(static_cast<size_t>(n_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng());
  Tensor t = Tensor::empty(DType::I32, {n_blocks});
  std::copy(perm.begin(), perm.end(), t.ptr<int32_t>());
  return t;
}

// Rows of t L2-normalised and scaled (the delta rule's precondition for q and k); f16-rounded
// when the activation dtype is f16, so both sides see the same inputs.
inline Tensor unit_rows(Tensor t, float scale, DType act) {
  const int64_t n = t.cols();
  for (int64_t r = 0; r < t.rows(); ++r) {
    float* p = t.row<float>(r);
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(p[i]) * p[i];
    const float f = scale / static_cast<float>(std::sqrt(ss));
    for (int64_t i = 0; i < n; ++i) p[i] = act == DType::F16 ? round_fp16(p[i] * f) : p[i] * f;
  }
  return t;
}

// Host f32 tensor of uniform values in [lo, hi); rounded to f16 values when `act` is f16.
inline Tensor rand_f32(const std::vector<int64_t>& shape, DType act, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(DType::F32, shape);
  // Two draws of rng() seed the tensor's fast stream (unit/fast_uniform.h: pools of 16M values).
  const uint64_t hi_bits = rng()();
  const uint64_t seed = (hi_bits << 32) | rng()();
  testutil::FastUniform(seed).fill(t.ptr<float>(), t.numel(), lo, hi, act == DType::F16);
  return t;
}

// Random host weight [rows, cols] of dtype t, quantized from uniform f32 values in [-scale, scale).
inline Tensor rand_weight(DType t, int64_t rows, int64_t cols, float scale = 1.0f) {
  Tensor f = rand_f32({rows, cols}, DType::F32, -scale, scale);
  Tensor w = Tensor::empty(t, {rows, cols});
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, f.row<float>(r), w.row(r), cols);
  return w;
}

// Host copy of an f32 tensor in dtype `act` (f32 or f16).
inline Tensor host_as(const Tensor& f32, DType act) {
  if (act == DType::F32) return f32;
  Tensor t = Tensor::empty(DType::F16, f32.shape());
  for (int64_t i = 0; i < f32.numel(); ++i) t.ptr<uint16_t>()[i] = fp32_to_fp16(f32.ptr<float>()[i]);
  return t;
}

// Whether two host tensors hold the same bytes (bit-for-bit comparisons; two empty ones do).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.data() == nullptr || b.data() == nullptr) return a.data() == b.data();
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// A copy of a host tensor.
inline Tensor clone(const Tensor& t) {
  Tensor c = Tensor::empty(t.dtype(), t.shape());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

inline Tensor to_gpu(ops::Context& g, const Tensor& f32, DType act) { return ops::upload(g, host_as(f32, act)); }

// GPU tensor (f32 or f16) back to a host f32 tensor.
inline Tensor to_host_f32(ops::Context& g, const Tensor& dev) {
  Tensor h = ops::download(g, dev);
  if (h.dtype() == DType::F32) return h;
  Tensor out = Tensor::empty(DType::F32, h.shape());
  for (int64_t i = 0; i < h.numel(); ++i) out.ptr<float>()[i] = fp16_to_fp32(h.ptr<uint16_t>()[i]);
  return out;
}

// Why a native-profile, f16-activation test of the tiled Q4_K layouts cannot run here, or ""
// where it must: the loaded code is below sm_80 (the CUDA 11.8 build's compute_70 PTX JIT-compiled
// on a newer GPU keeps Q4_KR) or VI_TILED=0 keeps the row layouts. Where it returns "", a weight
// prepared as anything but Q4_KT is a failure of the preparation, not a reason to skip.
inline std::string no_tiled_q4k_reason() {
  if (cuda::loaded_code_cc() < 80)
    return "no Q4_KT with code for sm_" + std::to_string(cuda::loaded_code_cc()) + " (sm_80+ code needed)";
  if (!cuda::env_switch_on("VI_TILED")) return "VI_TILED=0 keeps the row layouts";
  return "";
}

// ‖got − ref‖₂ / ‖ref‖₂ (NaN/inf anywhere, or a shape mismatch, gives +inf).
inline double rel_l2(const Tensor& got, const Tensor& ref) {
  if (got.numel() != ref.numel()) return INFINITY;
  double num = 0, den = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double a = got.ptr<float>()[i], b = ref.ptr<float>()[i];
    if (!std::isfinite(a) || !std::isfinite(b)) return INFINITY;
    num += (a - b) * (a - b);
    den += b * b;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// f(sms) with the kernels sizing their grids for sms usable SMs (cuda::set_usable_sm_count), for
// every count from min(from, the card's SMs) to all of them; every SM usable again afterwards, also
// when f fails an ASSERT or throws.
template <class F>
void for_each_usable_sm_count(int from, F&& f) {
  const int all = cuda::gpu_facts(0).sm_count;
  struct Restore {
    ~Restore() { cuda::set_usable_sm_count(0); }
  } restore;
  for (int sms = std::min(from, all); sms <= all; ++sms) {
    cuda::set_usable_sm_count(sms);
    f(sms);
  }
}

// How many 4-byte words of a and b (host tensors) differ: "" where none, for EXPECT_EQ(.., "").
inline std::string words_differ(const Tensor& a, const Tensor& b) {
  if (a.nbytes() != b.nbytes()) return std::to_string(a.nbytes()) + " against " + std::to_string(b.nbytes()) + " bytes";
  const auto* x = static_cast<const uint32_t*>(a.data());
  const auto* y = static_cast<const uint32_t*>(b.data());
  size_t bad = 0;
  for (size_t i = 0; i < a.nbytes() / 4; ++i) bad += x[i] != y[i];
  return bad == 0 ? "" : std::to_string(bad) + " of " + std::to_string(a.nbytes() / 4) + " words differ";
}

#define EXPECT_CLOSE(got, ref, tol, what)                                                 \
  do {                                                                                    \
    const double vi_rel_ = ::vi::cudatest::rel_l2(got, ref);                              \
    EXPECT_LE(vi_rel_, tol) << (what) << ": relative L2 error " << vi_rel_ << " > " << (tol); \
  } while (0)

// One test setting: kernel profile x activation dtype. Every op test runs in all four.
struct Setting {
  ops::KernelProfile profile;
  DType act;
};

inline std::string setting_name(const ::testing::TestParamInfo<Setting>& info) {
  return std::string(cuda::profile_name(info.param.profile)) + "_" + dtype_name(info.param.act);
}

class CudaOpTest : public ::testing::TestWithParam<Setting> {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    g.device = Device::CUDA;
    g.profile = GetParam().profile;
    g.act = GetParam().act;
  }
  DType act() const { return GetParam().act; }
  // Tolerance by activation dtype: fp32 storage differs from the CPU only in summation
  // order; f16 storage adds one rounding (2^-11 relative) per stored intermediate.
  double tol(double f32_tol, double f16_tol) const { return act() == DType::F32 ? f32_tol : f16_tol; }
  Tensor up(const Tensor& f32) { return to_gpu(g, f32, act()); }
  Tensor down(const Tensor& dev) {
    ops::synchronize(g);
    return to_host_f32(g, dev);
  }
  Tensor gpu_empty(const std::vector<int64_t>& shape) { return ops::empty(g, act(), shape); }

  ops::Context g;    // the GPU
  ops::Context cpu;  // the reference
};

#define VI_CUDA_INSTANTIATE(Fixture)                                                             \
  INSTANTIATE_TEST_SUITE_P(                                                                      \
      Settings, Fixture,                                                                         \
      ::testing::Values(::vi::cudatest::Setting{::vi::ops::KernelProfile::kVolta, ::vi::DType::F32},  \
                        ::vi::cudatest::Setting{::vi::ops::KernelProfile::kVolta, ::vi::DType::F16},  \
                        ::vi::cudatest::Setting{::vi::ops::KernelProfile::kNative, ::vi::DType::F32}, \
                        ::vi::cudatest::Setting{::vi::ops::KernelProfile::kNative, ::vi::DType::F16}),\
      ::vi::cudatest::setting_name)

}  // namespace vi::cudatest
