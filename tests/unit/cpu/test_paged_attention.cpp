// Paged attention vs a double-precision reference over a shuffled block table, and vs
// ops::attention on the same rows gathered contiguously (must be bit-identical: the
// model switched to the paged op without changing its numbers). paged_kv_write vs a
// plain loop. Odd sizes, fresh random inputs; bad tables are errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/paged_attention.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

struct Case {
  int64_t T, q_pos0, Hq, Hkv, D, bs, n_blocks;
};

Tensor shuffled_table(std::mt19937& rng, int64_t n_tbl, int64_t n_blocks) {
  std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  Tensor t = Tensor::empty(DType::I32, {n_tbl});
  for (int64_t i = 0; i < n_tbl; ++i) t.ptr<int32_t>()[i] = ids[static_cast<size_t>(i)];
  return t;
}

// Random queries [T, Hq, D], K and V pools of n_blocks blocks of bs rows [n_blocks * bs, Hkv, D]
// and a shuffled block table of n_tbl entries, drawn in that order.
struct PagedInputs {
  Tensor q, kp, vp, tbl;
};
PagedInputs paged_inputs(std::mt19937& rng, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t bs,
                         int64_t n_blocks, int64_t n_tbl) {
  PagedInputs in;
  in.q = test::random_f32(rng, {T, Hq, D});
  in.kp = test::random_f32(rng, {n_blocks * bs, Hkv, D});
  in.vp = test::random_f32(rng, {n_blocks * bs, Hkv, D});
  in.tbl = shuffled_table(rng, n_tbl, n_blocks);
  return in;
}

void check(const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << "T=" << c.T << " q_pos0=" << c.q_pos0 << " Hq=" << c.Hq << " Hkv=" << c.Hkv
                                    << " D=" << c.D << " bs=" << c.bs);
  const int64_t S = c.q_pos0 + c.T, n_tbl = (S + c.bs - 1) / c.bs;
  ASSERT_LE(n_tbl, c.n_blocks);
  Tensor q = test::random_f32(rng, {c.T, c.Hq, c.D});
  Tensor kp = test::random_f32(rng, {c.n_blocks * c.bs, c.Hkv, c.D});
  Tensor vp = test::random_f32(rng, {c.n_blocks * c.bs, c.Hkv, c.D});
  Tensor tbl = shuffled_table(rng, n_tbl, c.n_blocks);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.D));

  // Contiguous copies of the sequence's rows.
  Tensor kc = Tensor::empty(DType::F32, {S, c.Hkv, c.D}), vc = Tensor::empty(DType::F32, {S, c.Hkv, c.D});
  const int64_t W = c.Hkv * c.D;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t row = tbl.ptr<int32_t>()[s / c.bs] * c.bs + s % c.bs;
    std::memcpy(kc.ptr<float>() + s * W, kp.ptr<float>() + row * W, W * sizeof(float));
    std::memcpy(vc.ptr<float>() + s * W, vp.ptr<float>() + row * W, W * sizeof(float));
  }
  ThreadPool p1(1), p3(3);
  ops::Context c1{Device::CPU, &p1}, c3{Device::CPU, &p3};
  Tensor o1 = Tensor::empty(DType::F32, {c.T, c.Hq, c.D}), o3 = Tensor::empty(DType::F32, {c.T, c.Hq, c.D});
  Tensor oc = Tensor::empty(DType::F32, {c.T, c.Hq, c.D});
  ops::paged_attention(c1, q, kp, vp, tbl, c.bs, c.q_pos0, scale, o1);
  ops::paged_attention(c3, q, kp, vp, tbl, c.bs, c.q_pos0, scale, o3);
  ops::attention(c1, q, kc, vc, c.q_pos0, scale, oc);
  test::expect_bitwise_equal(o1, o3, "paged_attention threads");
  test::expect_bitwise_equal(o1, oc, "paged vs contiguous attention");

  std::vector<double> want;
  const int64_t group = c.Hq / c.Hkv;
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t h = 0; h < c.Hq; ++h) {
      const float* qr = q.ptr<float>() + (t * c.Hq + h) * c.D;
      const int64_t hk = h / group, n = c.q_pos0 + t + 1;
      std::vector<double> sc(static_cast<size_t>(n));
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        const float* kr = kc.ptr<float>() + (j * c.Hkv + hk) * c.D;
        double d = 0;
        for (int64_t i = 0; i < c.D; ++i) d += static_cast<double>(qr[i]) * kr[i];
        sc[j] = d * scale;
        mx = std::max(mx, sc[j]);
      }
      for (double& e : sc) sum += (e = std::exp(e - mx));
      for (int64_t i = 0; i < c.D; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += sc[j] / sum * vc.ptr<float>()[(j * c.Hkv + hk) * c.D + i];
        want.push_back(acc);
      }
    }
  // fp32 dot products of length D and a softmax over S keys: 1e-4 relative is ample.
  test::expect_close(o1, want, 1e-4, 1e-5, "paged_attention");
}

TEST(PagedAttention, MatchesReferenceAndContiguousOp) {
  std::mt19937 rng(test::test_seed());
  for (const Case& c : {Case{1, 0, 4, 2, 16, 16, 3}, Case{7, 0, 6, 3, 24, 4, 5}, Case{1, 37, 4, 1, 32, 16, 6},
                        Case{13, 29, 8, 2, 40, 8, 9}, Case{33, 64, 2, 2, 8, 32, 4}, Case{5, 111, 3, 1, 12, 7, 20}})
    check(c, rng);
}

TEST(PagedKvWrite, ScattersRowsThroughTable) {
  std::mt19937 rng(test::test_seed());
  ops::Context ctx;
  for (auto [T, pos0, bs] : {std::tuple<int64_t, int64_t, int64_t>{1, 0, 16}, {19, 5, 8}, {40, 33, 16}, {3, 14, 5}}) {
    const int64_t W = 11, n_blocks = (pos0 + T + bs - 1) / bs + 2;
    Tensor pool = test::random_f32(rng, {n_blocks * bs, W});
    Tensor before = test::copy_of(pool);
    Tensor x = test::random_f32(rng, {T, W});
    Tensor tbl = shuffled_table(rng, (pos0 + T + bs - 1) / bs, n_blocks);
    ops::paged_kv_write(ctx, x, pool, tbl, bs, pos0);
    std::vector<double> want(before.ptr<float>(), before.ptr<float>() + before.numel());
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p = pos0 + t, row = tbl.ptr<int32_t>()[p / bs] * bs + p % bs;
      for (int64_t i = 0; i < W; ++i) want[row * W + i] = x.ptr<float>()[t * W + i];
    }
    test::expect_close(pool, want, 0, 0, "paged_kv_write");
  }
}

// A backend without a paged kernel fails loudly, naming the op and dtypes (no silent slow path).
TEST(PagedAttention, MissingKernelIsAnError) {
  std::mt19937 rng(test::test_seed());
  const int64_t T = 5, q_pos0 = 21, Hq = 4, Hkv = 2, D = 16, bs = 8, n_blocks = 6;
  auto [q, kp, vp, tbl] = paged_inputs(rng, T, Hq, Hkv, D, bs, n_blocks, (q_pos0 + T + bs - 1) / bs);
  Tensor out = Tensor::empty(DType::F32, {T, Hq, D});
  ops::Context ctx;
  auto kernel = ops::paged_attention_table().get(Device::CPU, DType::F32);
  ops::paged_attention_table().add(Device::CPU, DType::F32, nullptr);  // as if the backend lacked it
  try {
    ops::paged_attention(ctx, q, kp, vp, tbl, bs, q_pos0, 0.25f, out);
    ADD_FAILURE() << "no error without a kernel";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no cpu kernel for K f32"), std::string::npos) << e.what();
  }
  ops::paged_attention_table().add(Device::CPU, DType::F32, kernel);
}

// The device-position form: positions in a tensor and a loose key bound give the same
// numbers as the exact host position (what a recorded step relies on), and a position past
// the bound is refused.
TEST(PagedAttention, PositionTensorAndBoundMatchHostPosition) {
  std::mt19937 rng(test::test_seed());
  const int64_t T = 3, q_pos0 = 13, Hq = 4, Hkv = 2, D = 16, bs = 8, n_blocks = 8;
  auto [q, kp, vp, tbl] = paged_inputs(rng, T, Hq, Hkv, D, bs, n_blocks, n_blocks);  // covers the loose bound too
  Tensor want = Tensor::empty(DType::F32, {T, Hq, D}), got = Tensor::empty(DType::F32, {T, Hq, D});
  ops::Context ctx;
  ops::paged_attention(ctx, q, kp, vp, tbl, bs, q_pos0, 0.25f, want);
  Tensor pos = Tensor::empty(DType::I32, {T});
  for (int64_t t = 0; t < T; ++t) pos.ptr<int32_t>()[t] = static_cast<int32_t>(q_pos0 + t);
  ops::paged_attention(ctx, q, ops::KvRows{kp, {}}, ops::KvRows{vp, {}}, tbl, bs, pos, n_blocks * bs, 0.25f, got);
  test::expect_bitwise_equal(got, want, "position tensor, loose bound");
  EXPECT_THROW(ops::paged_attention(ctx, q, ops::KvRows{kp, {}}, ops::KvRows{vp, {}}, tbl, bs, pos, q_pos0 + T - 1,
                                    0.25f, got),
               Error);
}

// The output gate (gated attention): out = attention · sigmoid(gate), bit for bit the plain op
// followed by sigmoid_mul, the gate itself left as it was; a gate of another shape, or out
// itself, is refused.
TEST(PagedAttention, OutputGateIsSigmoidMulAfterTheOp) {
  std::mt19937 rng(test::test_seed());
  const int64_t T = 3, q_pos0 = 17, Hq = 4, Hkv = 2, D = 16, bs = 8, n_blocks = 6;
  auto [q, kp, vp, tbl] = paged_inputs(rng, T, Hq, Hkv, D, bs, n_blocks, (q_pos0 + T + bs - 1) / bs);
  Tensor gate = test::random_f32(rng, {T, Hq, D}, 3.0f);
  const Tensor gate_before = test::copy_of(gate);
  Tensor want = Tensor::empty(DType::F32, {T, Hq, D}), got = Tensor::empty(DType::F32, {T, Hq, D});
  ThreadPool p3(3);
  ops::Context ctx{Device::CPU, &p3};
  ops::paged_attention(ctx, q, ops::KvRows{kp, {}}, ops::KvRows{vp, {}}, tbl, bs, q_pos0, 0.25f, want);
  ops::sigmoid_mul(ctx, want, gate, want);
  ops::paged_attention(ctx, q, ops::KvRows{kp, {}}, ops::KvRows{vp, {}}, tbl, bs, q_pos0, 0.25f, got, &gate);
  test::expect_bitwise_equal(got, want, "gated op against the op and sigmoid_mul");
  test::expect_bitwise_equal(gate, gate_before, "the gate is read only");
  Tensor plain = Tensor::empty(DType::F32, {T, Hq, D});
  ops::paged_attention(ctx, q, ops::KvRows{kp, {}}, ops::KvRows{vp, {}}, tbl, bs, q_pos0, 0.25f, plain);
  EXPECT_NE(std::memcmp(plain.data(), got.data(), got.nbytes()), 0) << "the gate changed nothing";

  Tensor short_gate = Tensor::empty(DType::F32, {T - 1, Hq, D});
  Tensor flat_gate = Tensor::empty(DType::F32, {T, Hq * D});
  for (const Tensor* bad : {&short_gate, &flat_gate, &got})
    EXPECT_THROW(ops::paged_attention(ctx, q, ops::KvRows{kp, {}}, ops::KvRows{vp, {}}, tbl, bs, q_pos0, 0.25f, got,
                                      bad),
                 Error);
}

TEST(PagedAttention, RejectsShortOrBadTables) {
  ops::Context ctx;
  Tensor q = Tensor::empty(DType::F32, {2, 2, 8}), out = Tensor::empty(DType::F32, {2, 2, 8});
  Tensor kp = Tensor::empty(DType::F32, {32, 1, 8}), vp = Tensor::empty(DType::F32, {32, 1, 8});
  Tensor tbl = Tensor::empty(DType::I32, {2});
  tbl.ptr<int32_t>()[0] = 0;
  tbl.ptr<int32_t>()[1] = 5;  // pool has 4 blocks of 8
  EXPECT_THROW(ops::paged_attention(ctx, q, kp, vp, tbl, 8, 7, 1.0f, out), Error);  // needs entry 1
  EXPECT_THROW(ops::paged_attention(ctx, q, kp, vp, tbl, 8, 15, 1.0f, out), Error);  // needs 3 entries
  EXPECT_NO_THROW(ops::paged_attention(ctx, q, kp, vp, tbl, 8, 2, 1.0f, out));
  Tensor x = Tensor::empty(DType::F32, {3, 8});
  Tensor pool = Tensor::empty(DType::F32, {32, 8});
  EXPECT_THROW(ops::paged_kv_write(ctx, x, pool, tbl, 8, 6), Error);
}

}  // namespace
}  // namespace vi
