// The per-op profiler (ops/profiler.h) on the CPU backend: every op entry point records
// one call with the bytes and FLOPs its arguments imply, an op called inside another op
// is timed once (as the outer op), nothing is recorded outside a round, and the round's
// op times fit inside its wall time.
#include <gtest/gtest.h>

#include <random>

#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/norm.h"
#include "ops/paged_attention.h"
#include "ops/profiler.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

const ops::OpProfiler::Row* find(const ops::OpProfiler::Summary& s, const std::string& op) {
  for (const auto& r : s.rows)
    if (r.op == op) return &r;
  return nullptr;
}

struct Inputs {
  Tensor x, w, y, q, k, v, att, pool, table;
  int64_t T, K, N, Hq, Hkv, D, S;
};

Inputs make_inputs(std::mt19937& rng) {
  Inputs in;
  in.T = 3, in.K = 37, in.N = 29, in.Hq = 4, in.Hkv = 2, in.D = 6, in.S = 11;  // odd sizes
  in.x = test::random_f32(rng, {in.T, in.K});
  in.w = test::random_f32(rng, {in.N, in.K});
  in.y = Tensor::empty(DType::F32, {in.T, in.N});
  in.q = test::random_f32(rng, {in.T, in.Hq, in.D});
  in.k = test::random_f32(rng, {in.S, in.Hkv, in.D});
  in.v = test::random_f32(rng, {in.S, in.Hkv, in.D});
  in.att = Tensor::empty(DType::F32, {in.T, in.Hq, in.D});
  in.pool = Tensor::empty(DType::F32, {4 * 5, in.K});  // 4 blocks of 5 rows
  in.table = Tensor::empty(DType::I32, {4});
  for (int i = 0; i < 4; ++i) in.table.ptr<int32_t>()[i] = 3 - i;
  return in;
}

// One "round": two matmuls, an add, an attention, and a KV write that calls ops::copy
// once per block it touches (positions 3..5 span two blocks of 5).
void run_round(ops::Context& ctx, Inputs& in) {
  ops::matmul(ctx, in.x, in.w, in.y);
  ops::matmul(ctx, in.x, in.w, in.y);
  ops::add(ctx, in.y, in.y, in.y);
  const int64_t q_pos0 = in.S - in.T;
  ops::attention(ctx, in.q, in.k, in.v, q_pos0, 0.5f, in.att);
  ops::paged_kv_write(ctx, in.x, in.pool, in.table, 5, 3);
}

TEST(OpProfiler, CountsCallsBytesAndFlopsPerRound) {
  std::mt19937 rng(test::test_seed());
  Inputs in = make_inputs(rng);
  ops::Context ctx;
  ops::OpProfiler prof(Device::CPU);
  ctx.profiler = &prof;
  run_round(ctx, in);  // outside a round: not recorded
  for (int r = 0; r < 3; ++r) {
    prof.begin_round(ctx);
    run_round(ctx, in);
    prof.end_round(ctx);
  }
  ctx.profiler = nullptr;
  run_round(ctx, in);  // profiler detached: the ops still run

  const auto s = prof.summary();
  EXPECT_EQ(s.rounds, 3);
  const auto* mm = find(s, "matmul");
  ASSERT_NE(mm, nullptr);
  EXPECT_DOUBLE_EQ(mm->calls, 2);  // per round, not over the three rounds
  EXPECT_DOUBLE_EQ(mm->bytes, 2.0 * (in.x.nbytes() + in.w.nbytes() + in.y.nbytes()));
  EXPECT_DOUBLE_EQ(mm->flops, 2.0 * 2 * in.N * in.K * in.T);
  EXPECT_EQ(mm->dtype, "f32");
  EXPECT_EQ(mm->shape, "29x37 T=3");

  const auto* at = find(s, "attention");
  ASSERT_NE(at, nullptr);
  // Query t (position S-T+t) sees S-T+t+1 keys: 9 + 10 + 11 = 30 query-key pairs, each a
  // D-long dot product and a D-long weighted sum per query head.
  EXPECT_DOUBLE_EQ(at->flops, 4.0 * in.Hq * in.D * 30);
  // K and V rows of the 11 positions, q and out.
  EXPECT_DOUBLE_EQ(at->bytes, 2.0 * in.S * in.Hkv * in.D * 4 + 2.0 * in.q.nbytes());

  const auto* kv = find(s, "kv_scatter");  // paged_kv_write's one scatter
  ASSERT_NE(kv, nullptr);
  EXPECT_DOUBLE_EQ(kv->calls, 1);
  EXPECT_EQ(find(s, "copy"), nullptr);
  EXPECT_DOUBLE_EQ(find(s, "add")->calls, 1);

  double op_us = 0, bytes = 0;
  for (const auto& r : s.rows) {
    EXPECT_GE(r.us, 0) << r.op;
    op_us += r.us;
    bytes += r.bytes;
  }
  EXPECT_NEAR(op_us, s.op_us, 1e-6 * (1 + op_us));
  EXPECT_DOUBLE_EQ(bytes, s.bytes);
  EXPECT_GT(s.op_us, 0);
  EXPECT_LE(s.op_us, s.wall_us) << "op times cannot exceed the round they ran in";
  const std::string md = prof.markdown();
  EXPECT_NE(md.find("| matmul | f32 | 29x37 T=3 | 2 |"), std::string::npos) << md;
  EXPECT_NE(md.find("gap"), std::string::npos) << md;
}

TEST(OpProfiler, CountOnlyModeHasBytesButNoTimes) {
  std::mt19937 rng(test::test_seed());
  Inputs in = make_inputs(rng);
  ops::Context ctx;
  ops::OpProfiler prof(Device::CPU, /*timed=*/false);
  ctx.profiler = &prof;
  prof.begin_round(ctx);
  run_round(ctx, in);
  prof.end_round(ctx);
  const auto s = prof.summary();
  EXPECT_EQ(s.op_us, 0);
  EXPECT_GT(s.bytes, 0);
  EXPECT_GT(s.flops, 0);
  prof.reset();
  EXPECT_EQ(prof.summary().rounds, 0);
}

// The hooks a kernel tracer labels kernels with: one enter/leave pair per recorded call, with
// the call's index in round_calls(); nested calls (paged_kv_write's copies) and calls outside a
// round are not reported.
TEST(OpProfiler, CallHooksSeeEveryRecordedCallOnce) {
  std::mt19937 rng(test::test_seed());
  Inputs in = make_inputs(rng);
  ops::Context ctx;
  ops::OpProfiler prof(Device::CPU, /*timed=*/false);
  struct Log {
    std::vector<int64_t> entered;
    int open = 0, left = 0, max_open = 0;
  } log;
  ops::OpProfiler::CallHooks h;
  h.user = &log;
  h.enter = [](void* u, int64_t call) {
    auto* l = static_cast<Log*>(u);
    l->entered.push_back(call);
    l->max_open = std::max(l->max_open, ++l->open);
  };
  h.leave = [](void* u) {
    auto* l = static_cast<Log*>(u);
    --l->open;
    ++l->left;
  };
  prof.set_call_hooks(h);
  ctx.profiler = &prof;
  run_round(ctx, in);  // outside a round
  EXPECT_TRUE(log.entered.empty());
  prof.begin_round(ctx);
  run_round(ctx, in);
  prof.end_round(ctx);
  const auto& calls = prof.round_calls();
  ASSERT_EQ(calls.size(), 5u);  // matmul x2, add, attention, kv_scatter
  ASSERT_EQ(log.entered.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(log.entered[i], static_cast<int64_t>(i));
  EXPECT_EQ(log.left, 5);
  EXPECT_EQ(log.open, 0);
  EXPECT_EQ(log.max_open, 1);
  EXPECT_STREQ(calls[2].op, "add");
  EXPECT_STREQ(calls[4].op, "kv_scatter");
}

TEST(OpProfiler, RoundsMustPair) {
  ops::Context ctx;
  ops::OpProfiler prof(Device::CPU);
  EXPECT_THROW(prof.end_round(ctx), Error);
  prof.begin_round(ctx);
  EXPECT_THROW(prof.begin_round(ctx), Error);
  EXPECT_THROW(prof.reset(), Error);
  prof.end_round(ctx);
  ops::Context gpu;
  gpu.device = Device::CUDA;
  EXPECT_THROW(prof.begin_round(gpu), Error);  // made for the CPU
}

}  // namespace
}  // namespace vi
