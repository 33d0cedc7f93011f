// parallel/shard_plan: the splits every tensor-parallel rank computes on its own. The ranks never
// exchange their ranges, so each split must be a function of (n, world, rank) alone that tiles
// the axis exactly: a gap loses rows of a weight, an overlap counts them twice in the all-reduce.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/shard_plan.h"

namespace vi::parallel {
namespace {

// Every rank's range for one split, checked to tile [0, n) in rank order.
void expect_tiles(const std::vector<Range>& parts, int64_t n, const std::string& where) {
  ASSERT_FALSE(parts.empty()) << where;
  EXPECT_EQ(parts.front().begin, 0) << where;
  EXPECT_EQ(parts.back().end, n) << where;
  for (size_t r = 0; r < parts.size(); ++r) {
    EXPECT_GT(parts[r].size(), 0) << where << " rank " << r << " holds nothing";
    if (r > 0) {
      EXPECT_EQ(parts[r].begin, parts[r - 1].end) << where << " rank " << r << " is not contiguous";
    }
  }
}

std::vector<Range> ranges(int64_t n, int world) {
  std::vector<Range> parts;
  for (int r = 0; r < world; ++r) parts.push_back(split_range(n, world, r, "rows"));
  return parts;
}

// Small n by exhaustion and large ones at random: contiguous, in rank order, covering [0, n),
// sizes within one of each other with the larger ones first (the documented "first n % world
// ranks one unit more", which the other splits and the checkpoint slicing rely on).
TEST(ShardPlan, SplitRangeTilesEvenlyInRankOrder) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> big(1, int64_t(1) << 40);
  for (int world = 1; world <= kMaxWorld; ++world) {
    std::vector<int64_t> ns;
    for (int64_t n = world; n <= 200; ++n) ns.push_back(n);
    for (int i = 0; i < 50; ++i) ns.push_back(world + big(rng));
    for (int64_t n : ns) {
      const std::string where = "n=" + std::to_string(n) + " world=" + std::to_string(world);
      const std::vector<Range> parts = ranges(n, world);
      expect_tiles(parts, n, where);
      int64_t lo = parts[0].size(), hi = parts[0].size();
      for (int r = 0; r < world; ++r) {
        lo = std::min(lo, parts[r].size());
        hi = std::max(hi, parts[r].size());
        EXPECT_EQ(parts[r].size(), n / world + (r < n % world ? 1 : 0)) << where << " rank " << r;
      }
      EXPECT_LE(hi - lo, 1) << where;
    }
  }
}

TEST(ShardPlan, SplitRangeKnownValues) {
  // 10 over 4: 3, 3, 2, 2.
  const std::vector<Range> p = ranges(10, 4);
  const int64_t want[][2] = {{0, 3}, {3, 6}, {6, 8}, {8, 10}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(p[r].begin, want[r][0]) << "rank " << r;
    EXPECT_EQ(p[r].end, want[r][1]) << "rank " << r;
  }
}

// Bad groups fail loudly rather than giving a rank an empty or out-of-range slice.
TEST(ShardPlan, SplitRangeRejectsBadGroups) {
  EXPECT_THROW(split_range(16, 0, 0, "rows"), Error);
  EXPECT_THROW(split_range(16, -1, 0, "rows"), Error);
  EXPECT_THROW(split_range(16, kMaxWorld + 1, 0, "rows"), Error);
  EXPECT_NO_THROW(split_range(16, kMaxWorld, kMaxWorld - 1, "rows"));
  EXPECT_THROW(split_range(16, 4, -1, "rows"), Error);
  EXPECT_THROW(split_range(16, 4, 4, "rows"), Error);
  EXPECT_THROW(split_range(3, 4, 0, "rows"), Error);  // a rank would hold nothing
  EXPECT_THROW(split_range(0, 1, 0, "rows"), Error);
  EXPECT_THROW(split_range(-5, 2, 0, "rows"), Error);
  EXPECT_NO_THROW(split_range(4, 4, 3, "rows"));  // exactly one unit each is fine
  // The message names what could not be split (the user sees it for a model too small for -tp).
  try {
    split_range(2, 3, 0, "KV heads");
    ADD_FAILURE() << "2 units over 3 ranks did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV heads"), std::string::npos) << e.what();
  }
}

// Cut points on block boundaries (a quantized row cannot be cut inside a block), covering n,
// and the same proportions as split_range over the blocks.
TEST(ShardPlan, SplitBlocksCutsOnBlockBoundaries) {
  for (int64_t block : {1, 32, 256}) {
    for (int world = 1; world <= kMaxWorld; ++world) {
      for (int64_t blocks = world; blocks <= 40; ++blocks) {
        const int64_t n = blocks * block;
        const std::string where =
            "n=" + std::to_string(n) + " block=" + std::to_string(block) + " world=" + std::to_string(world);
        std::vector<Range> parts;
        for (int r = 0; r < world; ++r) {
          const Range b = split_blocks(n, block, world, r, "columns");
          EXPECT_EQ(b.begin % block, 0) << where << " rank " << r;
          EXPECT_EQ(b.end % block, 0) << where << " rank " << r;
          const Range u = split_range(blocks, world, r, "columns");
          EXPECT_EQ(b.begin, u.begin * block) << where << " rank " << r;
          EXPECT_EQ(b.end, u.end * block) << where << " rank " << r;
          parts.push_back(b);
        }
        expect_tiles(parts, n, where);
      }
    }
  }
}

TEST(ShardPlan, SplitBlocksRejectsPartialBlocksAndTooFewBlocks) {
  EXPECT_THROW(split_blocks(100, 32, 2, 0, "columns"), Error);  // 100 is not whole blocks of 32
  EXPECT_THROW(split_blocks(256 + 1, 256, 1, 0, "columns"), Error);
  EXPECT_THROW(split_blocks(64, 0, 1, 0, "columns"), Error);
  EXPECT_THROW(split_blocks(64, 32, 3, 0, "columns"), Error);  // 2 blocks over 3 ranks
  EXPECT_THROW(split_blocks(64, 32, kMaxWorld + 1, 0, "columns"), Error);
  EXPECT_THROW(split_blocks(64, 32, 2, 2, "columns"), Error);
  EXPECT_NO_THROW(split_blocks(64, 32, 2, 1, "columns"));
}

// A rank's query heads are exactly the groups of its KV heads, so attention is local.
TEST(ShardPlan, SplitHeadsKeepsQueryGroupsWithTheirKvHead) {
  // 9 heads over 3 KV heads (groups of 3), 2 ranks: the first takes two KV heads, the second one.
  HeadShard s0 = split_heads(9, 3, 2, 0), s1 = split_heads(9, 3, 2, 1);
  EXPECT_EQ(s0.kv_heads.begin, 0);
  EXPECT_EQ(s0.kv_heads.end, 2);
  EXPECT_EQ(s0.q_heads.begin, 0);
  EXPECT_EQ(s0.q_heads.end, 6);
  EXPECT_EQ(s1.kv_heads.begin, 2);
  EXPECT_EQ(s1.kv_heads.end, 3);
  EXPECT_EQ(s1.q_heads.begin, 6);
  EXPECT_EQ(s1.q_heads.end, 9);

  for (int64_t n_kv = 1; n_kv <= 16; ++n_kv) {
    for (int64_t group = 1; group <= 8; ++group) {
      const int64_t n_head = n_kv * group;
      for (int world = 1; world <= std::min<int64_t>(n_kv, kMaxWorld); ++world) {
        const std::string where = "n_head=" + std::to_string(n_head) + " n_kv=" + std::to_string(n_kv) +
                                  " world=" + std::to_string(world);
        std::vector<Range> kv, q;
        for (int r = 0; r < world; ++r) {
          const HeadShard s = split_heads(n_head, n_kv, world, r);
          kv.push_back(s.kv_heads);
          q.push_back(s.q_heads);
          // Query head h reads KV head h / group: it must be one this rank holds, and every
          // query head of each held KV head must be here.
          for (int64_t h = s.q_heads.begin; h < s.q_heads.end; ++h) {
            EXPECT_GE(h / group, s.kv_heads.begin) << where << " rank " << r << " head " << h;
            EXPECT_LT(h / group, s.kv_heads.end) << where << " rank " << r << " head " << h;
          }
          EXPECT_EQ(s.q_heads.size(), s.kv_heads.size() * group) << where << " rank " << r;
        }
        expect_tiles(kv, n_kv, where + " (kv)");
        expect_tiles(q, n_head, where + " (q)");
      }
    }
  }
}

// More ranks than KV heads, a whole number per KV head: each rank holds one KV head (a copy) and a
// share of its query heads; together the ranks cover every query head once.
TEST(ShardPlan, SplitHeadsSharesKvHeadsAmongRanks) {
  // 2 KV heads, groups of 3, 4 ranks: ranks 0 and 1 hold KV head 0 with query heads 0-1 and 2,
  // ranks 2 and 3 KV head 1 with 3-4 and 5.
  const int64_t want[4][4] = {{0, 1, 0, 2}, {0, 1, 2, 3}, {1, 2, 3, 5}, {1, 2, 5, 6}};
  for (int r = 0; r < 4; ++r) {
    const HeadShard s = split_heads(6, 2, 4, r);
    EXPECT_EQ(s.kv_heads.begin, want[r][0]) << r;
    EXPECT_EQ(s.kv_heads.end, want[r][1]) << r;
    EXPECT_EQ(s.q_heads.begin, want[r][2]) << r;
    EXPECT_EQ(s.q_heads.end, want[r][3]) << r;
  }
  for (int64_t n_kv = 1; n_kv <= 4; ++n_kv)
    for (int64_t group = 1; group <= 8; ++group)
      for (int world = static_cast<int>(n_kv) + 1; world <= kMaxWorld; ++world) {
        if (world % n_kv != 0 || group < world / n_kv) continue;
        std::vector<Range> q;
        for (int r = 0; r < world; ++r) {
          const HeadShard s = split_heads(n_kv * group, n_kv, world, r);
          EXPECT_EQ(s.kv_heads.size(), 1);
          for (int64_t h = s.q_heads.begin; h < s.q_heads.end; ++h) EXPECT_EQ(h / group, s.kv_heads.begin);
          q.push_back(s.q_heads);
        }
        expect_tiles(q, n_kv * group, "shared KV heads");
      }
}

TEST(ShardPlan, SplitHeadsRejectsUnsplittableAttention) {
  EXPECT_THROW(split_heads(8, 2, 3, 0), Error);   // 3 ranks, 2 KV heads: not a whole number a KV head
  EXPECT_THROW(split_heads(2, 1, 4, 0), Error);   // 4 ranks sharing 1 KV head with 2 query heads
  EXPECT_THROW(split_heads(32, 8, 16, 0), Error);  // beyond kMaxWorld and beyond n_kv
  EXPECT_THROW(split_heads(10, 3, 1, 0), Error);  // 10 query heads do not group over 3
  EXPECT_THROW(split_heads(9, 0, 1, 0), Error);
  EXPECT_THROW(split_heads(9, 3, 2, 2), Error);   // rank out of range
  EXPECT_NO_THROW(split_heads(8, 2, 2, 1));
}

}  // namespace
}  // namespace vi::parallel
