// PrefixIndex: chained keys, exact-token checks on lookup, the longest resumable prefix
// for attention-only models (block boundaries) and hybrid ones (snapshots only), and a
// prompt that diverges in the middle of a block.
#include <gtest/gtest.h>

#include <random>

#include "runtime/prefix_cache.h"

namespace vi {
namespace {

std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 1000);
  return t;
}

// Publishes the full blocks of `toks` (as KvCache::commit would) and returns their keys.
std::vector<uint64_t> publish(PrefixIndex& idx, const std::vector<int32_t>& toks, int64_t bs) {
  std::vector<uint64_t> keys{kRootKey};
  for (size_t j = 0; (j + 1) * bs <= toks.size(); ++j) {
    std::span<const int32_t> b(toks.data() + j * bs, static_cast<size_t>(bs));
    keys.push_back(chain_key(keys.back(), b));
    idx.add_block(keys.back(), keys[j], b, {Tier::kDevice, static_cast<int32_t>(j)});
  }
  return keys;
}

TEST(ChainKey, DependsOnParentAndEveryToken) {
  std::vector<int32_t> a{1, 2, 3, 4}, b{1, 2, 3, 5};
  EXPECT_NE(chain_key(kRootKey, a), chain_key(kRootKey, b));
  EXPECT_NE(chain_key(kRootKey, a), chain_key(chain_key(kRootKey, a), a));
  EXPECT_EQ(chain_key(kRootKey, a), chain_key(kRootKey, std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_NE(chain_key(kRootKey, std::vector<int32_t>{1, 2}), chain_key(kRootKey, std::vector<int32_t>{2, 1}));
}

TEST(PrefixIndex, AttentionOnlyResumesAtLastMatchedBoundary) {
  std::mt19937 rng(std::random_device{}());
  const int64_t bs = 8;
  auto conv = random_tokens(rng, 45);  // 5 full blocks + 5
  PrefixIndex idx;
  publish(idx, conv, bs);
  EXPECT_EQ(idx.n_blocks(), 5u);
  // Same conversation plus more: all 5 blocks.
  auto longer = conv;
  longer.insert(longer.end(), {7, 8, 9});
  auto m = idx.longest_match(longer, bs, static_cast<int64_t>(longer.size()) - 1, false);
  EXPECT_EQ(m.pos, 40);
  EXPECT_EQ(m.keys.size(), 6u);
  // Diverges inside block 3 (token 27): resumes at 24, the start of that block.
  auto div = conv;
  div[27] += 1;
  EXPECT_EQ(idx.longest_match(div, bs, 44, false).pos, 24);
  // Diverges at token 0: nothing.
  div = conv;
  div[0] += 1;
  EXPECT_EQ(idx.longest_match(div, bs, 44, false).pos, 0);
  // The last token is never covered: a 40-token prompt can reuse 32 at most.
  std::vector<int32_t> exact(conv.begin(), conv.begin() + 40);
  EXPECT_EQ(idx.longest_match(exact, bs, 39, false).pos, 32);
  // Without snapshots a hybrid model cannot resume at all.
  EXPECT_EQ(idx.longest_match(longer, bs, 47, true).pos, 0);
}

TEST(PrefixIndex, HybridResumesOnlyAtMatchingSnapshots) {
  std::mt19937 rng(std::random_device{}());
  const int64_t bs = 4;
  auto conv = random_tokens(rng, 30);
  PrefixIndex idx;
  auto keys = publish(idx, conv, bs);  // 7 blocks
  // Snapshots at 8 (aligned), 16 (aligned) and at 27 (end of turn: 24 + tail of 3).
  idx.add_snapshot(keys[2], 8, {}, {Tier::kDevice, 0});
  const uint64_t s16 = idx.add_snapshot(keys[4], 16, {}, {Tier::kHost, 1});
  std::span<const int32_t> tail(conv.data() + 24, 3);
  const uint64_t s27 = idx.add_snapshot(keys[6], 27, tail, {Tier::kDevice, 2});

  auto next = conv;
  next.resize(27);
  next.insert(next.end(), {5, 6, 7, 8});  // the next turn: 27 old tokens + new ones
  auto m = idx.longest_match(next, bs, static_cast<int64_t>(next.size()) - 1, true);
  EXPECT_EQ(m.pos, 27);
  ASSERT_NE(m.snap, nullptr);
  EXPECT_EQ(m.snap->id, s27);
  // Diverges inside the tail (token 26): falls back to the snapshot at 16.
  auto div = next;
  div[26] += 1;
  m = idx.longest_match(div, bs, static_cast<int64_t>(div.size()) - 1, true);
  EXPECT_EQ(m.pos, 16);
  EXPECT_EQ(m.snap->id, s16);
  EXPECT_EQ(m.snap->loc.tier, Tier::kHost);
  // Diverges in block 3 (token 13): the snapshot at 8.
  div = next;
  div[13] += 1;
  EXPECT_EQ(idx.longest_match(div, bs, 30, true).pos, 8);
  // A prompt ending right at a snapshot may not use it (its last token must be computed).
  std::vector<int32_t> upto16(conv.begin(), conv.begin() + 16);
  EXPECT_EQ(idx.longest_match(upto16, bs, 15, true).pos, 8);
  // Attention-only lookup also uses a tail snapshot past the last full block.
  EXPECT_EQ(idx.longest_match(next, bs, 30, false).pos, 27);
  // Erasing a snapshot forgets it.
  idx.erase_snapshot(s27);
  EXPECT_EQ(idx.longest_match(next, bs, 30, true).pos, 16);
}

TEST(PrefixIndex, KeyCollisionIsAMiss) {
  PrefixIndex idx;
  std::vector<int32_t> a{1, 2, 3, 4}, b{9, 9, 9, 9};
  const uint64_t ka = chain_key(kRootKey, a);
  // Pretend b's content was stored under a's key (a collision): a lookup for a must miss.
  ASSERT_TRUE(idx.add_block(ka, kRootKey, b, {Tier::kDevice, 0}));
  EXPECT_FALSE(idx.add_block(ka, kRootKey, a, {Tier::kDevice, 1}));  // taken
  EXPECT_EQ(idx.find_block(ka, kRootKey, a), nullptr);
  std::vector<int32_t> prompt{1, 2, 3, 4, 5};
  EXPECT_EQ(idx.longest_match(prompt, 4, 4, false).pos, 0);
}

}  // namespace
}  // namespace vi
