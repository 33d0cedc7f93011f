// gdn_gates, l2_norm and gated_rms_norm on the CPU backend against double-precision loops:
// odd sizes, the softplus threshold, all activation dtypes, in-place use, errors.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/gdn.h"
#include "ops/norm.h"
#include "test_gdn_util.h"

namespace vi {
namespace {

using gdn_test::make;
using gdn_test::Rng;
using gdn_test::values;

double softplus_ref(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }

// Tolerance of a result stored in dtype t after fp32 math: one final rounding dominates.
double storage_tol(DType t) {
  // f32: sums of up to 128 squares in fp32 (about sqrt(n) ulps, bounded by n ulps) + 3 ops.
  return t == DType::F32 ? 1e-5 : t == DType::F16 ? 1.0 / 1024 : 1.0 / 128;
}
// Absolute floor of that tolerance: f16 turns subnormal below 6.1e-5, where its relative
// precision falls away; f32 and bf16 share the fp32 exponent range.
double storage_atol(DType t) { return t == DType::F16 ? 1e-4 : 1e-6; }

TEST(GdnGates, MatchDoubleLoop) {
  const uint64_t seed = gdn_test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  ops::Context ctx;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t T : {1, 2, 5, 63, 130, 700}) {
      for (int64_t Hv : {3, 6, 48}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dt) << " T=" << T << " Hv=" << Hv);
        // a spans both sides of the softplus threshold (a + dt_bias up to ~30).
        auto av = gdn_test::rounded(rng.uniforms(T * Hv, -30.0, 28.0), dt);
        auto bv = gdn_test::rounded(rng.normals(T * Hv, 4.0), dt);
        std::vector<float> nA(Hv), dtb(Hv);
        for (int64_t j = 0; j < Hv; ++j) {
          nA[j] = static_cast<float>(-std::exp(rng.uniform(-3.0, 2.0)));
          dtb[j] = static_cast<float>(rng.uniform(-2.0, 2.0));
        }
        Tensor a = make(dt, {T, Hv}, av), b = make(dt, {T, Hv}, bv);
        Tensor A = make(DType::F32, {Hv}, nA), dtbias = make(DType::F32, {Hv}, dtb);
        Tensor g = Tensor::empty(DType::F32, {T, Hv}), beta = Tensor::empty(DType::F32, {T, Hv});
        ops::gdn_gates(ctx, a, b, A, dtbias, g, beta);
        std::vector<double> g_ref(T * Hv), beta_ref(T * Hv);
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t j = 0; j < Hv; ++j) {
            const int64_t i = t * Hv + j;
            // The sum a + dt_bias is rounded to fp32 as the kernel (and PyTorch) does, so both
            // sides decide the threshold on the same value.
            const float x = av[i] + dtb[j];
            g_ref[i] = double(nA[j]) * softplus_ref(x);
            beta_ref[i] = 1.0 / (1.0 + std::exp(-double(bv[i])));
          }
        }
        // fp32 exp/log1p: a few ulps, relative per element.
        EXPECT_LT(gdn_test::max_mixed_err(values(g), g_ref, 1e-30), 2e-6);
        EXPECT_LT(gdn_test::max_mixed_err(values(beta), beta_ref, 1e-30), 2e-6);
      }
    }
  }
}

TEST(GdnGates, SoftplusThresholdIsPyTorchs) {
  ops::Context ctx;
  // x = 25 would give log1p(exp(25)) = 25 + 1.4e-11 anyway; the point is that a huge x stays
  // finite (exp overflow) and equals x exactly.
  std::vector<float> av = {100.0f, 500.0f, 20.5f, -100.0f};
  Tensor a = make(DType::F32, {1, 4}, av), b = make(DType::F32, {1, 4}, {0, 50, -50, -200});
  Tensor A = make(DType::F32, {4}, {-1, -1, -2, -1}), dtb = make(DType::F32, {4}, {0, 0, 0, 0});
  Tensor g = Tensor::empty(DType::F32, {1, 4}), beta = Tensor::empty(DType::F32, {1, 4});
  ops::gdn_gates(ctx, a, b, A, dtb, g, beta);
  auto gv = values(g), bv = values(beta);
  EXPECT_EQ(gv[0], -100.0f);
  EXPECT_EQ(gv[1], -500.0f);
  EXPECT_EQ(gv[2], -41.0f);
  EXPECT_LE(gv[3], 0.0f);
  EXPECT_GT(gv[3], -1e-40f);
  EXPECT_EQ(bv[0], 0.5f);
  EXPECT_EQ(bv[1], 1.0f);
  EXPECT_GE(bv[2], 0.0f);
  EXPECT_LT(bv[2], 1e-20f);
  EXPECT_EQ(bv[3], 0.0f);
}

TEST(GdnGates, RejectsBadShapes) {
  ops::Context ctx;
  Tensor a = gdn_test::zeros(DType::F32, {5, 6}), b = gdn_test::zeros(DType::F32, {5, 6});
  Tensor A = gdn_test::zeros(DType::F32, {6}), dtb = gdn_test::zeros(DType::F32, {6});
  Tensor g = gdn_test::zeros(DType::F32, {5, 6}), beta = gdn_test::zeros(DType::F32, {5, 6});
  Tensor A5 = gdn_test::zeros(DType::F32, {5}), b_bf = gdn_test::zeros(DType::BF16, {5, 6});
  Tensor g16 = gdn_test::zeros(DType::F16, {5, 6}), beta4 = gdn_test::zeros(DType::F32, {4, 6});
  EXPECT_NO_THROW(ops::gdn_gates(ctx, a, b, A, dtb, g, beta));
  EXPECT_THROW(ops::gdn_gates(ctx, a, b, A5, dtb, g, beta), Error);
  EXPECT_THROW(ops::gdn_gates(ctx, a, b, A, A5, g, beta), Error);
  EXPECT_THROW(ops::gdn_gates(ctx, a, b_bf, A, dtb, g, beta), Error);
  EXPECT_THROW(ops::gdn_gates(ctx, a, b, A, dtb, g16, beta), Error);
  EXPECT_THROW(ops::gdn_gates(ctx, a, b, A, dtb, g, beta4), Error);
}

TEST(GdnNorm, L2NormMatchesDoubleLoop) {
  const uint64_t seed = gdn_test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  ops::Context ctx;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t R : {1, 7, 97}) {
      for (int64_t n : {1, 16, 33, 128}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dt) << " R=" << R << " n=" << n);
        const float eps = 1e-6f, scale = static_cast<float>(1.0 / std::sqrt(double(n)));
        auto xv = rng.normals(R * n, 2.0);
        for (int64_t i = 0; i < n; ++i) xv[i] *= 1e-4f;  // a row where eps matters
        xv = gdn_test::rounded(xv, dt);
        Tensor x = make(dt, {R, n}, xv), y = Tensor::empty(dt, {R, n});
        ops::l2_norm(ctx, x, eps, scale, y);
        std::vector<double> ref(R * n);
        for (int64_t r = 0; r < R; ++r) {
          double ss = 0.0;
          for (int64_t i = 0; i < n; ++i) ss += double(xv[r * n + i]) * xv[r * n + i];
          for (int64_t i = 0; i < n; ++i)
            ref[r * n + i] = xv[r * n + i] / std::sqrt(ss + eps) * scale;
        }
        EXPECT_LT(gdn_test::max_mixed_err(values(y), ref, storage_atol(dt)), storage_tol(dt));
        ops::l2_norm(ctx, x, eps, scale, x);  // in place
        EXPECT_EQ(values(x), values(y));
      }
    }
  }
}

TEST(GdnNorm, GatedRmsNormMatchesDoubleLoop) {
  const uint64_t seed = gdn_test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  ops::Context ctx;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t R : {1, 6, 97}) {
      for (int64_t n : {1, 16, 33, 128}) {
        SCOPED_TRACE(testing::Message() << dtype_name(dt) << " R=" << R << " n=" << n);
        const float eps = 1e-6f;
        auto xv = gdn_test::rounded(rng.normals(R * n, 3.0), dt);
        auto zv = gdn_test::rounded(rng.normals(R * n, 3.0), dt);
        auto wv = rng.uniforms(n, 0.2, 1.8);
        Tensor x = make(dt, {R, n}, xv), z = make(dt, {R, n}, zv), w = make(DType::F32, {n}, wv);
        Tensor y = Tensor::empty(dt, {R, n});
        ops::gated_rms_norm(ctx, x, z, w, eps, y);
        std::vector<double> ref(R * n);
        for (int64_t r = 0; r < R; ++r) {
          double ss = 0.0;
          for (int64_t i = 0; i < n; ++i) ss += double(xv[r * n + i]) * xv[r * n + i];
          const double f = 1.0 / std::sqrt(ss / n + eps);
          for (int64_t i = 0; i < n; ++i)
            ref[r * n + i] = double(wv[i]) * (xv[r * n + i] * f) * silu_ref(zv[r * n + i]);
        }
        EXPECT_LT(gdn_test::max_mixed_err(values(y), ref, storage_atol(dt)), 2 * storage_tol(dt));
        ops::gated_rms_norm(ctx, x, z, w, eps, x);  // in place
        EXPECT_EQ(values(x), values(y));
      }
    }
  }
}

TEST(GdnNorm, RejectBadShapes) {
  ops::Context ctx;
  Tensor x = gdn_test::zeros(DType::F32, {4, 8}), y = gdn_test::zeros(DType::F32, {4, 8});
  Tensor w = gdn_test::zeros(DType::F32, {8}), w7 = gdn_test::zeros(DType::F32, {7});
  Tensor w16 = gdn_test::zeros(DType::F16, {8}), y3 = gdn_test::zeros(DType::F32, {3, 8});
  Tensor zb = gdn_test::zeros(DType::BF16, {4, 8}), xi = gdn_test::zeros(DType::I8, {4, 8});
  EXPECT_NO_THROW(ops::l2_norm(ctx, x, 1e-6f, 1.0f, y));
  EXPECT_THROW(ops::l2_norm(ctx, x, 1e-6f, 1.0f, y3), Error);
  EXPECT_THROW(ops::l2_norm(ctx, x, 0.0f, 1.0f, y), Error);
  EXPECT_THROW(ops::l2_norm(ctx, xi, 1e-6f, 1.0f, y), Error);
  EXPECT_THROW(ops::l2_norm(ctx, x, 1e-6f, 1.0f, zb), Error);
  EXPECT_NO_THROW(ops::gated_rms_norm(ctx, x, x, w, 1e-6f, y));
  EXPECT_THROW(ops::gated_rms_norm(ctx, x, x, w7, 1e-6f, y), Error);
  EXPECT_THROW(ops::gated_rms_norm(ctx, x, x, w16, 1e-6f, y), Error);
  EXPECT_THROW(ops::gated_rms_norm(ctx, x, zb, w, 1e-6f, y), Error);
  EXPECT_THROW(ops::gated_rms_norm(ctx, x, y3, w, 1e-6f, y), Error);
  EXPECT_THROW(ops::gated_rms_norm(ctx, x, x, w, 1e-6f, y3), Error);
}

}  // namespace
}  // namespace vi
