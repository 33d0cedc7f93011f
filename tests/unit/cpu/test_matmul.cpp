// CPU matmul for every weight dtype vs a double-precision loop over the dequantized
// weights (core/quant's dequantize_row, itself checked against gguf-py). Odd sizes; fresh
// random inputs; results must not depend on thread count or token tiling.
#include <gtest/gtest.h>

#include <tuple>

#include "core/quant.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/prepare_matmul_weight.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

using test::random_f32;

// Quantizes random [N, K] floats to dtype t; `deq` receives the dequantized values.
Tensor make_weight(std::mt19937& rng, DType t, int64_t N, int64_t K, std::vector<float>& deq) {
  Tensor src = random_f32(rng, {N, K}, 0.5f);
  Tensor w = Tensor::empty(t, {N, K});
  deq.resize(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n) {
    quantize_row(t, src.row<float>(n), w.row(n), K);
    dequantize_row(t, w.row(n), deq.data() + n * K, K);
  }
  return w;
}

// Tolerance per element: fp32 accumulation over K products, relative to sum |x·w|.
// 1e-5 of that magnitude is ~80 ulps at K = 768: loose for the rounding, tight for a bug
// (a wrong nibble or scale moves a result by ~1e-2 of it).
void check_matmul(DType t, int64_t T, int64_t N, int64_t K, unsigned seed) {
  SCOPED_TRACE(::testing::Message() << dtype_name(t) << " T=" << T << " N=" << N << " K=" << K << " seed " << seed);
  std::mt19937 rng(seed);
  std::vector<float> wd;
  Tensor w = make_weight(rng, t, N, K, wd);
  Tensor x = random_f32(rng, {T, K});
  Tensor y1 = Tensor::empty(DType::F32, {T, N});
  Tensor y3 = Tensor::empty(DType::F32, {T, N});
  ThreadPool p1(1), p3(3);
  ops::Context c1{Device::CPU, &p1}, c3{Device::CPU, &p3};
  ops::matmul(c1, x, w, y1);
  ops::matmul(c3, x, w, y3);

  const float* xp = x.ptr<float>();
  const float* g = y1.ptr<float>();
  int bad = 0;
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(xp[i * K + k]) * wd[n * K + k];
        ref += p;
        mag += std::fabs(p);
      }
      const double err = std::fabs(g[i * N + n] - ref);
      if (!(err <= 1e-5 * mag + 1e-30) && bad++ < 5)
        ADD_FAILURE() << "y[" << i << ", " << n << "] = " << g[i * N + n] << " want " << ref << " (sum|xw| " << mag << ")";
    }
  }
  EXPECT_EQ(bad, 0);
  test::expect_bitwise_equal(y1, y3, "matmul 1 vs 3 threads");

  // Token tiling must not change a result: each token alone gives the same bits.
  for (int64_t i : {int64_t{0}, T / 2, T - 1}) {
    Tensor xi = x.slice_rows(i, i + 1);
    Tensor yi = Tensor::empty(DType::F32, {1, N});
    ops::matmul(c3, xi, w, yi);
    EXPECT_EQ(std::memcmp(yi.data(), y1.row<float>(i), N * sizeof(float)), 0) << "token " << i << " alone differs";
  }
}

class MatmulDtype : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulDtype, MatchesDoubleReference) {
  const DType t = GetParam();
  const unsigned seed = test::test_seed();
  const bool k_quant = dtype_info(t).block_elems == kQKK;
  const std::vector<int64_t> ks = k_quant ? std::vector<int64_t>{256, 256 * 3}
                                  : dtype_is_quantized(t) ? std::vector<int64_t>{32 * 7, 256 * 3}
                                                          : std::vector<int64_t>{80, 32 * 7, 256 * 3 + 5};
  unsigned s = seed;
  for (int64_t T : {1, 3, 17, 97}) {
    for (int64_t K : ks) check_matmul(t, T, T == 97 ? 19 : 37, K, s++);
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, MatmulDtype,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0,
                                           DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CpuMatmul, LeadingDimsFlattenIntoTokens) {
  const unsigned seed = test::test_seed();
  std::mt19937 rng(seed);
  std::vector<float> wd;
  Tensor w = make_weight(rng, DType::Q8_0, 5, 64, wd);
  Tensor x = random_f32(rng, {2, 3, 64});
  Tensor y = Tensor::empty(DType::F32, {2, 3, 5});
  Tensor y2 = Tensor::empty(DType::F32, {6, 5});
  ops::Context ctx;
  ops::matmul(ctx, x, w, y);
  ops::matmul(ctx, x.reshape({6, 64}), w, y2);
  test::expect_bitwise_equal(y, y2, "[2,3,K] vs [6,K]");
}

TEST(CpuMatmul, ErrorsNameOpShapesAndDtype) {
  ops::Context ctx;
  Tensor x = Tensor::empty(DType::F32, {3, 64});
  Tensor w = Tensor::empty(DType::Q8_0, {5, 96});
  Tensor y = Tensor::empty(DType::F32, {3, 5});
  std::string msg = test::error_of([&] { ops::matmul(ctx, x, w, y); });
  EXPECT_NE(msg.find("matmul"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3, 64]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[5, 96]"), std::string::npos) << msg;

  Tensor w2 = Tensor::empty(DType::Q8_0, {5, 64});
  Tensor ybad = Tensor::empty(DType::F32, {3, 4});
  msg = test::error_of([&] { ops::matmul(ctx, x, w2, ybad); });
  EXPECT_NE(msg.find("[3, 4]"), std::string::npos) << msg;

  Tensor wi = Tensor::empty(DType::I32, {5, 64});
  msg = test::error_of([&] { ops::matmul(ctx, x, wi, y); });
  EXPECT_NE(msg.find("matmul"), std::string::npos) << msg;
  EXPECT_NE(msg.find("i32"), std::string::npos) << msg;

  Tensor xh = Tensor::empty(DType::F16, {3, 64});
  Tensor yh = Tensor::empty(DType::F16, {3, 5});
  msg = test::error_of([&] { ops::matmul(ctx, xh, w2, yh); });
  EXPECT_NE(msg.find("f16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32"), std::string::npos) << msg;
}

// prepare_matmul_weight on the CPU keeps the file layout (the same tensor); the row counts of the
// caller's views must add up to the weight's rows (a SwiGLU stack's: two halves). The tiled
// device layouts have no CPU kernel: a matmul on one says so.
TEST(CpuMatmul, PrepareKeepsTheFileLayoutAndChecksTheViews) {
  ops::Context ctx;
  Tensor w = Tensor::empty(DType::Q4_K, {48, 1024});
  Tensor p = ops::prepare_matmul_weight(ctx, w, {16, 32});
  EXPECT_EQ(p.data(), w.data());
  EXPECT_EQ(p.dtype(), DType::Q4_K);
  std::string msg = test::error_of([&] { ops::prepare_matmul_weight(ctx, w, {16, 16}); });
  EXPECT_NE(msg.find("prepare_matmul_weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("32"), std::string::npos) << msg;
  msg = test::error_of([&] { ops::prepare_matmul_weight(ctx, w, {64, -16}); });
  EXPECT_NE(msg.find("-16"), std::string::npos) << msg;
  // A SwiGLU stack (read only whole) keeps its layout here too; its views must be two halves.
  p = ops::prepare_matmul_weight(ctx, w, {24, 24}, ops::MatmulInput::kNorm, ops::MatmulUse::kSwiglu);
  EXPECT_EQ(p.data(), w.data());
  msg = test::error_of(
      [&] { ops::prepare_matmul_weight(ctx, w, {16, 32}, ops::MatmulInput::kAny, ops::MatmulUse::kSwiglu); });
  EXPECT_NE(msg.find("gate|up"), std::string::npos) << msg;

  for (DType t : {DType::Q4_KT, DType::Q8_0T, DType::Q4_KTS}) {
    Tensor x = Tensor::empty(DType::F32, {1, 1024}), y = Tensor::empty(DType::F32, {1, 48});
    Tensor wt = Tensor::empty(t, {48, 1024});
    msg = test::error_of([&] { ops::matmul(ctx, x, wt, y); });
    EXPECT_NE(msg.find(dtype_name(t)), std::string::npos) << msg;
  }
}

// matmul_swiglu without a fused kernel (the CPU has none) is matmul into gu then swiglu_halves:
// bit for bit; and its shape errors name the op and the shapes.
TEST(CpuMatmul, MatmulSwigluIsMatmulThenSwigluHalves) {
  const unsigned seed = test::test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::vector<float> wd;
  const int64_t F = 37, K = 256, T = 3;
  Tensor w = make_weight(rng, DType::Q4_K, 2 * F, K, wd);
  Tensor x = random_f32(rng, {T, K});
  ops::Context ctx;
  Tensor gu = Tensor::empty(DType::F32, {T, 2 * F}), h = Tensor::empty(DType::F32, {T, F});
  ops::matmul_swiglu(ctx, x, w, gu, h);
  Tensor gu2 = Tensor::empty(DType::F32, {T, 2 * F}), h2 = Tensor::empty(DType::F32, {T, F});
  ops::matmul(ctx, x, w, gu2);
  ops::swiglu_halves(ctx, gu2, h2);
  test::expect_bitwise_equal(h, h2, "matmul_swiglu vs matmul + swiglu_halves");

  Tensor hbad = Tensor::empty(DType::F32, {T, F + 1});
  std::string msg = test::error_of([&] { ops::matmul_swiglu(ctx, x, w, gu, hbad); });
  EXPECT_NE(msg.find("matmul_swiglu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3, 38]"), std::string::npos) << msg;
  Tensor wodd = Tensor::empty(DType::Q4_K, {2 * F + 1, K});
  msg = test::error_of([&] { ops::matmul_swiglu(ctx, x, wodd, gu, h); });
  EXPECT_NE(msg.find("gate|up"), std::string::npos) << msg;
}

// matmul_split: each part gets its row block's product, bit for bit what a matmul on the
// part's row view gives (and the stacked matmul's column block); bad parts are named errors.
TEST(CpuMatmul, MatmulSplitGivesEachPartItsRowBlock) {
  const unsigned seed = test::test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::vector<float> wd;
  const int64_t K = 256, T = 3;
  const std::vector<int64_t> widths = {5, 16, 1, 9};
  Tensor w = make_weight(rng, DType::Q8_0, 31, K, wd);
  Tensor x = random_f32(rng, {T, K});
  ops::Context ctx;
  std::vector<Tensor> parts;
  std::vector<Tensor*> dsts;
  for (int64_t wp : widths) parts.push_back(Tensor::empty(DType::F32, {T, wp}));
  for (Tensor& p : parts) dsts.push_back(&p);
  Tensor all = Tensor::empty(DType::F32, {T, 31});
  ops::matmul_split(ctx, x, w, all, dsts);
  int64_t o = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    Tensor want = Tensor::empty(DType::F32, {T, widths[i]});
    ops::matmul(ctx, x, w.slice_rows(o, o + widths[i]), want);
    test::expect_bitwise_equal(parts[i], want, "matmul_split part " + std::to_string(i));
    o += widths[i];
  }

  Tensor narrow = Tensor::empty(DType::F32, {T, 8});
  std::vector<Tensor*> short_parts = {&parts[0], &narrow};
  std::string msg = test::error_of([&] { ops::matmul_split(ctx, x, w, all, short_parts); });
  EXPECT_NE(msg.find("matmul_split"), std::string::npos) << msg;
  EXPECT_NE(msg.find("13 rows wide"), std::string::npos) << msg;
  std::vector<Tensor*> nine(9, &parts[2]);
  msg = test::error_of([&] { ops::matmul_split(ctx, x, w, all, nine); });
  EXPECT_NE(msg.find("9 parts"), std::string::npos) << msg;
  Tensor wrong_t = Tensor::empty(DType::F32, {T + 1, 16});
  std::vector<Tensor*> bad_rows = {&parts[0], &wrong_t, &parts[2], &parts[3]};
  msg = test::error_of([&] { ops::matmul_split(ctx, x, w, all, bad_rows); });
  EXPECT_NE(msg.find("[4, 16]"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vi
