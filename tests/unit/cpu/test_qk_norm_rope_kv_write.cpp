// qk_norm_rope_kv_write on the CPU backend: the same q, k and K/V pools (data and scales,
// written rows and untouched ones) as the ops it stands for (rms_norm of q and k heads, rope
// of both, kv_scatter / kv_scatter_i8), bit for bit, for the 27B layer's heads (24 q, 4 kv,
// D 256, rot 64) and small odd ones, every mix of f32 and i8 pools, both norm weight forms
// (w and 1 + w), fresh random values, positions and pool rows; and the shape errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ops/qk_norm_rope_kv_write.h"
#include "unit/cpu/cpu_test_util.h"
#include "unit/qk_norm_rope_unfused.h"

namespace vi {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// A pool [n_rows, Hkv, D] of dtype t full of random old rows (and scales for i8).
ops::KvRows random_pool(std::mt19937& rng, DType t, int64_t n_rows, int64_t Hkv, int64_t D) {
  if (t != DType::I8) return {test::random_f32(rng, {n_rows, Hkv, D}), {}};
  Tensor q = Tensor::empty(DType::I8, {n_rows, Hkv, D});
  std::uniform_int_distribution<int> u(-127, 127);
  for (int64_t i = 0; i < q.numel(); ++i) q.ptr<int8_t>()[i] = static_cast<int8_t>(u(rng));
  Tensor s = test::random_f32(rng, {n_rows, Hkv}, 0.01f);
  return {q, s};
}

ops::KvRows copy_of(const ops::KvRows& c) {
  return {test::copy_of(c.data), c.scale.data() ? test::copy_of(c.scale) : Tensor()};
}

Tensor i32(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty(DType::I32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.ptr<int32_t>());
  return t;
}

TEST(QkNormRopeKvWrite, EqualsNormRopeAndKvWrites) {
  std::mt19937 rng(test::test_seed());
  ops::Context ctx;
  const float eps = 1e-6f, theta = 1e7f;
  const std::tuple<int64_t, int64_t, int64_t, int64_t, int> shapes[] = {
      {1, 24, 4, 256, 64}, {3, 24, 4, 256, 64}, {5, 3, 1, 37, 10}, {2, 4, 2, 16, 16}};  // N, Hq, Hkv, D, rot
  const std::pair<DType, DType> caches[] = {
      {DType::F32, DType::F32}, {DType::I8, DType::I8}, {DType::I8, DType::F32}, {DType::F32, DType::I8}};
  for (auto [N, Hq, Hkv, D, rot] : shapes) {
    for (auto [tk, tv] : caches) {
      for (float w_offset : {0.0f, 1.0f}) {
        const int64_t n_rows = 4 * 16;  // four blocks of 16: the rows land in several blocks
        std::vector<int32_t> perm(static_cast<size_t>(n_rows));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        perm.resize(static_cast<size_t>(N));
        std::vector<int32_t> p(static_cast<size_t>(N));
        std::uniform_int_distribution<int32_t> up(0, 5000);
        p[0] = up(rng);
        for (size_t t = 1; t < p.size(); ++t) p[t] = p[t - 1] + 1;  // a sequence's consecutive tokens
        const Tensor rows = i32(perm), pos = i32(p);
        Tensor q = test::random_f32(rng, {N, Hq, D}, 2.0f), k = test::random_f32(rng, {N, Hkv, D}, 2.0f);
        Tensor v = test::random_f32(rng, {N, Hkv, D});
        Tensor qw = test::random_f32(rng, {D}, 0.5f), kw = test::random_f32(rng, {D}, 0.5f);
        ops::KvRows kc = random_pool(rng, tk, n_rows, Hkv, D), vc = random_pool(rng, tv, n_rows, Hkv, D);
        Tensor q_ref = test::copy_of(q), k_ref = test::copy_of(k);
        ops::KvRows kc_ref = copy_of(kc), vc_ref = copy_of(vc);

        ops::qk_norm_rope_kv_write(ctx, q, k, v, qw, kw, eps, w_offset, pos, rot, theta, kc, vc, rows);
        test::unfused_qk_norm_rope_kv_write(ctx, q_ref, k_ref, v, qw, kw, eps, w_offset, pos, rot, theta, kc_ref,
                                            vc_ref, rows);

        const std::string what = "N=" + std::to_string(N) + " Hq=" + std::to_string(Hq) + " Hkv=" +
                                 std::to_string(Hkv) + " D=" + std::to_string(D) + " rot=" + std::to_string(rot) +
                                 " K " + dtype_name(tk) + " V " + dtype_name(tv) +
                                 " w_offset=" + std::to_string(w_offset);
        EXPECT_TRUE(same_bits(q, q_ref)) << "q, " << what;
        EXPECT_TRUE(same_bits(k, k_ref)) << "k, " << what;
        EXPECT_TRUE(same_bits(kc.data, kc_ref.data)) << "K pool, " << what;
        EXPECT_TRUE(same_bits(vc.data, vc_ref.data)) << "V pool, " << what;
        if (tk == DType::I8) {
          EXPECT_TRUE(same_bits(kc.scale, kc_ref.scale)) << "K scales, " << what;
        }
        if (tv == DType::I8) {
          EXPECT_TRUE(same_bits(vc.scale, vc_ref.scale)) << "V scales, " << what;
        }
      }
    }
  }
}

TEST(QkNormRopeKvWrite, Errors) {
  std::mt19937 rng(1);
  ops::Context ctx;
  const int64_t N = 2, Hq = 4, Hkv = 2, D = 16, n_rows = 8;
  Tensor q = test::random_f32(rng, {N, Hq, D}), k = test::random_f32(rng, {N, Hkv, D});
  Tensor v = test::random_f32(rng, {N, Hkv, D}), w = test::random_f32(rng, {D});
  const Tensor pos = i32({3, 4}), rows = i32({5, 1});
  ops::KvRows kc = random_pool(rng, DType::I8, n_rows, Hkv, D), vc = random_pool(rng, DType::F32, n_rows, Hkv, D);
  auto call = [&](const Tensor& vv, const Tensor& ww, const Tensor& rr, ops::KvRows kk, ops::KvRows vvc, int rot) {
    return test::error_of(
        [&] { ops::qk_norm_rope_kv_write(ctx, q, k, vv, w, ww, 1e-6f, 1.0f, pos, rot, 1e4f, kk, vvc, rr); });
  };
  ops::qk_norm_rope_kv_write(ctx, q, k, v, w, w, 1e-6f, 1.0f, pos, 8, 1e4f, kc, vc, rows);  // valid
  std::string msg = call(test::random_f32(rng, {N, Hkv + 1, D}), w, rows, kc, vc, 8);
  EXPECT_NE(msg.find("must have the shape of k"), std::string::npos) << msg;
  msg = call(v, test::random_f32(rng, {D + 1}), rows, kc, vc, 8);
  EXPECT_NE(msg.find("norm weight"), std::string::npos) << msg;
  msg = call(v, w, i32({5, int32_t(n_rows)}), kc, vc, 8);
  EXPECT_NE(msg.find("outside the pool of 8 rows"), std::string::npos) << msg;
  msg = call(v, w, rows, kc, vc, 7);
  EXPECT_NE(msg.find("rot_dim 7 must be even"), std::string::npos) << msg;
  msg = call(v, w, rows, ops::KvRows{kc.data, {}}, vc, 8);
  EXPECT_NE(msg.find("i8 K cache"), std::string::npos) << msg;
  msg = call(v, w, rows, kc, ops::KvRows{Tensor::empty(DType::F16, {n_rows, Hkv, D}), {}}, 8);
  EXPECT_NE(msg.find("V cache"), std::string::npos) << msg;
  msg = call(v, w, rows, kc, ops::KvRows{test::random_f32(rng, {n_rows + 1, Hkv, D}), {}}, 8);
  EXPECT_NE(msg.find("must be [n_rows=8, Hkv=2, D=16]"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vi
