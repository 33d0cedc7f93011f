// conv1d_causal on the CPU backend against a double-precision loop: odd channel counts,
// every T around the kernel length, state carried across calls (also T < K-1), the f16/bf16
// paths, in-place use and the shape/dtype errors.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/gdn.h"
#include "test_gdn_util.h"

namespace vi {
namespace {

using gdn_test::make;
using gdn_test::Rng;
using gdn_test::values;

// y[t, c] = Σ_i w[c, i] · x̃[t − (K−1) + i, c] where x̃ is the old state rows followed by x;
// returns y and writes the new state (the last K−1 rows of x̃).
std::vector<double> conv_ref(const std::vector<float>& x, const std::vector<float>& w,
                             std::vector<float>& state, int64_t T, int64_t C, int64_t K,
                             bool silu) {
  const int64_t H = K - 1;
  std::vector<double> ext(static_cast<size_t>((H + T) * C));
  for (int64_t i = 0; i < H * C; ++i) ext[i] = state[i];
  for (int64_t i = 0; i < T * C; ++i) ext[H * C + i] = x[i];
  std::vector<double> y(static_cast<size_t>(T * C));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0.0;
      for (int64_t i = 0; i < K; ++i) acc += double(w[c * K + i]) * ext[(t + i) * C + c];
      y[t * C + c] = silu ? acc / (1.0 + std::exp(-acc)) : acc;
    }
  }
  for (int64_t i = 0; i < H * C; ++i) state[i] = static_cast<float>(ext[T * C + i]);
  return y;
}

TEST(GdnConv, MatchesDoubleLoopWithStateAndSilu) {
  const uint64_t seed = gdn_test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  ops::Context ctx;
  for (int64_t K : {1, 2, 4, 5}) {
    for (int64_t C : {1, 37, 129}) {
      for (int64_t T : {1, 2, 3, 5, 63, 64, 65, 130}) {
        for (bool silu : {false, true}) {
          SCOPED_TRACE(testing::Message() << "K=" << K << " C=" << C << " T=" << T
                                          << " silu=" << silu);
          auto xv = rng.normals(T * C), wv = rng.normals(C * K, 0.5);
          auto sv = rng.normals((K - 1) * C);  // a non-zero incoming state
          Tensor x = make(DType::F32, {T, C}, xv), w = make(DType::F32, {C, K}, wv);
          Tensor state = make(DType::F32, {K - 1, C}, sv);
          Tensor y = Tensor::empty(DType::F32, {T, C});
          ops::conv1d_causal(ctx, x, w, state, silu, y);
          auto ref = conv_ref(xv, wv, sv, T, C, K, silu);
          // fp32 sums of K <= 5 products of O(1) terms: |err| <= 1e-5 * (1 + |ref|), i.e.
          // a few ulps of the terms (exact cancellation can leave a tiny reference).
          EXPECT_LT(gdn_test::max_mixed_err(values(y), ref, 1.0), 1e-5);
          // The new state is a copy of inputs, so it must be exact.
          EXPECT_EQ(values(state), sv);
        }
      }
    }
  }
}

// A sequence cut into random pieces (many shorter than K−1) must give exactly the output and
// final state of one call: the state is the only memory between calls.
TEST(GdnConv, StateAcrossCallsEqualsOneCall) {
  const uint64_t seed = gdn_test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  ops::Context ctx;
  for (int rep = 0; rep < 20; ++rep) {
    const int64_t K = rng.integer(2, 5), C = 2 * rng.integer(1, 50) + 1, T = rng.integer(1, 140);
    SCOPED_TRACE(testing::Message() << "K=" << K << " C=" << C << " T=" << T);
    auto xv = rng.normals(T * C);
    Tensor w = make(DType::F32, {C, K}, rng.normals(C * K));
    Tensor x = make(DType::F32, {T, C}, xv);
    Tensor s_one = gdn_test::zeros(DType::F32, {K - 1, C});
    Tensor y_one = Tensor::empty(DType::F32, {T, C});
    ops::conv1d_causal(ctx, x, w, s_one, true, y_one);

    Tensor s_split = gdn_test::zeros(DType::F32, {K - 1, C});
    std::vector<float> y_split;
    for (int64_t t0 = 0; t0 < T;) {
      // Mostly tiny pieces (1 .. K) so T < K−1 is covered, sometimes long ones.
      const int64_t len = std::min(T - t0, rng.integer(0, 3) == 0 ? rng.integer(1, 70)
                                                                  : rng.integer(1, K));
      Tensor xs = x.slice_rows(t0, t0 + len);
      Tensor ys = Tensor::empty(DType::F32, {len, C});
      ops::conv1d_causal(ctx, xs, w, s_split, true, ys);
      auto yv = values(ys);
      y_split.insert(y_split.end(), yv.begin(), yv.end());
      t0 += len;
    }
    EXPECT_EQ(y_split, values(y_one));
    EXPECT_EQ(values(s_split), values(s_one));
  }
}

TEST(GdnConv, InPlaceMatchesOutOfPlace) {
  const uint64_t seed = gdn_test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  Rng rng(seed);
  ops::Context ctx;
  const int64_t T = 67, C = 131, K = 4;
  auto xv = rng.normals(T * C), sv = rng.normals((K - 1) * C);
  Tensor w = make(DType::F32, {C, K}, rng.normals(C * K));
  Tensor x = make(DType::F32, {T, C}, xv), y = Tensor::empty(DType::F32, {T, C});
  Tensor s1 = make(DType::F32, {K - 1, C}, sv), s2 = make(DType::F32, {K - 1, C}, sv);
  ops::conv1d_causal(ctx, x, w, s1, true, y);
  ops::conv1d_causal(ctx, x, w, s2, true, x);
  EXPECT_EQ(values(x), values(y));
  EXPECT_EQ(values(s1), values(s2));
}

TEST(GdnConv, HalfTypesMatchReferenceOnRoundedInputs) {
  const uint64_t seed = gdn_test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  Rng rng(seed);
  ops::Context ctx;
  for (DType t : {DType::F16, DType::BF16}) {
    const int64_t T = 33, C = 45, K = 4;
    auto xv = gdn_test::rounded(rng.normals(T * C), t), wv = rng.normals(C * K, 0.5);
    auto sv = gdn_test::rounded(rng.normals((K - 1) * C), t);
    Tensor x = make(t, {T, C}, xv), w = make(DType::F32, {C, K}, wv);
    Tensor state = make(DType::F32, {K - 1, C}, sv), y = Tensor::empty(t, {T, C});
    ops::conv1d_causal(ctx, x, w, state, true, y);
    auto ref = conv_ref(xv, wv, sv, T, C, K, true);
    // One rounding of the output to the storage type: half an ulp (2^-11 / 2^-8 relative).
    const double tol = t == DType::F16 ? 1.0 / 1024 : 1.0 / 128;
    EXPECT_LT(gdn_test::max_mixed_err(values(y), ref, 1e-3), tol) << dtype_name(t);
    EXPECT_EQ(values(state), sv) << dtype_name(t);
  }
}

TEST(GdnConv, RejectsBadShapesAndTypes) {
  ops::Context ctx;
  const int64_t T = 5, C = 7, K = 4;
  Tensor x = gdn_test::zeros(DType::F32, {T, C}), w = gdn_test::zeros(DType::F32, {C, K});
  Tensor s = gdn_test::zeros(DType::F32, {K - 1, C}), y = gdn_test::zeros(DType::F32, {T, C});
  Tensor bad_w = gdn_test::zeros(DType::F32, {C + 1, K});
  Tensor bad_s = gdn_test::zeros(DType::F32, {K, C});
  Tensor s16 = gdn_test::zeros(DType::F16, {K - 1, C});
  Tensor y_short = gdn_test::zeros(DType::F32, {T - 1, C});
  Tensor y16 = gdn_test::zeros(DType::F16, {T, C});
  Tensor x3 = gdn_test::zeros(DType::F32, {1, T, C});
  Tensor xi = gdn_test::zeros(DType::I32, {T, C});
  EXPECT_THROW(ops::conv1d_causal(ctx, x, bad_w, s, true, y), Error);
  EXPECT_THROW(ops::conv1d_causal(ctx, x, w, bad_s, true, y), Error);
  EXPECT_THROW(ops::conv1d_causal(ctx, x, w, s16, true, y), Error);
  EXPECT_THROW(ops::conv1d_causal(ctx, x, w, s, true, y_short), Error);
  EXPECT_THROW(ops::conv1d_causal(ctx, x, w, s, true, y16), Error);
  EXPECT_THROW(ops::conv1d_causal(ctx, x3, w, s, true, y), Error);
  EXPECT_THROW(ops::conv1d_causal(ctx, xi, w, s, true, y), Error);
  Tensor x_gpu = Tensor::view(DType::F32, {T, C}, x.data(), nullptr, Device::CUDA);
  EXPECT_THROW(ops::conv1d_causal(ctx, x_gpu, w, s, true, y), Error);
  try {
    ops::conv1d_causal(ctx, x, bad_w, s, true, y);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv1d_causal"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vi
