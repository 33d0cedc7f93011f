// The int8-activation decode GEMV (gemv_q4ki.cu) and the Q8_KX activations it reads:
// - quantize_q8kx on the GPU against core/quant.cpp's quantize_row(Q8_KX), byte for byte;
// - gemv_q4ki, T = 1..8, against the CPU's f32 matmul of the dequantized Q8_KX activations with
//   the Q4_K original: the kernel's integer sums are exact, so only the f32 scaling, the order of
//   the sums and the f16 output differ (relative L2 1e-3); and, as a bound on what the int8
//   rounding costs, against the f16 activations themselves (1e-2, activations without outliers:
//   a value 24 times the rest coarsens its whole block of 256);
// - matmul_split's parts and the fused gate|up + SwiGLU bit for bit against the plain kernel
//   (+ swiglu_halves on the GPU);
// - add_rms_norm writing Q8_KX: the same bytes as add_rms_norm into f16, then quantize_q8kx;
// - ops::matmul and its two variants on Q4_KI from f16 x (quantized inside) and Q8_KX x alike,
//   and through the GEMM path beyond 8 rows; prepare_matmul_weight's choice of Q4_KI.
// Outputs are poisoned with NaN first, so an unwritten value fails. Native profile, f16
// activations only (Q4_KI is made for nothing else).
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cuda/gemv_q4ki.cuh"
#include "core/quant.h"
#include "cuda_test_util.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/norm.h"
#include "ops/prepare_matmul_weight.h"

namespace vi::cudatest {
namespace {

// Host f32 activations [T, K] (f16 values) in [-1, 1), with `outliers` values of 24 at random
// places (as RMS-normed hidden states have a few large ones).
Tensor rand_act(int64_t T, int64_t K, int outliers = 3) {
  Tensor x = rand_f32({T, K}, DType::F16, -1.0f, 1.0f);
  std::uniform_int_distribution<int64_t> pick(0, T * K - 1);
  for (int i = 0; i < outliers; ++i) x.ptr<float>()[pick(rng())] = round_fp16(24.0f);
  return x;
}

Tensor host_q8kx(const Tensor& x) {
  Tensor q = Tensor::empty(DType::Q8_KX, x.shape());
  for (int64_t r = 0; r < x.rows(); ++r) quantize_row(DType::Q8_KX, x.row<float>(r), q.row(r), x.cols());
  return q;
}

Tensor dequant(const Tensor& t) {
  Tensor f = Tensor::empty(DType::F32, t.shape());
  for (int64_t r = 0; r < t.rows(); ++r) dequantize_row(t.dtype(), t.row(r), f.row<float>(r), t.cols());
  return f;
}

int64_t differing(const Tensor& a, const Tensor& b) {
  int64_t n = a.numel() != b.numel() ? 1 : 0;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) n += !(a.ptr<float>()[i] == b.ptr<float>()[i]);
  return n;
}

class GemvQ4ki : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    g.device = Device::CUDA;
    g.profile = ops::KernelProfile::kNative;
    g.act = DType::F16;
    if (!cuda::gemv_q4ki_available(g)) GTEST_SKIP() << "the int8 GEMV needs sm_80+ code";
  }
  Tensor down(const Tensor& dev) {
    ops::synchronize(g);
    return to_host_f32(g, dev);
  }
  // The Q4_KI weight made from the Q4_K original w (through Q4_KR, as the loader does).
  Tensor q4ki(const Tensor& w) {
    Tensor rw = ops::prepare_matmul_weight(g, ops::upload(g, w), {8, w.dim(0) - 8});  // views cut a tile: Q4_KR
    EXPECT_EQ(rw.dtype(), DType::Q4_KR);
    return cuda::q4ki_from_q4kr(g, rw);
  }
  Tensor quantized_on_gpu(const Tensor& x) {
    Tensor xq = ops::empty(g, DType::Q8_KX, x.shape());
    cuda::quantize_q8kx(g, to_gpu(g, x, DType::F16), xq);
    return xq;
  }

  ops::Context g, cpu;
};

TEST_F(GemvQ4ki, QuantizeMatchesTheCpuByteForByte) {
  for (int64_t T : {1, 3, 8})
    for (int64_t K : {256, 1280}) {
      Tensor x = rand_act(T, K);
      // A block of zeros (scale 0) and one of a single nonzero value.
      for (int64_t i = 0; i < 256; ++i) x.ptr<float>()[i] = 0.0f;
      if (K > 256)
        for (int64_t i = 256; i < 512; ++i) x.ptr<float>()[i] = i == 300 ? round_fp16(-0.37f) : 0.0f;
      const Tensor ref = host_q8kx(x);
      ops::synchronize(g);
      const Tensor got = ops::download(g, quantized_on_gpu(x));
      ASSERT_EQ(got.nbytes(), ref.nbytes());
      int64_t bad = 0;
      for (size_t i = 0; i < got.nbytes(); ++i) bad += got.ptr<uint8_t>()[i] != ref.ptr<uint8_t>()[i];
      EXPECT_EQ(bad, 0) << "T=" << T << " K=" << K << ": bytes that differ from quantize_row";
      // The blocks decode to within half a step of x.
      const Tensor back = dequant(got);
      for (int64_t r = 0; r < T; ++r)
        for (int64_t b = 0; b < K / 256; ++b) {
          float amax = 0;
          for (int64_t i = 0; i < 256; ++i) amax = std::max(amax, std::fabs(x.row<float>(r)[256 * b + i]));
          for (int64_t i = 0; i < 256; ++i)
            ASSERT_LE(std::fabs(back.row<float>(r)[256 * b + i] - x.row<float>(r)[256 * b + i]), amax / 254 * 1.001f)
                << "r=" << r << " i=" << 256 * b + i;
        }
    }
}

// N = 16 is one tile; 48 three; 4112 = 257 tiles (both register budgets' grids). K = 1024 gives
// one super-block per warp, 5120 five (the 27B hidden size), 3072 three (warp 3 idle).
TEST_F(GemvQ4ki, MatchesTheCpuOnTheQuantizedActivations) {
  for (int64_t N : {16, 48, 4112})
    for (int64_t K : {1024, 3072, 5120}) {
      if (N == 4112 && K == 3072) continue;
      const Tensor w = rand_weight(DType::Q4_K, N, K, 1.0f);
      const Tensor dw = q4ki(w);
      for (int64_t T = 1; T <= 8; ++T) {
        const bool outliers = T % 2 == 0;
        const Tensor x = rand_act(T, K, outliers ? 3 : 0);
        const Tensor xq = quantized_on_gpu(x);
        ASSERT_TRUE(cuda::gemv_q4ki_supports(g, xq, dw));
        Tensor ref = Tensor::empty(DType::F32, {T, N}), ref_f16 = Tensor::empty(DType::F32, {T, N});
        ops::matmul(cpu, dequant(ops::download(g, xq)), w, ref);
        ops::matmul(cpu, x, w, ref_f16);
        for (int blocks : cuda::gemv_q4ki_shapes()) {
          Tensor y = to_gpu(g, nan_f32({T, N}), DType::F16);
          cuda::gemv_q4ki(g, xq, dw, y, blocks);
          const Tensor got = down(y);
          const std::string what = fmt::format("T={} N={} K={} blocks/SM {}", T, N, K, blocks);
          EXPECT_CLOSE(got, ref, 1e-3, what + " against the quantized activations");
          if (!outliers) EXPECT_CLOSE(got, ref_f16, 1e-2, what + " against the f16 activations");
        }
      }
    }
}

TEST_F(GemvQ4ki, SplitIntoPartsLikeTheWholeMatrix) {
  const int64_t K = 2048;
  const std::vector<int64_t> widths = {32, 16, 64, 48};
  const int64_t N = 160;
  const Tensor dw = q4ki(rand_weight(DType::Q4_K, N, K, 1.0f));
  for (int64_t T : {1, 4, 8}) {
    const Tensor xq = quantized_on_gpu(rand_act(T, K));
    Tensor whole = to_gpu(g, nan_f32({T, N}), DType::F16);
    cuda::gemv_q4ki(g, xq, dw, whole);
    std::vector<Tensor> parts;
    std::vector<Tensor*> ptrs;
    for (int64_t wd : widths) parts.push_back(to_gpu(g, nan_f32({T, wd}), DType::F16));
    for (Tensor& p : parts) ptrs.push_back(&p);
    cuda::gemv_q4ki_split(g, xq, dw, ptrs);
    const Tensor all = down(whole);
    int64_t col = 0, bad = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      const Tensor got = down(parts[p]);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < widths[p]; ++j) bad += !(got.row<float>(t)[j] == all.row<float>(t)[col + j]);
      col += widths[p];
    }
    EXPECT_EQ(bad, 0) << "T=" << T << ": part values that differ from the whole matrix's";
  }
}

// F = 96: 6 tiles per half; 4096: the 4-blocks-per-SM budget.
TEST_F(GemvQ4ki, FusedGateUpSwigluLikePlainThenSwigluHalves) {
  for (int64_t F : {96, 4096}) {
    const int64_t K = F == 4096 ? 1024 : 3072;
    const Tensor dw = q4ki(rand_weight(DType::Q4_K, 2 * F, K, F == 96 ? 0.02f : 1.0f));
    for (int64_t T : {1, 2, 5, 8}) {
      const Tensor xq = quantized_on_gpu(rand_act(T, K));
      Tensor gu = to_gpu(g, nan_f32({T, 2 * F}), DType::F16), h_ref = to_gpu(g, nan_f32({T, F}), DType::F16);
      cuda::gemv_q4ki(g, xq, dw, gu);
      ops::swiglu_halves(g, gu, h_ref);
      Tensor h = to_gpu(g, nan_f32({T, F}), DType::F16);
      cuda::gemv_q4ki_swiglu(g, xq, dw, h);
      const Tensor a = down(h), b = down(h_ref);
      EXPECT_EQ(differing(a, b), 0) << "F=" << F << " T=" << T << ": fused values that differ from unfused";
      EXPECT_TRUE(std::isfinite(rel_l2(a, b)));
    }
  }
}


// add_rms_norm into Q8_KX (the vector kernel's int8 output, one warp per block) against the f16
// output quantized by quantize_q8kx; x (the residual stream) must come out the same too.
// n = 5120 is one vector per thread, 12288 two, 20480 four.
TEST_F(GemvQ4ki, AddRmsNormWritesTheBlocksOfItsF16Output) {
  for (int64_t n : {5120, 12288, 20480})
    for (int64_t R : {1, 3}) {
      const Tensor x = rand_act(R, n), o = rand_f32({R, n}, DType::F16, -1.0f, 1.0f);
      const Tensor w = rand_f32({n}, DType::F32, 0.5f, 1.5f);
      Tensor x1 = to_gpu(g, x, DType::F16), x2 = to_gpu(g, x, DType::F16), dob = to_gpu(g, o, DType::F16);
      Tensor dw = ops::upload(g, w);
      Tensor y16 = ops::empty(g, DType::F16, {R, n}), yq = ops::empty(g, DType::Q8_KX, {R, n});
      Tensor ref = ops::empty(g, DType::Q8_KX, {R, n});
      ops::add_rms_norm(g, x1, dob, dw, 1e-6f, 1.0f, y16);
      cuda::quantize_q8kx(g, y16, ref);
      ops::add_rms_norm(g, x2, dob, dw, 1e-6f, 1.0f, yq);
      ops::synchronize(g);
      const Tensor a = ops::download(g, yq), b = ops::download(g, ref);
      int64_t bad = 0;
      for (size_t i = 0; i < a.nbytes(); ++i) bad += a.ptr<uint8_t>()[i] != b.ptr<uint8_t>()[i];
      EXPECT_EQ(bad, 0) << "n=" << n << " R=" << R << ": bytes that differ";
      EXPECT_EQ(differing(down(x1), down(x2)), 0) << "n=" << n << " R=" << R << ": the residual stream differs";
    }
}

// The ops on a Q4_KI weight as the model calls them: prepare_matmul_weight makes Q4_KI for a
// norm's input (MatmulInput::kNorm) where ops::Context::int8_act asks for it, and Q4_KT otherwise;
// matmul_input_dtype asks for Q8_KX up to 8 rows; matmul, matmul_split and matmul_swiglu take f16
// x (quantized inside: the same bytes, so the same y) and Q8_KX x alike; 9 rows and more run the
// GEMM path on dequantized tiles.
TEST_F(GemvQ4ki, MatmulOpsOnQ4kiLikeTheKernels) {
  const int64_t F = 64, K = 2048;
  const Tensor w = rand_weight(DType::Q4_K, 2 * F, K, 1.0f);
  // Only where the context asks for int8 activations, and only for a norm's input.
  EXPECT_EQ(ops::prepare_matmul_weight(g, ops::upload(g, w), {F, F}, ops::MatmulInput::kNorm).dtype(), DType::Q4_KT);
  g.int8_act = true;
  const Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w), {F, F}, ops::MatmulInput::kNorm);
  ASSERT_EQ(dw.dtype(), DType::Q4_KI);
  EXPECT_EQ(ops::prepare_matmul_weight(g, ops::upload(g, w), {F, F}).dtype(), DType::Q4_KT);
  for (int64_t T : {1, 4, 8}) EXPECT_EQ(ops::matmul_input_dtype(g, dw, T), DType::Q8_KX) << T;
  EXPECT_EQ(ops::matmul_input_dtype(g, dw, 9), DType::F16);
  for (int64_t T : {1, 3, 8, 9, 40}) {
    const Tensor x = rand_act(T, K, 0);
    const Tensor dx = to_gpu(g, x, DType::F16);
    Tensor ref = Tensor::empty(DType::F32, {T, 2 * F});
    ops::matmul(cpu, x, w, ref);
    Tensor y = to_gpu(g, nan_f32({T, 2 * F}), DType::F16);
    ops::matmul(g, dx, dw, y);
    const Tensor got = down(y);
    EXPECT_CLOSE(got, ref, T <= 8 ? 1e-2 : 4e-3, fmt::format("matmul on Q4_KI, f16 x, T={}", T));
    if (T > 8) continue;
    const Tensor xq = quantized_on_gpu(x);
    Tensor yq = to_gpu(g, nan_f32({T, 2 * F}), DType::F16);
    ops::matmul(g, xq, dw, yq);
    EXPECT_EQ(differing(down(yq), got), 0) << "T=" << T << ": Q8_KX x and f16 x give different y";
    // matmul_split into the gate and up halves, and the fused SwiGLU, from Q8_KX x.
    Tensor all = ops::empty(g, DType::F16, {T, 2 * F});
    Tensor p0 = to_gpu(g, nan_f32({T, F}), DType::F16), p1 = to_gpu(g, nan_f32({T, F}), DType::F16);
    ops::matmul_split(g, xq, dw, all, {&p0, &p1});
    const Tensor a0 = down(p0), a1 = down(p1);
    int64_t bad = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < F; ++j)
        bad += !(a0.row<float>(t)[j] == got.row<float>(t)[j]) + !(a1.row<float>(t)[j] == got.row<float>(t)[F + j]);
    EXPECT_EQ(bad, 0) << "T=" << T << ": matmul_split parts that differ from matmul";
    Tensor gu = ops::empty(g, DType::F16, {T, 2 * F}), h = to_gpu(g, nan_f32({T, F}), DType::F16);
    Tensor h_ref = to_gpu(g, nan_f32({T, F}), DType::F16);
    ops::matmul_swiglu(g, xq, dw, gu, h);
    ops::swiglu_halves(g, y, h_ref);
    EXPECT_EQ(differing(down(h), down(h_ref)), 0) << "T=" << T << ": matmul_swiglu differs from matmul + swiglu_halves";
  }
}

}  // namespace
}  // namespace vi::cudatest
