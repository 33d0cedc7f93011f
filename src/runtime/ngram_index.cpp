#include "runtime/ngram_index.h"

#include <algorithm>

namespace vi {
namespace {

// The hash of tokens [e - n + 1, e] of `at`: an order-dependent 64-bit mix. Lookups check the
// tokens themselves, so a collision costs a fallback, never a wrong draft.
template <class At>
uint64_t ngram_hash(const At& at, int64_t e, int n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(n);
  for (int j = n - 1; j >= 0; --j) {
    h ^= static_cast<uint64_t>(static_cast<uint32_t>(at(e - j))) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
  }
  return h;
}

}  // namespace

NgramIndex::NgramIndex(int n_min, int n_max)
    : n_min_(n_min), n_max_(n_max), latest_(static_cast<size_t>(std::max(0, n_max - n_min + 1))) {}

bool NgramIndex::continues(std::span<const int32_t> history) const {
  const int64_t H = static_cast<int64_t>(history.size());
  if (H < indexed_) return false;
  const int64_t c = static_cast<int64_t>(seen_.size());
  return std::equal(seen_.begin(), seen_.end(), history.begin() + (indexed_ - c));
}

void NgramIndex::extend(std::span<const int32_t> history, int64_t upto) {
  auto at = [&](int64_t i) { return history[static_cast<size_t>(i)]; };
  for (int64_t e = indexed_; e < upto; ++e)
    for (int n = n_min_; n <= n_max_; ++n)
      if (e >= n - 1) latest_[static_cast<size_t>(n - n_min_)][ngram_hash(at, e, n)] = e;
  indexed_ = upto;
  const int64_t c = std::min(kCheck, upto);
  seen_.assign(history.begin() + (upto - c), history.begin() + upto);
}

std::vector<int32_t> NgramIndex::propose(std::span<const int32_t> history, int32_t next, int k) {
  if (k <= 0 || n_min_ < 1) return {};
  if (!continues(history)) {
    for (auto& m : latest_) m.clear();
    indexed_ = 0;
    seen_.clear();
  }
  // Earlier occurrences end inside the history (the suffix itself ends at `next`).
  extend(history, static_cast<int64_t>(history.size()));
  const int64_t L = static_cast<int64_t>(history.size()) + 1;  // history + [next]
  auto at = [&](int64_t i) { return i < L - 1 ? history[static_cast<size_t>(i)] : next; };
  for (int n = static_cast<int>(std::min<int64_t>(n_max_, L - 1)); n >= n_min_; --n) {
    const auto& m = latest_[static_cast<size_t>(n - n_min_)];
    const auto it = m.find(ngram_hash(at, L - 1, n));
    if (it == m.end()) continue;
    int64_t e = it->second;
    auto matches = [&](int64_t end) {
      for (int j = 0; j < n; ++j)
        if (at(end - j) != at(L - 1 - j)) return false;
      return true;
    };
    if (!matches(e)) {  // a hash collision: the latest true occurrence, by a scan
      e = -1;
      for (int64_t f = L - 2; f >= n - 1 && e < 0; --f)
        if (matches(f)) e = f;
      if (e < 0) continue;
    }
    std::vector<int32_t> out;
    for (int64_t i = e + 1; i < L && static_cast<int>(out.size()) < k; ++i) out.push_back(at(i));
    if (!out.empty()) return out;
  }
  return {};
}

}  // namespace vi
