// Prompt-lookup drafts (speculative decoding's n-gram drafter) from an index of the history's
// n-grams, so that a round costs the length of the suffixes looked up, not of the history: at
// 100K+ tokens a scan of the history each round took milliseconds, as long as a GPU round.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace vi {

class NgramIndex {
 public:
  NgramIndex(int n_min, int n_max);
  // Up to k tokens that followed the latest earlier occurrence of the longest suffix (n_max ..
  // n_min tokens) of history + [next]: the tokens after that occurrence, through `next`. Empty
  // when no such suffix occurred before. The index follows `history` as it grows; a history
  // that is not the indexed one grown (a new request, a cut) is indexed again from its start.
  std::vector<int32_t> propose(std::span<const int32_t> history, int32_t next, int k);

 private:
  // Indexes every n-gram that ends before `upto` (ends at indexed_ .. upto - 1).
  void extend(std::span<const int32_t> history, int64_t upto);
  // Whether `history` is the indexed history grown: its length is at least what was indexed and
  // its last kCheck indexed tokens are those seen (a cheap check: a stale index only costs
  // drafts, which the verify pass refuses; it never changes the output).
  bool continues(std::span<const int32_t> history) const;

  static constexpr int64_t kCheck = 32;
  int n_min_, n_max_;
  std::vector<std::unordered_map<uint64_t, int64_t>> latest_;  // [n - n_min]: n-gram hash -> its latest end
  int64_t indexed_ = 0;                                           // n-grams ending before this are indexed
  std::vector<int32_t> seen_;  // the last kCheck indexed tokens
};

}  // namespace vi
