// BatchPlan: the per-step metadata every model reads. Where each new token's K/V row goes
// through a sequence's block table, the table entries a step may read, and the key bounds
// that stage() gives attention launches (exact for op-by-op steps, power-of-two buckets for
// recorded ones, never below the true length nor above the sequence's capacity).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "core/error.h"
#include "models/batch.h"

namespace vi {
namespace {

class TableSeq final : public SequenceState {
 public:
  TableSeq(std::shared_ptr<KvPool> pool, int64_t n_ctx, int64_t n_past) {
    pool_ = std::move(pool);
    capacity_ = n_ctx;
    n_past_ = n_past;
  }
  void truncate(int64_t n) override { n_past_ = n; }
};

std::shared_ptr<KvPool> pool_of(int64_t n_blocks, int64_t bs) {
  auto p = std::make_shared<KvPool>();
  p->block_size = bs;
  p->n_blocks = n_blocks;
  return p;
}

// A sequence holding `past` tokens whose table is a random permutation of the pool's blocks.
std::unique_ptr<TableSeq> seq_with_shuffled_table(std::mt19937& rng, std::shared_ptr<KvPool> pool, int64_t n_ctx,
                                                  int64_t past) {
  auto s = std::make_unique<TableSeq>(pool, n_ctx, past);
  s->block_table().resize(static_cast<size_t>(pool->n_blocks));
  std::iota(s->block_table().begin(), s->block_table().end(), 0);
  std::shuffle(s->block_table().begin(), s->block_table().end(), rng);
  return s;
}

TEST(BatchPlan, KvRowsFollowEachSequencesTable) {
  std::mt19937 rng(7);
  const int64_t bs = 16;
  auto pool = pool_of(40, bs);
  auto a = seq_with_shuffled_table(rng, pool, 640, 13), b = seq_with_shuffled_table(rng, pool, 640, 250);
  const std::vector<int32_t> ta = {1, 2, 3, 4, 5}, tb = {6};
  std::vector<BatchItem> items = {{a.get(), ta, false}, {b.get(), tb, true}};
  BatchPlan p = BatchPlan::make(items, 100);
  ASSERT_EQ(p.n_rows, 6);
  ASSERT_EQ(p.kv_rows.size(), 6u);
  for (int64_t t = 0; t < 5; ++t) {
    const int64_t pos = 13 + t;
    EXPECT_EQ(p.kv_rows[static_cast<size_t>(t)], a->block_table()[static_cast<size_t>(pos / bs)] * bs + pos % bs);
    EXPECT_EQ(p.pos.ptr<int32_t>()[t], pos);
  }
  EXPECT_EQ(p.kv_rows[5], b->block_table()[250 / bs] * bs + 250 % bs);
  EXPECT_EQ(p.out_rows, (std::vector<int64_t>{4, 5}));
}

TEST(BatchPlan, RefusesTableEntriesOutsideThePool) {
  std::mt19937 rng(8);
  auto pool = pool_of(8, 16);
  auto s = seq_with_shuffled_table(rng, pool, 128, 20);
  s->block_table()[1] = 8;  // the block that holds positions 16..31: one past the pool
  const std::vector<int32_t> t = {1};
  std::vector<BatchItem> items = {{s.get(), t, false}};
  EXPECT_THROW(BatchPlan::make(items, 100), Error);
  s->block_table()[1] = 3;
  s->block_table()[5] = -1;  // beyond what this step reads (positions < 21): not its business
  EXPECT_NO_THROW(BatchPlan::make(items, 100));
}

TEST(BatchPlan, StageBoundsExactOrBucketed) {
  std::mt19937 rng(9);
  auto pool = pool_of(64, 16);
  auto a = seq_with_shuffled_table(rng, pool, 1024, 10);    // needs 11 keys
  auto b = seq_with_shuffled_table(rng, pool, 1024, 299);   // needs 300
  auto c = seq_with_shuffled_table(rng, pool, 400, 390);    // needs 391, capacity 400
  auto d = seq_with_shuffled_table(rng, pool, 1024, 1020);  // needs 1024 exactly
  const std::vector<int32_t> one = {1};
  std::vector<BatchItem> items = {{a.get(), one, false}, {b.get(), one, false}, {c.get(), one, false},
                                  {d.get(), {one.data(), 1}, false}};
  ops::Context cpu;
  StepArena arena;
  BatchPlan p = BatchPlan::make(items, 100);
  p.stage(cpu, items, arena, /*bucketed=*/false);
  EXPECT_EQ(p.kv_bound, (std::vector<int64_t>{11, 300, 391, 1021}));
  p.stage(cpu, items, arena, /*bucketed=*/true);
  EXPECT_EQ(p.kv_bound, (std::vector<int64_t>{256, 512, 400, 1024}));
  // On the CPU the kernels' inputs are the host data itself.
  EXPECT_EQ(p.dev.ids.data(), p.ids.data());
  EXPECT_EQ(p.dev.kv_rows.ptr<int32_t>()[1], p.kv_rows[1]);
  ASSERT_EQ(p.dev.tables.size(), 4u);
  EXPECT_EQ(arena.generation, 0u) << "the CPU needs no arena";
}

}  // namespace
}  // namespace vi
