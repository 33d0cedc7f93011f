// NgramIndex (the n-gram drafter's index) against a plain scan of the history for the latest
// earlier occurrence of the longest suffix: on random histories over small vocabularies (many
// repeats), grown a few tokens at a time as a generation grows them, replaced by unrelated ones
// (a new request), cut back, and with every suffix length range; and the cases a scan finds
// nothing for.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "runtime/ngram_index.h"

namespace vi {
namespace {

// The definition: for n = n_max .. n_min, the latest end e < L - 1 of history + [next] (length
// L) whose n tokens equal its last n; the tokens after e, up to k.
std::vector<int32_t> scan(const std::vector<int32_t>& history, int32_t next, int k, int n_min, int n_max) {
  const int64_t L = static_cast<int64_t>(history.size()) + 1;
  auto at = [&](int64_t i) { return i < L - 1 ? history[static_cast<size_t>(i)] : next; };
  for (int n = static_cast<int>(std::min<int64_t>(n_max, L - 1)); n >= n_min; --n) {
    for (int64_t e = L - 2; e >= n - 1; --e) {
      bool match = true;
      for (int j = 0; j < n && match; ++j) match = at(e - j) == at(L - 1 - j);
      if (!match) continue;
      std::vector<int32_t> out;
      for (int64_t i = e + 1; i < L && static_cast<int>(out.size()) < k; ++i) out.push_back(at(i));
      if (!out.empty()) return out;
    }
  }
  return {};
}

TEST(NgramIndex, ProposesWhatAScanOfTheHistoryFinds) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  int proposals = 0, found = 0;
  for (auto [n_min, n_max] : {std::pair{2, 4}, {1, 1}, {1, 6}, {3, 3}}) {
    NgramIndex index(n_min, n_max);
    for (int trial = 0; trial < 12; ++trial) {
      const int32_t V = 2 + static_cast<int32_t>(rng() % 12);
      std::uniform_int_distribution<int32_t> tok(0, V - 1);
      std::vector<int32_t> h(rng() % 5);
      for (auto& t : h) t = tok(rng);
      for (int step = 0; step < 150; ++step) {
        const int32_t next = tok(rng);
        const int k = 1 + static_cast<int>(rng() % 7);
        const auto want = scan(h, next, k, n_min, n_max);
        ASSERT_EQ(index.propose(h, next, k), want)
            << "history of " << h.size() << " tokens, n " << n_min << ".." << n_max << ", k " << k;
        ++proposals;
        found += !want.empty();
        // The generation goes on: next and a few more tokens join the history; sometimes the
        // history is cut back (a turn edited) instead.
        if (rng() % 20 == 0 && h.size() > 10) {
          h.resize(h.size() - 1 - rng() % 8);
        } else {
          h.push_back(next);
          for (int extra = static_cast<int>(rng() % 3); extra > 0; --extra) h.push_back(tok(rng));
        }
      }
    }
  }
  EXPECT_GT(found, proposals / 4) << "too few histories with a repeat to test anything";
  EXPECT_LT(found, proposals) << "no history without a repeat";
}

TEST(NgramIndex, NothingWithoutAnEarlierOccurrence) {
  NgramIndex index(2, 4);
  EXPECT_TRUE(index.propose({}, 5, 3).empty());
  EXPECT_TRUE(index.propose(std::vector<int32_t>{5}, 5, 3).empty());  // "5 5" never before
  EXPECT_EQ(index.propose(std::vector<int32_t>{5, 5}, 5, 3), (std::vector<int32_t>{5}));  // "5 5" at 0..1
  EXPECT_TRUE(index.propose(std::vector<int32_t>{1, 2, 3}, 4, 3).empty());
  EXPECT_TRUE(index.propose(std::vector<int32_t>{1, 2, 3}, 2, 0).empty());  // k = 0
}

}  // namespace
}  // namespace vi
