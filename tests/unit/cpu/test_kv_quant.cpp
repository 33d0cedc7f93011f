// The int8 KV cache on the CPU (the reference for the GPU): the block Hadamard rule
// (orthonormal, its own inverse, confined to its power-of-two blocks for head dims that
// are not powers of two), the quantizing write (scale = max|x| / 127, error <= scale / 2
// per element of the rotated row), the point of rotating K (an outlier channel costs less
// precision), and attention over i8 K/V against the float op. Fresh random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "ops/kv_quant.h"
#include "ops/paged_attention.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

std::vector<float> rotated(std::vector<float> x) {
  ops::hadamard_rotate(x.data(), static_cast<int64_t>(x.size()));
  return x;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

TEST(KvQuant, HadamardIsOrthonormalAndItsOwnInverse) {
  std::mt19937 rng(test::test_seed());
  std::normal_distribution<float> nd;
  for (int64_t D : {1, 2, 37, 64, 72, 80, 128, 256}) {
    std::vector<float> a(static_cast<size_t>(D)), b(static_cast<size_t>(D));
    for (auto& x : a) x = nd(rng);
    for (auto& x : b) x = nd(rng);
    const std::vector<float> ra = rotated(a), rb = rotated(b), back = rotated(ra);
    EXPECT_NEAR(dot(ra, rb), dot(a, b), 1e-4 * D) << "D=" << D;  // q·k is kept
    for (int64_t i = 0; i < D; ++i) EXPECT_NEAR(back[i], a[i], 1e-5) << "D=" << D << " i=" << i;
  }
}

TEST(KvQuant, HadamardBlocksForHeadDimsNotPowersOfTwo) {
  // D = 80 is 64 + 16: a unit vector in the second block spreads over dims 64..79 only,
  // each with magnitude 1/4; D = 37 is 32 + 4 + 1: the last dim stays as it is.
  std::vector<float> e(80, 0.0f);
  e[70] = 1.0f;
  const std::vector<float> r = rotated(e);
  for (int i = 0; i < 80; ++i) EXPECT_FLOAT_EQ(std::fabs(r[i]), i >= 64 ? 0.25f : 0.0f) << i;
  std::vector<float> f(37, 0.0f);
  f[36] = -3.0f;
  f[33] = 1.0f;
  const std::vector<float> s = rotated(f);
  EXPECT_FLOAT_EQ(s[36], -3.0f);
  for (int i = 32; i < 36; ++i) EXPECT_FLOAT_EQ(std::fabs(s[i]), 0.5f) << i;
  for (int i = 0; i < 32; ++i) EXPECT_EQ(s[i], 0.0f) << i;
}

struct Pool {
  Tensor q, scale;  // [rows, Hkv, D] i8, [rows, Hkv] f32
};

Pool write_i8(const Tensor& x, int64_t Hkv, int64_t D, bool rotate, int64_t bs) {
  const int64_t rows = x.dim(0), n_blocks = (rows + bs - 1) / bs;
  Pool p{Tensor::empty(DType::I8, {n_blocks * bs, Hkv, D}), Tensor::empty(DType::F32, {n_blocks * bs, Hkv})};
  Tensor tbl = Tensor::empty(DType::I32, {n_blocks});
  std::iota(tbl.ptr<int32_t>(), tbl.ptr<int32_t>() + n_blocks, 0);
  ops::Context ctx;
  ops::paged_kv_write_i8(ctx, x, p.q, p.scale, tbl, bs, 0, rotate);
  return p;
}

TEST(KvQuant, WriteQuantizesTheRotatedRowsWithinHalfAStep) {
  std::mt19937 rng(test::test_seed());
  for (int64_t D : {256, 80, 37}) {
    const int64_t T = 21, Hkv = 3, bs = 8;
    Tensor x = test::random_f32(rng, {T, Hkv * D}, 2.0f);
    for (int h = 0; h < D; ++h) x.ptr<float>()[5 * Hkv * D + h] = 0.0f;  // a zero head vector: scale 0
    for (bool rotate : {true, false}) {
      Pool p = write_i8(x, Hkv, D, rotate, bs);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < Hkv; ++h) {
          std::vector<float> want(x.ptr<float>() + (t * Hkv + h) * D, x.ptr<float>() + (t * Hkv + h + 1) * D);
          if (rotate) want = rotated(want);
          float amax = 0.0f;
          for (float w : want) amax = std::max(amax, std::fabs(w));
          const float s = p.scale.ptr<float>()[t * Hkv + h];
          ASSERT_FLOAT_EQ(s, amax / 127.0f) << "t=" << t << " h=" << h;
          for (int64_t d = 0; d < D; ++d) {
            const int8_t qv = p.q.ptr<int8_t>()[(t * Hkv + h) * D + d];
            ASSERT_GE(qv, -127);
            ASSERT_LE(std::fabs(s * qv - want[d]), 0.5f * s + 1e-6f) << "D=" << D << " t=" << t << " d=" << d;
          }
        }
    }
  }
}

// Keys with one outlier channel (20x the others): without the rotation the outlier sets
// the scale and the other channels keep a few int8 levels; rotated, the error is smaller.
TEST(KvQuant, RotationShrinksTheErrorOfOutlierChannels) {
  std::mt19937 rng(test::test_seed());
  const int64_t T = 64, Hkv = 1, D = 128;
  Tensor x = test::random_f32(rng, {T, D}, 1.0f);
  for (int64_t t = 0; t < T; ++t) x.ptr<float>()[t * D + 17] *= 20.0f;
  auto err = [&](bool rotate) {
    Pool p = write_i8(x, Hkv, D, rotate, 16);
    double e = 0, n = 0;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> deq(static_cast<size_t>(D));
      for (int64_t d = 0; d < D; ++d) deq[d] = p.scale.ptr<float>()[t] * p.q.ptr<int8_t>()[t * D + d];
      if (rotate) deq = rotated(deq);  // back to the original basis (H is its own inverse)
      for (int64_t d = 0; d < D; ++d) {
        const double w = x.ptr<float>()[t * D + d];
        e += (deq[d] - w) * (deq[d] - w);
        n += w * w;
      }
    }
    return std::sqrt(e / n);
  };
  const double plain = err(false), rot = err(true);
  EXPECT_LT(rot, 0.5 * plain) << "rotated " << rot << " vs plain " << plain;
}

// Attention over i8 K and V (and i8 K with f32 V) stays close to attention over the float
// rows they came from: the quantization error of 8 bits, not a layout or rotation mistake
// (a query not rotated like the keys gives errors of order 1).
TEST(KvQuant, AttentionOverInt8IsCloseToFloat) {
  std::mt19937 rng(test::test_seed());
  for (int64_t D : {128, 80}) {
    const int64_t Hq = 6, Hkv = 2, S = 157, bs = 16, T = 5, n_blocks = (S + bs - 1) / bs;
    Tensor k = test::random_f32(rng, {n_blocks * bs, Hkv * D}), v = test::random_f32(rng, {n_blocks * bs, Hkv * D});
    Tensor q = test::random_f32(rng, {T, Hq, D}, 2.0f);
    Tensor tbl = Tensor::empty(DType::I32, {n_blocks});
    std::iota(tbl.ptr<int32_t>(), tbl.ptr<int32_t>() + n_blocks, 0);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    ops::Context ctx;
    Tensor ref = Tensor::empty(DType::F32, {T, Hq, D}), got = Tensor::empty(DType::F32, {T, Hq, D});
    Tensor kf = k.reshape({n_blocks * bs, Hkv, D}), vf = v.reshape({n_blocks * bs, Hkv, D});
    ops::paged_attention(ctx, q, kf, vf, tbl, bs, S - T, scale, ref);
    Pool kq = write_i8(k, Hkv, D, true, bs), vq = write_i8(v, Hkv, D, false, bs);
    for (bool v_i8 : {true, false}) {
      ops::paged_attention(ctx, q, ops::KvRows{kq.q, kq.scale}, v_i8 ? ops::KvRows{vq.q, vq.scale} : ops::KvRows{vf, {}},
                           tbl, bs, S - T, scale, got);
      double e = 0, n = 0;
      for (int64_t i = 0; i < ref.numel(); ++i) {
        const double a = got.ptr<float>()[i], b = ref.ptr<float>()[i];
        e += (a - b) * (a - b);
        n += b * b;
      }
      EXPECT_LT(std::sqrt(e / n), 2e-2) << "D=" << D << " v_i8=" << v_i8;
    }
  }
}

TEST(KvQuant, BadPoolsAreErrors) {
  ops::Context ctx;
  Tensor x = Tensor::empty(DType::F32, {2, 2 * 8});
  Tensor tbl = Tensor::empty(DType::I32, {1});
  tbl.ptr<int32_t>()[0] = 0;
  Tensor pool = Tensor::empty(DType::I8, {8, 2, 8}), scale = Tensor::empty(DType::F32, {8, 2});
  Tensor wrong_scale = Tensor::empty(DType::F32, {8, 3});
  EXPECT_THROW(ops::paged_kv_write_i8(ctx, x, pool, wrong_scale, tbl, 8, 0, true), Error);
  EXPECT_THROW(ops::paged_kv_write_i8(ctx, x, pool, scale, tbl, 8, 7, true), Error);  // needs a 2nd block
  Tensor q = Tensor::empty(DType::F32, {1, 2, 8}), out = Tensor::empty(DType::F32, {1, 2, 8});
  EXPECT_THROW(ops::paged_attention(ctx, q, ops::KvRows{pool, {}}, ops::KvRows{pool, scale}, tbl, 8, 0, 1.0f, out),
               Error);  // i8 K without its scale
}

}  // namespace
}  // namespace vi
